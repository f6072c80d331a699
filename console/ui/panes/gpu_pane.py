"""The GPUs pane: one line per GPU with memory and utilization bars, temperature, power and PIDs.

In a compact terminal it shows one summary line per GPU role instead (ranges over the role's
GPUs). Rows take a cursor when the pane has focus: the selected row's GPUs are what `{gpu}`
means to a custom action. Its graph view (`graphs`) draws the same rows as graphs over time:
utilisation, memory, power and SM clock, as nvtop does, from a GpuGraphsView (console.ui.run_figures).
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.model import GpuReading, GpuRole, gpus_by_role
from console.ui.panes.row_cursor import ROW_CURSOR_BINDINGS
from console.ui.panes.plain_lines import PlainLines
from console.ui.panes.styles import KeptStyles, background_style, text_style
from console.ui.run_figures import GpuGraph, GpuGraphRow, GpuGraphsView, graph_columns, kept_parts
from console.ui.themes import Thresholds
from console.units import format_gib, format_indices, spread

_EIGHTHS = " ▏▎▍▌▋▊▉"
#: A graph column's heights, lowest first (one row: eight levels).
_LEVELS = "▁▂▃▄▅▆▇█"
#: A graph narrower than this says too little: a row shows fewer figures instead (the last give way).
GRAPH_MIN_CELLS = 8
BOLD = Style(bold=True)


class SegmentLine:
    """One line of text runs, each with its style: what a Rich Text of one line renders to,
    without Text's span bookkeeping (every GPU row is rebuilt each sample)."""

    __slots__ = ("runs", "cell_len")

    def __init__(self) -> None:
        self.runs: list[tuple[str, Style | None]] = []
        self.cell_len = 0

    def append(self, text: str, style: Style | None = None) -> None:
        self.runs.append((text, style))
        self.cell_len += cell_len(text)

    def strip(self, base: Style, width: int, over: Style | None = None) -> Strip:
        """The line on `base` (the pane's own style), `over` on top of every run (not the padding after it), cut or padded to `width`."""
        segments = []
        for text, style in self.runs:
            style = base + style if style else base
            segments.append(Segment(text, style + over if over else style))
        return Strip(segments, self.cell_len).adjust_cell_length(width, base)


def bar_cells(fraction: float, width: int) -> str:
    """A horizontal bar `width` cells wide filled to `fraction`, with eighth-cell precision."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full
    if part and full < width:
        text += _EIGHTHS[part]
    return text.ljust(width)


class GpuPane(PlainLines, KeptStyles, ScrollView, can_focus=True):
    """Renders GPU readings; knows nothing about where they came from."""

    BINDINGS = ROW_CURSOR_BINDINGS

    COMPONENT_CLASSES = {
        "gpu-pane--ok",
        "gpu-pane--warn",
        "gpu-pane--crit",
        "gpu-pane--track",
        "gpu-pane--role",
        "gpu-pane--dim",
        "gpu-pane--own",
        "gpu-pane--error",
        "gpu-pane--cursor",
    }

    DEFAULT_CSS = """
    GpuPane {
        height: auto;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
        & > .gpu-pane--ok { color: $success; }
        & > .gpu-pane--warn { color: $warning; }
        & > .gpu-pane--crit { color: $error; text-style: bold; }
        & > .gpu-pane--track { background: $panel-lighten-1; }
        & > .gpu-pane--role { color: $secondary; }
        & > .gpu-pane--dim { color: $text-muted; }
        & > .gpu-pane--own { color: $accent; text-style: bold; }
        & > .gpu-pane--error { color: $error; text-style: bold reverse; }
        & > .gpu-pane--cursor { background: $primary 30%; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.gpus: tuple[GpuReading, ...] = ()
        self.roles: dict[int, str] = {}
        self.own_pids: frozenset[int] = frozenset()
        self.thresholds = Thresholds()
        self.compact = False
        """One summary line per role instead of one line per GPU."""
        self.cursor = 0
        self.graphs = False
        """Draw each row's figures as graphs over time (the graph view) instead of bars of the newest reading."""
        self.graph_view = GpuGraphsView()
        self._cache: dict[int, Strip] = {}

    def show(
        self,
        gpus: tuple[GpuReading, ...],
        *,
        roles: dict[int, str],
        own_pids: frozenset[int],
        thresholds: Thresholds,
    ) -> None:
        """Replace what the pane shows; repaints only the rows that changed (a new reading
        of one GPU repaints its own row: the others keep their cached strips)."""
        if (gpus, roles, own_pids, thresholds) == (self.gpus, self.roles, self.own_pids, self.thresholds):
            return
        same_frame = (roles, own_pids, thresholds) == (self.roles, self.own_pids, self.thresholds)
        before = self.rows()
        self.gpus, self.roles, self.own_pids, self.thresholds = gpus, roles, own_pids, thresholds
        after = self.rows()
        if not same_frame or len(after) != len(before):
            self._rows_changed()
            return
        for index, (old, new) in enumerate(zip(before, after)):
            if old != new:
                self._cache.pop(index, None)
                self.refresh_line(index)

    def show_graphs(self, view: GpuGraphsView) -> None:
        """What the graph view draws (kept while the bars show, so the switch back draws at once)."""
        if view != self.graph_view:
            self.graph_view = view
            if self.graphs:
                self._cache.clear()
                self.refresh()

    def set_graphs(self, graphs: bool) -> None:
        """Switch between bars of the newest reading and graphs over the readings held."""
        if graphs != self.graphs:
            self.graphs = graphs
            self._rows_changed()

    def set_compact(self, compact: bool) -> None:
        """Switch between one line per GPU and one line per role."""
        if compact != self.compact:
            self.compact = compact
            self.cursor = 0
            self._rows_changed()

    def _rows_changed(self) -> None:
        self.cursor = min(self.cursor, max(len(self.rows()) - 1, 0))
        self._cache.clear()
        self.virtual_size = Size(self.size.width, max(len(self.rows()), 1))
        self.refresh(layout=True)

    def rows(self) -> list[tuple[GpuReading, ...]]:
        """The GPUs of each row: one each, or in compact form those of each role (in index order)."""
        if not self.compact:
            return [(gpu,) for gpu in self.gpus]
        return [group.gpus for group in gpus_by_role(self.gpus, self.roles)]

    def selected_gpus(self) -> tuple[int, ...]:
        """Indices of the GPUs on the cursor's row (empty before the first reading)."""
        rows = self.rows()
        return tuple(gpu.index for gpu in rows[self.cursor]) if rows else ()

    def action_move(self, delta: int) -> None:
        rows = len(self.rows())
        if rows:
            self.cursor = min(max(self.cursor + delta, 0), rows - 1)
            self._cache.clear()
            self.scroll_to_region(Region(0, self.cursor, 1, 1), animate=False, immediate=True)
            self.refresh()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(self.size.height - 1, 1))

    def on_focus(self) -> None:
        self._cache.clear()
        self.refresh()

    on_blur = on_focus

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(len(self.rows()), 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def on_resize(self) -> None:
        self._cache.clear()
        self.virtual_size = Size(self.size.width, max(len(self.rows()), 1))

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = y + int(self.scroll_offset.y)
        if not self.gpus:
            if y == 0:
                text = Text("no GPU readings yet", style=self._style("dim"), end="")
                # Every segment needs a style: NO_COLOR's filter reads each one's colour.
                text.stylize_before(self.base_style)
                return Strip(text.render(self.app.console), text.cell_len).extend_cell_length(width, self.base_style)
            return Strip.blank(width, self.base_style)
        rows = self.rows()
        if index >= len(rows):
            return Strip.blank(width, self.base_style)
        if index not in self._cache:
            row = rows[index]
            graph_rows = self.graph_view.rows
            if self.graphs and index < len(graph_rows):
                line = self.graph_line(graph_rows[index], width)
            elif self.compact:
                line = self.role_line(GpuRole(self.roles.get(row[0].index, ""), row), width)
            else:
                line = self.gpu_line(row[0], width)
            cursor = self._style("cursor") if index == self.cursor and self.has_focus else None
            self._cache[index] = line.strip(self.base_style, width, cursor)
        return self._cache[index]

    def _style(self, name: str) -> Style:
        return self.kept_style(name, self._make_style)

    def _make_style(self, name: str) -> Style:
        component = f"gpu-pane--{name}"
        return background_style(self, component) if name in ("track", "cursor") else text_style(self, component)

    def _level(self, value: float | None, warn: float, crit: float) -> Style:
        if value is None:
            return self._style("dim")
        if value >= crit:
            return self._style("crit")
        if value >= warn:
            return self._style("warn")
        return self._style("ok")

    def _bar(self, text: SegmentLine, fraction: float | None, width: int, style: Style) -> None:
        track = self._style("track")
        if fraction is None:
            text.append(" " * width, track)
        else:
            text.append(bar_cells(fraction, width), track + Style(color=style.color))

    def _row_start(self, label: str, role: str, role_width: int, error: str | None) -> SegmentLine:
        """A row's start: its GPU (or role) in bold, its role in a column `role_width` wide, and its
        fault when it has one (the row ends there)."""
        text = SegmentLine()
        text.append(f"{label} ", BOLD)
        if role_width:
            text.append(f"{role:<{role_width}} ", self._style("role"))
        if error:
            text.append(f" {error} ", self._style("error"))
        return text

    def gpu_line(self, gpu: GpuReading, width: int) -> SegmentLine:
        """One GPU as a line of columns sized to `width`."""
        t = self.thresholds
        role_width = max((len(role) for role in self.roles.values()), default=0)
        text = self._row_start(f"{gpu.index:>2}", self.roles.get(gpu.index, ""), role_width, gpu.error)
        if gpu.error:
            return text

        fixed = text.cell_len + 1 + 15 + 2 + 5 + 2 + 5 + 2 + 5
        spare = max(width - fixed, 8)
        pids_width = max(0, min(spare - 18, 28)) if spare >= 30 else 0
        bars = spare - pids_width - 1
        mem_bar = max(bars * 3 // 5, 4)
        util_bar = max(bars - mem_bar, 4)

        used, total, mem_pct = gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_pct
        mem_style = self._level(mem_pct, t.memory_warn_pct, t.memory_crit_pct)
        self._bar(text, None if mem_pct is None else mem_pct / 100, mem_bar, mem_style)
        used_text = format_gib(used, unit=False) if used is not None else "?"
        mem_text = f"{used_text:>5}/{format_gib(total) if total else '? GiB':<9}"
        text.append(f" {mem_text}", None if mem_pct is not None else self._style("dim"))
        text.append(f"{mem_pct:4.0f}%" if mem_pct is not None else "   —%", mem_style)

        util = gpu.utilization_pct
        idle = util is not None and util < t.utilization_idle_pct
        util_style = self._style("dim") if util is None or idle else self._style("ok")
        text.append("  ")
        self._bar(text, None if util is None else util / 100, util_bar, util_style)
        text.append(f"{util:4.0f}%" if util is not None else "   —%", util_style)

        temp = gpu.temperature_c
        text.append("  ")
        temp_style = self._level(temp, t.temperature_warn_c, t.temperature_crit_c)
        text.append(f"{temp:3.0f}°C" if temp is not None else "  —°C", temp_style)
        text.append("  ")
        if gpu.power_w is not None:
            text.append(f"{gpu.power_w:4.0f}W")
        else:
            text.append("   —W", self._style("dim"))

        if pids_width:
            text.append("  ")
            self._append_pids(text, gpu, pids_width)
        return text

    def _append_pids(self, text: SegmentLine, gpu: GpuReading, width: int) -> None:
        start = text.cell_len
        if not gpu.processes:
            text.append("no processes", self._style("dim"))
            return
        for n, process in enumerate(gpu.processes):
            own = process.pid in self.own_pids
            used = f" {format_gib(process.used_mib)}" if process.used_mib is not None else ""
            item = f"{'●' if own else '○'}{process.pid}{used}"
            more = len(gpu.processes) - n - 1
            if text.cell_len - start + len(item) + (6 if more else 0) > width:
                text.append(f"+{len(gpu.processes) - n} more", self._style("dim"))
                return
            text.append(item, self._style("own") if own else None)
            if more:
                text.append(" ")


    def graph_line(self, row: GpuGraphRow, width: int) -> SegmentLine:
        """One row's figures side by side, each its label, a graph of equal width and its newest value."""
        label_width = max((len(r.label) for r in self.graph_view.rows), default=2)
        role_width = 0 if self.compact else max((len(role) for role in self.roles.values()), default=0)
        text = self._row_start(f"{row.label:>{label_width}}", row.role, role_width, row.error)
        if row.error:
            return text
        # Each figure's newest value as wide as the widest of its column, so the rows' graphs line up.
        values = [max(len(r.graphs[n].latest) for r in self.graph_view.rows if len(r.graphs) > n) for n in range(len(row.graphs))]
        graphs = list(row.graphs)
        cells = 0
        while graphs:  # the last figures give way to graphs of at least GRAPH_MIN_CELLS
            words = sum(len(graph.label) + 1 + 1 + value + 2 for graph, value in zip(graphs, values))
            cells = (width - text.cell_len - words) // len(graphs)
            if cells >= GRAPH_MIN_CELLS or len(graphs) == 1:
                break
            graphs.pop()
        for graph, value in zip(graphs, values):
            text.append(f"{graph.label} ", self._style("dim"))
            if cells > 0:
                self._graph(text, graph, cells)
            text.append(f" {graph.latest:>{value}}  ", self._graph_style(graph))
        return text

    def _graph(self, text: SegmentLine, graph: GpuGraph, cells: int) -> None:
        track = self._style("track")
        style = track + Style(color=self._graph_style(graph).color)
        chars = []
        for level in graph_columns(graph.levels, cells):
            chars.append(" " if level is None else _LEVELS[min(max(round(level * (len(_LEVELS) - 1)), 0), len(_LEVELS) - 1)])
        text.append("".join(chars), style)

    def _graph_style(self, graph: GpuGraph) -> Style:
        """Memory by its thresholds, as the bars are; the others in the steady colour."""
        t = self.thresholds
        if graph.label == "mem":
            newest = next((level for level in reversed(graph.levels) if level is not None), None)
            return self._level(None if newest is None else newest * 100, t.memory_warn_pct, t.memory_crit_pct)
        return self._style("ok")

    def role_line(self, group: GpuRole, width: int) -> SegmentLine:
        """One role's GPUs as a line of ranges: which, memory, utilization, temperature, power, faults."""
        t = self.thresholds
        role_width = max((len(name) for name in self.roles.values()), default=4)
        text = SegmentLine()
        text.append(f"{group.role or 'GPUs':<{role_width}} ", self._style("role"))
        text.append(f"{format_indices([gpu.index for gpu in group.gpus]):<5} ", BOLD)
        used, total, pcts = group.memory_used_gib, group.memory_total_mib, group.figures("memory_pct")
        top = max(pcts) if pcts else None
        mem_style = self._level(top, t.memory_warn_pct, t.memory_crit_pct)
        utils = group.figures("utilization_pct")
        idle = not utils or max(utils) < t.utilization_idle_pct
        temps = group.figures("temperature_c")
        # (text, style, drop rank): a narrow pane drops the percentage, power, then temperature, each whole.
        parts: list[tuple[str, Style | None, int]] = [
            (f"{spread(used, '{:.1f}')}/{format_gib(total)}" if used and total else "? GiB", None, 0),
            (f" {spread(pcts, '{:.0f}')}%", mem_style, 3),
            (f"  util {spread(utils, '{:.0f}')}%", self._style("dim") if idle else self._style("ok"), 0),
            (f"  {spread(temps, '{:.0f}')}°C", self._level(max(temps) if temps else None, t.temperature_warn_c, t.temperature_crit_c), 1),
            (f"  {spread(group.figures('power_w'), '{:.0f}')}W", None, 2),
        ]
        if faults := group.faults:
            parts.append((f"  {len(faults)} fault{'s' if len(faults) > 1 else ''}: GPU {format_indices([g.index for g in faults])}", self._style("error"), 0))
        kept = kept_parts([cell_len(part) for part, _, _ in parts], [rank for _, _, rank in parts], width - text.cell_len)
        figures = [(part, style) for (part, style, _), keep in zip(parts, kept) if keep]
        # The bar gets what the figures leave, up to 12 cells, and none below 3.
        bar = min(width - text.cell_len - sum(cell_len(part) for part, _ in figures) - 2, 12)
        if bar >= 3:
            self._bar(text, None if top is None else top / 100, bar, mem_style)
            text.append(" ")
        for part, style in figures:
            text.append(part, style)
        return text
