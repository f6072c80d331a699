"""A plan and a yes/no question: nothing mutating runs before the operator has read what it will do.

Every line is shown as `visible` writes it and wraps instead of being cut, so the whole command
is on screen, control characters escaped. A plan whose command holds control characters asks
about that escaped form by name (console.actions.shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Static

from console.observe.textsafe import visible
from console.ui.dialogs.modal import FramedModal

if TYPE_CHECKING:  # the actions load when one is planned, not with the console
    from console.actions.shown import HiddenControls


class ConfirmScreen(FramedModal[bool]):
    """Shows `lines` (a plan's `describe()`), answers True for y / Run, False for n / Esc."""

    BINDINGS = [
        Binding("y", "answer(True)", "Run", show=False),
        Binding("n,escape", "answer(False)", "Cancel", show=False),
    ]

    DEFAULT_CSS = """
    ConfirmScreen {
        & > .frame { width: 90%; max-width: 120; height: auto; max-height: 90%; }
        &.-dangerous > .frame { border: round $error; border-title-color: $error; }
        & VerticalScroll { height: auto; max-height: 30; }
        & #question { margin: 1 0 0 0; text-style: bold; }
        & Horizontal { height: auto; align-horizontal: right; }
        & Button { margin: 0 0 0 2; }
    }
    """

    def __init__(
        self,
        title: str,
        lines: list[str],
        *,
        question: str = "Run this plan?",
        dangerous: bool = False,
        hidden: Sequence[HiddenControls] = (),
    ) -> None:
        super().__init__(classes="-dangerous" if dangerous or hidden else None)
        self.plan_title = title
        self.lines = [visible(line) for line in lines]
        if hidden:
            from console.actions.shown import confirm_question

            question = confirm_question(hidden)
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="frame") as box:
            box.border_title = self.plan_title
            with VerticalScroll():
                yield Static(Text("\n".join(self.lines), overflow="fold"))
            yield Static(f"{self.question}  y = run, n / Esc = cancel", id="question")
            with Horizontal():
                yield Button("Cancel", id="no")
                yield Button("Run", id="yes", variant="error" if self.has_class("-dangerous") else "primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
