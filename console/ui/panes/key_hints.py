"""The footer: every key the screen offers now, as a grid of hints wrapped to the width.

Textual's Footer is one scrolling row: a narrow terminal cuts its last keys (or a key in half).
Here each hint is whole, and a line that is full wraps to the next (k9s's key grid, in the
table's order: run_figures.key_hint_lines). Read from the screen's public `active_bindings`,
redrawn when its `bindings_updated_signal` says they changed (focus moved, a mode hid keys).
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from console.ui.panes.styles import text_style
from console.ui.run_figures import HINT_GAP, KeyHint, key_hint_lines


class KeyHints(Widget):
    """The keys of the current screen's shown bindings, one hint per action, wrapped to the width."""

    COMPONENT_CLASSES = {"key-hints--key", "key-hints--description", "key-hints--disabled"}

    DEFAULT_CSS = """
    KeyHints {
        height: auto;
        background: $footer-background;
        color: $footer-foreground;
        & > .key-hints--key { color: $footer-key-foreground; text-style: bold; }
        & > .key-hints--description { color: $footer-description-foreground; }
        & > .key-hints--disabled { color: $text-disabled; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hints: tuple[KeyHint, ...] = ()
        self.disabled_keys: frozenset[str] = frozenset()
        """Keys shown but not enabled now (check_action said None): drawn dimmed."""

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: object) -> None:
        hints: dict[str, KeyHint] = {}  # one per action: `?` and F1 are one hint
        disabled = set()
        palette = None
        for key, (_, binding, enabled, _) in self.screen.active_bindings.items():
            shown = (self.app.get_key_display(binding), binding.description)
            if key == self.app.COMMAND_PALETTE_BINDING and self.app.ENABLE_COMMAND_PALETTE:
                palette = shown  # last, as Textual's footer puts it
            elif binding.show and binding.action not in hints:
                hints[binding.action] = shown
            else:
                continue
            if not enabled:
                disabled.add(shown[0])
        shown_hints = tuple(hints.values()) + ((palette,) if palette else ())
        if (shown_hints, disabled) != (self.hints, self.disabled_keys):
            self.hints, self.disabled_keys = shown_hints, frozenset(disabled)
            self.refresh(layout=True)

    def lines(self, width: int) -> list[list[KeyHint]]:
        """The hints as they are laid out `width` cells wide."""
        return key_hint_lines(self.hints, width)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(len(self.lines(width)), 1)

    def render(self) -> Text:
        key, description, disabled = (text_style(self, f"key-hints--{name}") for name in ("key", "description", "disabled"))
        text = Text(no_wrap=True, end="")
        for number, line in enumerate(self.lines(self.size.width)):
            text.append("\n " if number else " ")
            for index, (shown, does) in enumerate(line):
                dim = shown in self.disabled_keys
                text.append(" " * HINT_GAP if index else "")
                text.append(shown, disabled if dim else key)
                text.append(f" {does}", disabled if dim else description)
        return text
