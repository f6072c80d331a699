"""The run's processes: a table updated in place, so the cursor stays where the operator left it.

A line-API widget: a sample that changes one process's CPU% repaints that row from a cached
strip of segments, not the whole table (Textual's DataTable drops every cell's render on any
update, a third of a watched run's frame).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.model import ProcessReading
from console.observe.roles import script_and_args
from console.ui.panes.row_cursor import ROW_CURSOR_BINDINGS
from console.ui.panes.plain_lines import PlainLines
from console.ui.panes.styles import KeptStyles, text_style
from console.ui.run_figures import PROCESS_COLUMNS, elide, process_column_widths, role_cell
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

COLUMNS = PROCESS_COLUMNS
COLUMN_KEYS = tuple(key for _, key in COLUMNS)
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


#: One cell: its text and the component it is coloured by ("" for the pane's own colour).
Cell = tuple[str, str]


class ProcessPane(PlainLines, KeptStyles, ScrollView, can_focus=True):
    """PID, role (launcher, rank N, worker of rank N), state, CPU% (by delta), RSS, threads, elapsed and command.

    A header line stays on top; the rows scroll under it. Columns are as wide as their widest
    cell so far (they never narrow, so figures do not jump left and right between samples).
    """

    BINDINGS = ROW_CURSOR_BINDINGS

    COMPONENT_CLASSES = {
        "process-pane--header",
        "process-pane--cursor",
        "process-pane--alive",
        "process-pane--waiting",
        "process-pane--dead",
        "process-pane--dim",
    }

    DEFAULT_CSS = """
    ProcessPane {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        background: $surface;
        color: $foreground;
        scrollbar-size-vertical: 1;
        & > .process-pane--header { color: $text-muted; text-style: bold; }
        & > .process-pane--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .process-pane--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
        & > .process-pane--alive { color: $success; }
        & > .process-pane--waiting { color: $warning; }
        & > .process-pane--dead { color: $error; text-style: bold; }
        & > .process-pane--dim { color: $text-muted; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._latest: dict[int, ProcessReading] = {}
        self._gone: list[int] = []
        self._order: list[int] = []
        self._cells: dict[int, tuple[Cell, ...]] = {}
        self._widths = [cell_len(label) for label, _ in COLUMNS]
        self._strips: dict[int, Strip] = {}
        self.cursor_row = 0
        self.as_tree = False
        """Rows as a process tree (htop's F5): children under their parent, indented."""

    # -- what is shown -----------------------------------------------------------

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
        self._latest.update(current)
        self._sync()

    @property
    def pids(self) -> list[int]:
        """The PIDs of the rows, top to bottom."""
        return list(self._order)

    @property
    def row_count(self) -> int:
        return len(self._order)

    @property
    def alive_count(self) -> int:
        """Processes of the run alive in the latest reading."""
        return len(self._latest) - len(self._gone)

    def cell_text(self, pid: int, column: str) -> str:
        """What `pid`'s row shows in `column` (one of COLUMNS' keys)."""
        return self._cells[pid][COLUMN_KEYS.index(column)][0]

    def selected_pid(self) -> int | None:
        """The PID on the cursor's row (None when the table is empty)."""
        return self._order[self.cursor_row] if self._order else None

    def select_pid(self, pid: int) -> None:
        """Put the cursor on `pid`'s row."""
        self.move_cursor(self._order.index(pid))

    def toggle_tree(self) -> bool:
        """Switch between the process tree and the flat list; returns whether the tree is on."""
        self.as_tree = not self.as_tree
        self._sync()
        return self.as_tree

    def _sync(self) -> None:
        processes = list(self._latest.values())
        order = tree_order(processes) if self.as_tree else [(process, 0) for process in processes]
        selected = self.selected_pid()
        cells = {process.pid: self._row_cells(process, process.pid in self._gone, depth) for process, depth in order}
        widths = [max([width, *(cell_len(row[n][0]) for row in cells.values())]) for n, width in enumerate(self._widths)]
        pids = [process.pid for process, _ in order]
        if pids != self._order or widths != self._widths:
            self._order, self._cells, self._widths = pids, cells, widths
            if selected in cells:
                self.cursor_row = pids.index(selected)  # the cursor stays on its PID
            self.cursor_row = min(self.cursor_row, max(len(pids) - 1, 0))
            self._strips.clear()
            self.virtual_size = Size(self.size.width, len(pids) + 1)
            self.refresh()
            # Its PID may have moved out of view (the tree switched, gone rows dropped): follow it
            # once the new length is laid out.
            self.call_after_refresh(self._scroll_to_cursor)
            return
        for index, pid in enumerate(pids):
            if cells[pid] != self._cells[pid]:
                self._strips.pop(pid, None)
                self.refresh_line(index + 1)
        self._cells = cells

    def _row_cells(self, process: ProcessReading, gone: bool, depth: int) -> tuple[Cell, ...]:
        dim = "dim" if gone else ""
        if gone:
            mark, state = ("✕", "dead"), ("gone", "dead")
        else:
            kind = "dead" if process.state in "ZX" else "waiting" if process.state in "DTt" else "alive"
            mark, state = ("●", kind), (f"{process.state} {STATE_NAMES.get(process.state, '')}".rstrip(), kind)
        cpu = "—" if process.cpu_pct is None or gone else f"{process.cpu_pct:.1f}"
        indent = "  " * (depth - 1) + "└ " if depth else ""
        return (
            mark,
            (str(process.pid), dim),
            (role_cell(process.label, process.gpus), dim),
            state,
            (cpu, dim),
            (format_rss(process.rss_mib), dim),
            (str(process.threads), dim),
            (format_duration(process.elapsed_s, compact=True), dim),
            (indent + trim_command(script_and_args(process.cmdline)), dim),
        )

    # -- the cursor --------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        """Put the cursor on row `row` (clamped to the rows there are) and scroll it into view."""
        row = min(max(row, 0), max(len(self._order) - 1, 0))
        if row != self.cursor_row:
            for old in (self.cursor_row, row):
                if old < len(self._order):
                    self._strips.pop(self._order[old], None)
                    self.refresh_line(old + 1)
            self.cursor_row = row
        self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        row = self.cursor_row
        visible = max(self.size.height - 1, 1)  # the header takes a line
        top = int(self.scroll_offset.y)
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False, immediate=True)

    def action_move(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(self.size.height - 2, 1))

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1 + int(self.scroll_offset.y)
        if event.y >= 1 and row < len(self._order):  # not the header, nor the blank below the rows
            self.move_cursor(row)

    # -- drawing -----------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    on_blur = on_focus

    def on_resize(self) -> None:
        self._strips.clear()
        self.virtual_size = Size(self.size.width, len(self._order) + 1)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._order) + 1

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return self._line([(label, "header") for label, _ in COLUMNS], "", width)
        index = y - 1 + int(self.scroll_offset.y)
        if index >= len(self._order):
            return Strip.blank(width, self.base_style)
        pid = self._order[index]
        strip = self._strips.get(pid)
        if strip is None or strip.cell_length != width:
            strip = self._strips[pid] = self._line(self._cells[pid], "cursor" if index == self.cursor_row else "", width)
        return strip

    def _line(self, cells, over: str, width: int) -> Strip:
        """One row of cells, each padded by a space either side and aligned in its column, the
        columns that fit `width` (run_figures.process_column_widths); `over` is a component whose
        style goes over every cell (the cursor's)."""
        base = self.base_style
        top = self._style(over) if over else None
        segments = []
        for (text, component), (_, key), column_width in zip(cells, COLUMNS, process_column_widths(self._widths, width)):
            if column_width is None:
                continue
            text = elide(text, column_width)
            pad = " " * (column_width - cell_len(text))
            aligned = pad + text if key in RIGHT_ALIGNED else text + pad
            style = base + self._style(component) if component else base
            segments.append(Segment(f" {aligned} ", style + top if top else style))
        return Strip(segments).adjust_cell_length(width, base + top if top else base)

    def _style(self, component: str) -> Style:
        return self.kept_style(component, self._make_style)

    def _make_style(self, component: str) -> Style:
        """A component's style: text only for a cell's colour, background as well for the cursor."""
        name = f"process-pane--{component}"
        if component == "cursor":
            full = self.get_component_rich_style(name)
            return Style(color=full.color, bgcolor=full.bgcolor, bold=full.bold)
        return text_style(self, name)
