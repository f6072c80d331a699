"""The top line: where the run is, whether the link to it is up, how fresh the data is, and the verdict."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console.ui.panes.styles import text_style
from console.ui.run_figures import StatusView, header_runs


class StatusBar(Static):
    """A one-line header; dumb: `show(StatusView)`."""

    COMPONENT_CLASSES = {
        "status-bar--brand",
        "status-bar--ok",
        "status-bar--warn",
        "status-bar--crit",
        "status-bar--dim",
    }

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $foreground;
        & > .status-bar--brand { color: $primary; text-style: bold; }
        & > .status-bar--ok { color: $success; }
        & > .status-bar--warn { color: $warning; text-style: bold; }
        & > .status-bar--crit { color: $error; text-style: bold; }
        & > .status-bar--dim { color: $text-muted; }
    }
    """

    #: The runs' styles that are component classes (the others are Rich styles: `bold`, plain).
    STYLED = frozenset({"brand", "ok", "warn", "crit", "dim"})

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: StatusView | None = None

    def show(self, view: StatusView) -> None:
        """Repaint from `view` when it changed."""
        if view == self.view:
            return
        self.view = view
        self._repaint(layout=False)  # one row, always: no layout needed

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._repaint(layout=True)

    def _repaint(self, *, layout: bool) -> None:
        if self.view is None:
            return
        try:
            text = self._render_view(self.view)
        except KeyError:  # a view shown before the stylesheet reached this widget: notify_style_update paints it
            return
        self.update(text, layout=layout)

    def _style(self, name: str):
        return text_style(self, f"status-bar--{name}")

    def _render_view(self, view: StatusView) -> Text:
        """The header as run_figures.header_runs fits it to the width: the verdict first and the
        read-only badge next; the verdict's reason is elided before the host is cut."""
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        for words, style in header_runs(view, self.size.width):
            text.append(words, self._style(style) if style in self.STYLED else style)
        return text

    def on_resize(self) -> None:
        self._repaint(layout=False)
