"""The run's processes: a table updated in place, so the cursor stays where the operator left it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console.model import ProcessReading
from console.observe.roles import script_and_args
from console.ui.styles import text_style
from console.units import format_duration, format_gib

#: How many vanished processes stay listed (marked gone) after they disappear.
MAX_GONE_ROWS = 8

STATE_NAMES = {
    "R": "run",
    "S": "sleep",
    "D": "disk",
    "Z": "zombie",
    "T": "stop",
    "t": "trace",
    "I": "idle",
    "X": "dead",
}

COLUMNS = (("", "mark"), ("PID", "pid"), ("role", "role"), ("state", "state"), ("CPU%", "cpu"), ("RSS", "rss"), ("thr", "threads"), ("elapsed", "elapsed"), ("command", "command"))
COMMAND_WIDTH = 60
RIGHT_ALIGNED = frozenset({"pid", "cpu", "rss", "threads", "elapsed"})


def format_rss(mib: float) -> str:
    """Resident memory in the console's units: `812 MiB` or `3.4 GiB`."""
    return format_gib(mib) if mib >= 1024 else f"{mib:.0f} MiB"


def trim_command(cmdline: str, width: int = COMMAND_WIDTH) -> str:
    """A command line cut to `width` characters with an ellipsis."""
    return cmdline if len(cmdline) <= width else cmdline[: width - 1] + "…"


def tree_order(processes: list[ProcessReading]) -> list[tuple[ProcessReading, int]]:
    """Processes parent before children (each child under its parent, by PID), with their depth;
    a process whose parent is not listed is a root."""
    listed = {p.pid for p in processes}
    children: dict[int | None, list[ProcessReading]] = {}
    for process in sorted(processes, key=lambda p: p.pid):
        children.setdefault(process.ppid if process.ppid in listed else None, []).append(process)
    ordered: list[tuple[ProcessReading, int]] = []
    stack = [(root, 0) for root in reversed(children.get(None, []))]
    while stack:
        process, depth = stack.pop()
        ordered.append((process, depth))
        stack += [(child, depth + 1) for child in reversed(children.get(process.pid, [])) if child.pid != process.pid]
    return ordered


class ProcessPane(DataTable):
    """PID, role (launcher, rank N, worker of rank N), state, CPU% (by delta), RSS, threads, elapsed and command."""

    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | {
        "process-pane--alive",
        "process-pane--waiting",
        "process-pane--dead",
        "process-pane--dim",
    }

    DEFAULT_CSS = """
    ProcessPane {
        height: 1fr;
        overflow-x: hidden;
        background: $surface;
        scrollbar-size-vertical: 1;
        & > .datatable--header { background: $surface; color: $text-muted; text-style: bold; }
        & > .process-pane--alive { color: $success; }
        & > .process-pane--waiting { color: $warning; }
        & > .process-pane--dead { color: $error; text-style: bold; }
        & > .process-pane--dim { color: $text-muted; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False)
        self._latest: dict[int, ProcessReading] = {}
        self._gone: list[int] = []
        self._shown: dict[int, tuple[ProcessReading, bool, int]] = {}
        self.as_tree = False
        """Rows as a process tree (htop's F5): children under their parent, indented."""

    def on_mount(self) -> None:
        for label, key in COLUMNS:
            self.add_column(Text(label, justify="right" if key in RIGHT_ALIGNED else "left"), key=key)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._shown.clear()
        if self.is_mounted:
            self._sync()

    def show(self, processes: tuple[ProcessReading, ...]) -> None:
        """Bring the rows in line with `processes`: update cells, add new PIDs, mark vanished ones gone."""
        current = {p.pid: p for p in processes}
        for pid in self._latest:
            if pid not in current and pid not in self._gone:
                self._gone.append(pid)
        self._gone = [pid for pid in self._gone if pid not in current]
        while len(self._gone) > MAX_GONE_ROWS:
            oldest = self._gone.pop(0)
            self._latest.pop(oldest, None)
            self._shown.pop(oldest, None)
            self.remove_row(str(oldest))
        self._latest.update(current)
        self._sync()

    def selected_pid(self) -> int | None:
        """The PID on the cursor's row (None when the table is empty)."""
        if not self.row_count:
            return None
        return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)

    @property
    def alive_count(self) -> int:
        """Processes of the run alive in the latest reading."""
        return len(self._latest) - len(self._gone)

    def toggle_tree(self) -> bool:
        """Switch between the process tree and the flat list; returns whether the tree is on."""
        self.as_tree = not self.as_tree
        self._sync()
        return self.as_tree

    def _order(self) -> list[tuple[ProcessReading, int]]:
        processes = list(self._latest.values())
        return tree_order(processes) if self.as_tree else [(process, 0) for process in processes]

    def _sync(self) -> None:
        order = self._order()
        shown = [key.value for key in self.rows]
        if [str(process.pid) for process, _ in order][: len(shown)] != shown:
            # Rows out of order (the tree changed shape, or was switched): rebuild once, keeping
            # the cursor on its PID. New rows at the end are only added.
            selected = self.selected_pid()
            self.clear()
            self._shown.clear()
            self._fill(order)
            if selected is not None and str(selected) in self.rows:
                self.move_cursor(row=self.get_row_index(str(selected)))
        else:
            self._fill(order)

    def _fill(self, order: list[tuple[ProcessReading, int]]) -> None:
        for process, depth in order:
            pid = process.pid
            wanted = (process, pid in self._gone, depth)
            if self._shown.get(pid) == wanted:
                continue
            cells = self._cells(*wanted)
            key = str(pid)
            if key in self.rows:
                for column, value in cells.items():
                    self.update_cell(key, column, value)
            else:
                self.add_row(*(cells[column] for _, column in COLUMNS), key=key)
            self._shown[pid] = wanted

    def _style(self, name: str):
        return text_style(self, f"process-pane--{name}")

    def _cells(self, process: ProcessReading, gone: bool, depth: int = 0) -> dict[str, Text]:
        dim = self._style("dim") if gone else ""
        if gone:
            mark, state = Text("✕", style=self._style("dead")), Text("gone", style=self._style("dead"))
        else:
            kind = "dead" if process.state in "ZX" else "waiting" if process.state in "DTt" else "alive"
            mark = Text("●", style=self._style(kind))
            name = STATE_NAMES.get(process.state, "")
            state = Text(f"{process.state} {name}".rstrip(), style=self._style(kind))
        cpu = "—" if process.cpu_pct is None or gone else f"{process.cpu_pct:.1f}"
        return {
            "mark": mark,
            "pid": Text(str(process.pid), style=dim, justify="right"),
            "role": Text(process.label, style=dim),
            "state": state,
            "cpu": Text(cpu, style=dim, justify="right"),
            "rss": Text(format_rss(process.rss_mib), style=dim, justify="right"),
            "threads": Text(str(process.threads), style=dim, justify="right"),
            "elapsed": Text(format_duration(process.elapsed_s, compact=True), style=dim, justify="right"),
            "command": Text(("  " * (depth - 1) + "└ " if depth else "") + trim_command(script_and_args(process.cmdline)), style=dim),
        }
