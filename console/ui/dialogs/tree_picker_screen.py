"""Pick the run among the unrelated process trees its match found (k9s-style): one root, or all of them.

The restart plan refuses to choose between trees itself (console.actions.guards.choose_tree); the
CLI takes --root PID or --all-roots, the console this picker. The answer plans the restart again
with that choice, and the usual confirmation follows: nothing is signalled from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from console.actions.guards import ProcessTree, describe_gpu_use
from console.observe.roles import script_and_args
from console.observe.textsafe import visible
from console.ui.dialogs.modal import FramedModal
from console.units import format_duration

#: The row key of the last row: every tree.
ALL_ROOTS = "all"


@dataclass(frozen=True, slots=True)
class RootChoice:
    """The operator's pick: the root of the tree that is the run, or None for every tree."""

    root: int | None


#: How much of what a tree runs its row shows (the highlighted tree's whole command is under the table).
RUNS_CHARS = 30


def tree_row(tree: ProcessTree) -> tuple[Text, ...]:
    """One table row: root PID, age, processes, GPU memory, whether it is the run, what it runs."""
    runs = visible(script_and_args(tree.command))
    the_run = "yes ←" if tree.the_run else "maybe" if tree.evidence else "—"
    return (
        Text(str(tree.root), style="bold" if tree.the_run else ""),
        Text(format_duration(tree.elapsed_s, compact=True), justify="right"),
        Text(str(len(tree.pids)), justify="right"),
        Text(describe_gpu_use(tree.gpu_use) if tree.gpu_use else "—"),
        Text(the_run, style="bold" if tree.the_run else ""),
        Text(runs if len(runs) <= RUNS_CHARS else runs[: RUNS_CHARS - 1] + "…"),
    )


def tree_detail(tree: ProcessTree) -> list[str]:
    """Under the table, for the highlighted tree: what marks it as the run, and its whole command line."""
    signs = ", ".join(tree.evidence) or "nothing marks it as the run (no GPU memory, no output into the run's log)"
    taken = "taken for the run: " if tree.the_run else ""
    return [f"PID {tree.root}: {taken}{signs}", tree.command]


class TreePickerScreen(FramedModal[RootChoice | None]):
    """Lists `trees` and a last row for all of them; Enter picks the row, `a` all roots, Esc cancels.

    The cursor starts on the tree the plan took for the run, when one alone looks like it.
    `note`: why the picker is shown again (the tree picked before is gone).
    """

    BINDINGS = [
        Binding("escape,q", "dismiss(None)", "Cancel", show=False),
        Binding("a", "all_roots", "All roots", show=False),
    ]

    DEFAULT_CSS = """
    TreePickerScreen {
        & > .frame { width: 96%; max-width: 140; height: auto; max-height: 90%; }
        & #question { margin: 0 0 1 0; }
        & #note { color: $warning; margin: 0 0 1 0; }
        /* RUNS may run past a narrow frame: the highlighted tree's whole command is under the table. */
        & DataTable { height: auto; max-height: 16; scrollbar-size-horizontal: 0; }
        & #command { margin: 1 0 0 0; color: $text-muted; }
    }
    """

    def __init__(self, trees: Sequence[ProcessTree], *, note: str | None = None) -> None:
        super().__init__()
        self.trees = tuple(trees)
        self.note = note

    def compose(self) -> ComposeResult:
        with Vertical(classes="frame") as box:
            box.border_title = f"Restart: the match found {len(self.trees)} unrelated process trees"
            box.border_subtitle = "Enter picks the run · a all roots · Esc cancels"
            if self.note:
                yield Static(Text(visible(self.note)), id="note")
            yield Static("Which tree is the run? The others are left alone. The plan and a confirmation follow.",
                         id="question")
            yield DataTable(cursor_type="row", zebra_stripes=False)
            yield Static(id="command")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("ROOT PID", "AGE", "PROCS", "GPU MEMORY", "THE RUN?", "RUNS")
        for tree in self.trees:
            table.add_row(*tree_row(tree), key=str(tree.root))
        every = sum(len(tree.pids) for tree in self.trees)
        table.add_row(Text("all", style="bold"), Text(""), Text(str(every), justify="right"), Text(""), Text(""),
                      Text("every tree (all roots)"), key=ALL_ROOTS)
        table.move_cursor(row=next((i for i, tree in enumerate(self.trees) if tree.the_run), 0))
        table.focus()

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        """What marks the highlighted tree as the run, and its whole command line (the row shows what it runs)."""
        tree = next((t for t in self.trees if str(t.root) == event.row_key.value), None)
        said = tree_detail(tree) if tree is not None else [f"all roots: stop all {len(self.trees)} trees, then launch the run once"]
        self.query_one("#command", Static).update(Text("\n".join(map(visible, said)), overflow="fold"))

    def action_all_roots(self) -> None:
        self.dismiss(RootChoice(None))

    @on(DataTable.RowSelected)
    def _picked(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        self.dismiss(RootChoice(None if key == ALL_ROOTS else int(str(key))))
