"""The run's processes: a table updated in place, so the cursor stays where the operator left it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console.model import ProcessReading
from console.ui.styles import text_style
from console.units import format_duration

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
    """Resident memory: `812M` or `3.4G`."""
    return f"{mib / 1024:.1f}G" if mib >= 1024 else f"{mib:.0f}M"


def trim_command(cmdline: str, width: int = COMMAND_WIDTH) -> str:
    """A command line cut to `width` characters with an ellipsis."""
    return cmdline if len(cmdline) <= width else cmdline[: width - 1] + "…"


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
        self._shown: dict[int, tuple[ProcessReading, bool]] = {}

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

    @property
    def alive_count(self) -> int:
        """Processes of the run alive in the latest reading."""
        return len(self._latest) - len(self._gone)

    def _sync(self) -> None:
        for pid, process in self._latest.items():
            wanted = (process, pid in self._gone)
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

    def _cells(self, process: ProcessReading, gone: bool) -> dict[str, Text]:
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
            "command": Text(trim_command(process.cmdline), style=dim),
        }
