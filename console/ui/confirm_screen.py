"""A plan and a yes/no question: nothing mutating runs before the operator has read what it will do."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from console.ui.modal import FramedModal
from textual.widgets import Button, Static


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

    def __init__(self, title: str, lines: list[str], *, question: str = "Run this plan?", dangerous: bool = False) -> None:
        super().__init__(classes="-dangerous" if dangerous else None)
        self.plan_title = title
        self.lines = lines
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="frame") as box:
            box.border_title = self.plan_title
            with VerticalScroll():
                yield Static(Text("\n".join(self.lines), no_wrap=True, overflow="ellipsis"))
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
