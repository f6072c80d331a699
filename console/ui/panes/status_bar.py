"""The top line: where the run is, whether the link to it is up, how fresh the data is, and the verdict."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console.model import ConnectionStatus
from console.ui.panes.styles import text_style
from console.ui.run_figures import StatusView


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
        """The verdict first and the read-only badge next, so a narrow terminal cuts only where
        the run is (the ellipsis at the end), never what is wrong or that keys are disabled."""
        sep = (" │ ", self._style("dim"))
        where = view.host + (f" · {view.container}" if view.container else "")
        level = {
            ConnectionStatus.CONNECTED: "ok",
            ConnectionStatus.CONNECTING: "warn",
            ConnectionStatus.RECONNECTING: "warn",
            ConnectionStatus.FAILED: "crit",
        }[view.status]
        dot = "●" if view.status is ConnectionStatus.CONNECTED else "○"
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append(" ◆ ", self._style("brand"))
        if view.verdict:
            text.append(view.verdict, self._style(view.verdict_level))
            room = self.size.width - len(view.verdict) - 5 - (12 if view.read_only else 0)
            if view.verdict_summary and len(view.verdict_summary) + 2 <= room:
                text.append(f": {view.verdict_summary}")
            text.append(*sep)
        else:
            text.append("pulse", self._style("brand"))
            text.append(*sep)
        if view.read_only:
            text.append("read-only", self._style("warn"))
            text.append(*sep)
        text.append(f"{dot} {view.connection}", self._style(level))
        text.append(*sep)
        if view.sample_age_s is None:
            text.append("no sample yet", self._style("dim"))
        else:
            age_level = "dim" if view.sample_age_s < 5 else "warn" if view.sample_age_s < 30 else "crit"
            text.append(f"sample {view.sample_age_s} s ago", self._style(age_level))
        text.append(*sep)
        text.append(view.run, "bold")
        text.append(" on ")
        text.append(where)
        return text

    def on_resize(self) -> None:
        self._repaint(layout=False)
