"""The help screen: every wired action's key and what it does, from the action table."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.ui.keymap import GROUPS, ActionSpec
from console.ui.dialogs.modal import FramedModal


def help_table(specs: tuple[ActionSpec, ...], *, read_only: bool) -> Table:
    """The keys grouped by what they act on, one line each."""
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold")
    table.add_column()
    for group in GROUPS:
        members = [spec for spec in specs if spec.group == group]
        if not members:
            continue
        table.add_row("", Text(group, style="bold underline"))
        for spec in members:
            line = Text(spec.help)
            if read_only and spec.mutating:
                line.append("  (disabled: read-only)", style="dim")
            table.add_row(Text(spec.help_keys or spec.key_display), line)
        table.add_row("", "")
    return table


class HelpScreen(FramedModal[None]):
    """Keys and actions; any of Esc, q, ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    DEFAULT_CSS = """
    HelpScreen {
        & > .frame { width: 104; max-width: 95%; height: auto; max-height: 90%; padding: 1 2; }
    }
    """

    def __init__(self, specs: tuple[ActionSpec, ...], *, read_only: bool = False) -> None:
        super().__init__()
        self.specs = specs
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="frame") as scroll:
            scroll.border_title = "Pulse keys"
            scroll.border_subtitle = "Esc closes · ctrl+p searches actions and themes"
            yield Static(help_table(self.specs, read_only=self.read_only))
