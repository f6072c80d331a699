"""Choose a signal for one process (htop's and nvitop's `k`): the answer is its name, or None."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.actions.signal import SIGNALS
from console.observe.textsafe import visible
from console.ui.dialogs.modal import FramedModal


class SignalScreen(FramedModal[str | None]):
    """Lists SIGNALS; Enter picks one (a plan and a confirmation follow), Esc cancels."""

    BINDINGS = [Binding("escape,q", "dismiss(None)", "Cancel", show=False)]

    DEFAULT_CSS = """
    SignalScreen {
        & > .frame { width: 80; max-width: 95%; height: auto; max-height: 90%; }
        & OptionList { height: auto; max-height: 12; border: none; }
    }
    """

    def __init__(self, pid: int, command: str) -> None:
        super().__init__()
        self.pid = pid
        self.command = command

    def compose(self) -> ComposeResult:
        with Vertical(classes="frame") as box:
            box.border_title = Text(visible(f"Signal pid {self.pid}: {self.command}"))
            box.border_subtitle = "Enter chooses (then the plan, then y to send) · Esc cancels"
            yield OptionList(*(Option(Text(f"SIG{name:<5} {what}"), id=name) for name, what in SIGNALS.items()))

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
