"""Throughput: the run's rate against its baseline, the loss, and step progress with an ETA."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rich.color import Color
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from console.ui.panes.plain_lines import PlainLines
from console.ui.panes.styles import KeptStyles, text_style
from console.units import format_duration, si
from console.ui.run_figures import ThroughputView


def figure_key(text: Text) -> tuple:
    """What a figure line shows: a Text's equality leaves out its own (whole-line) style."""
    return text.plain, text.style, tuple(text.spans)


def figure_strip(text: Text, width: int, base: Style, console: Console) -> Strip:
    """One row of figures: the pane's style, then the line's own over it, then its spans; a line
    too long for the pane ends at the last word that fits, as a Static of one line does."""
    if text.cell_len <= width:
        text = text.copy()
    else:
        lines = text.wrap(console, max(width, 1), justify="left", overflow="fold")
        text = lines[0] if lines else Text()
    text.rstrip()
    text.end = ""
    # Text.render drops a Text's own style: it goes in as the first span over the pane's.
    text.spans[:0] = [Span(0, len(text), base), Span(0, len(text), text.style)]
    return Strip(text.render(console), text.cell_len).adjust_cell_length(width, base)


#: A bar's eighths, lowest first.
BARS = "▁▂▃▄▅▆▇█"


def bucket_peaks(values: Sequence[float], width: int) -> list[float]:
    """The largest value in each of `width` equal slices of `values`; with fewer values than
    cells some slices are empty, and skipped."""
    count = len(values)
    bounds = [count * n // width for n in range(width + 1)]
    return [max(values[start:end]) for start, end in zip(bounds, bounds[1:]) if end > start]


#: A sparkline's cell: its character, and its bar's height between the lowest and highest value (None: blank).
SparkCell = tuple[str, float | None]
#: The least span a steady line is drawn over, as a fraction of its size: noise of a few percent
#: stays a few percent of the height, around the middle.
STEADY_SPAN = 0.5


def steady_scale(values: Sequence[float]) -> tuple[float, float]:
    """The range a sparkline's heights are drawn over: the data's, widened about its middle to at
    least STEADY_SPAN of its size, so a steady rate is a flat line at mid height, not a floor that
    reads as zero, and 14.0-14.6K of noise is no wild swing; all zeros draw the floor."""
    low, high = min(values, default=0.0), max(values, default=0.0)
    middle = (low + high) / 2
    half = max((high - low) / 2, abs(middle) * STEADY_SPAN / 2)
    if half == 0:
        return 0.0, 1.0
    return middle - half, middle + half  # values >= 0 keep a bottom >= 0: half is at most their middle


#: The baseline's line across a sparkline, where no bar reaches it.
LINE = "─"


def sparkline_rows(
    values: Sequence[float], width: int, height: int, scale: tuple[float, float] | None = None,
    line: float | None = None,
) -> list[list[SparkCell]]:
    """A sparkline `height` rows tall, top row first: each cell's character and where its slice's
    peak stands between the scale's ends (0 to 1: its colour), None for a blank. The scale is the
    data's smallest and largest value unless given (steady_scale). Fewer slices than cells are
    stretched across the width, as Textual's Sparkline draws them. `line`: a value drawn as a
    horizontal LINE (ratio None) in the row it falls in, over the cells whose bar stays below that row."""
    if width <= 0:
        return [[] for _ in range(height)]  # not laid out yet
    if not values:
        blank: SparkCell = (" ", None)
        floor: SparkCell = ("▁", 0.0)
        return [[blank] * width for _ in range(height - 1)] + [[floor] * width]
    if len(values) == 1 and scale is None:
        return [[("█", 1.0)] * width for _ in range(height)]
    peaks = bucket_peaks(values, width)
    low, high = scale if scale is not None else (min(values), max(values))
    extent = high - low or 1
    levels = len(BARS) * height - 1
    cells = []
    position, step = 0.0, len(peaks) / width
    for _ in range(width):
        ratio = min(1.0, max(0.0, (peaks[int(position)] - low) / extent))
        cells.append((int(ratio * levels), ratio))
        position += step  # added up, not multiplied: the same cells as Textual's own for the same data
    line_row = None if line is None else min(int(min(1.0, max(0.0, (line - low) / extent)) * levels) // len(BARS), height - 1)
    rows: list[list[SparkCell]] = []
    for row in reversed(range(height)):
        bottom, top = row * len(BARS), (row + 1) * len(BARS)
        empty: SparkCell = (LINE, None) if row == line_row else (" ", None)
        rows.append(
            [empty if level < bottom else ("█", ratio) if level >= top else (BARS[level % len(BARS)], ratio) for level, ratio in cells]
        )
    return rows


def first_column(index: int, count: int, width: int) -> int:
    """The first of `width` columns that draws value `index` of `count` (as sparkline_rows lays them out)."""
    if count <= 0 or width <= 0:
        return 0
    if count > width:  # bucket_peaks: column c holds values count*c//width up to count*(c+1)//width
        return next(c for c in range(width) if count * (c + 1) // width > index)
    return -(-index * width // count)  # stretched: column c draws value int(c * count / width)


def blend_rgb(low: Color, high: Color, ratio: float) -> tuple[int, int, int] | None:
    """The red, green and blue `ratio` of the way from `low` to `high` (None unless both are RGB)."""
    if low.triplet is None or high.triplet is None:
        return None
    (r1, g1, b1), (r2, g2, b2) = low.triplet, high.triplet
    return int(r1 + (r2 - r1) * ratio), int(g1 + (g2 - g1) * ratio), int(b1 + (b2 - b1) * ratio)


@lru_cache(maxsize=1024)
def bar_style(base: Style, rgb: tuple[int, int, int]) -> Style:
    """A sparkline bar's style: kept, as a bar's colour is one of the few hundred between two
    colours, while its height changes every sample."""
    return base + Style(color=Color.from_rgb(*rgb))


def sparkline_strips(
    values: Sequence[float], width: int, height: int, base: Style, low: Color, high: Color,
    scale: tuple[float, float] | None = None, line: float | None = None, line_style: Style | None = None,
) -> list[Strip]:
    """A sparkline's rows as strips (`scale` and `line` as sparkline_rows'): each bar coloured between
    `low` and `high` by its height, the line in `line_style`."""
    styles: dict[float | None, Style] = {None: base}
    strips = []
    for row in sparkline_rows(values, width, height, scale, line):
        segments = []
        for char, ratio in row:
            if char == LINE and ratio is None:
                segments.append(Segment(char, base + line_style if line_style else base))
                continue
            style = styles.get(ratio)
            if style is None and ratio is not None:  # a blank's is kept from the start
                rgb = blend_rgb(low, high, ratio)
                style = styles[ratio] = base + Style(color=high) if rgb is None else bar_style(base, rgb)
            segments.append(Segment(char, style))
        strips.append(Strip(Segment.simplify(segments), width))
    return strips


#: The pane's rows, top first (a sparkline's by name and row), and the fewer a short terminal gets.
FULL_ROWS = (("rate", 0), ("rate-spark", 0), ("rate-spark", 1), ("baseline", 0), ("loss", 0), ("loss-spark", 0), ("step", 0))
SHORT_ROWS = (("rate", 0), ("rate-spark", 0), ("baseline", 0), ("loss", 0), ("step", 0))
#: The figures drawn in the warning colour while the rate is overdue.
STALE_FIGURES = ("rate", "baseline")


class ThroughputPane(PlainLines, KeptStyles, Widget):
    """The run's rate against its baseline, the loss, and step progress with an ETA: figure rows
    and two sparklines, drawn by one line-API widget from strips kept between frames. A row is
    repainted only when what it shows changed (a figure's text or style, a sparkline's cells):
    one widget, not one a row, because each widget that repaints costs Textual two messages
    and its own pass through the compositor, every sample.

    A sparkline's bar height comes from its slice's maximum over steady_scale of the data's
    minimum and maximum: when those are unchanged for this width, so is every cell. Drawn here, not by
    Textual's Sparkline renderable, which took ~0.3 ms a frame for two rows of 40 cells."""

    COMPONENT_CLASSES = {
        "throughput-pane--rate-high",
        "throughput-pane--rate-low",
        "throughput-pane--slow-high",
        "throughput-pane--slow-low",
        "throughput-pane--loss-high",
        "throughput-pane--loss-low",
        "throughput-pane--stale",
        "throughput-pane--baseline",
    }

    DEFAULT_CSS = """
    ThroughputPane {
        height: 1fr;
        & > .throughput-pane--rate-high { color: $success; }
        & > .throughput-pane--rate-low { color: $success 40%; }
        & > .throughput-pane--slow-high { color: $warning; }
        & > .throughput-pane--slow-low { color: $warning 40%; }
        & > .throughput-pane--loss-high { color: $accent; }
        & > .throughput-pane--loss-low { color: $accent 40%; }
        & > .throughput-pane--stale { color: $warning; }
        & > .throughput-pane--baseline { color: $text-muted; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.figures: dict[str, Text] = {name: Text() for name, _ in FULL_ROWS if not name.endswith("-spark")}
        self.shorter: dict[str, tuple[Text, ...]] = {}
        """Each figure row's shorter forms, longest first, for a pane too narrow for its figure."""
        self.sparklines: dict[str, tuple[float, ...]] = {"rate-spark": (), "loss-spark": ()}
        self.slow = False
        """The rate is below the slow fraction of its baseline: its sparkline in the warning colour."""
        self.slowdown: tuple[int, float] | None = None
        """The slowdown the diagnosis found: where among the rates it began, and the baseline, drawn
        as a line across the rate's sparkline; its bars from that rate on in the warning colour."""
        self.stale = False
        """The last rate is overdue: the rate and baseline figures in the warning colour."""
        self._cells: dict[str, tuple] = {}
        self._strips: dict[str, tuple[tuple, list[Strip]]] = {}

    @property
    def rows(self) -> tuple[tuple[str, int], ...]:
        return FULL_ROWS if self.size.height >= len(FULL_ROWS) else SHORT_ROWS

    # -- what it shows ---------------------------------------------------------

    def show(self, view: ThroughputView) -> None:
        """Repaint from `view` (only the rows that changed). A row is given shorter forms for a
        narrow pane, each dropping a figure whole: a cut never leaves a number without its unit."""
        if view.unit is None or view.current is None:
            self.update_figure("rate", Text("no rate in the log yet", style="dim"))
            self.update_figure("baseline", Text(f"baseline {si(view.baseline)}" if view.baseline else "", style="dim"))
        else:
            self._set_flags(stale=view.stale_s is not None)
            if view.per_iteration and view.current > 0:
                rate = Text.assemble((f"{1 / view.current:.3g}", "bold"), " s/it")
            else:
                rate = Text.assemble((si(view.current), "bold"), f" {view.unit}")
            if view.stale_s is not None:
                ago, short = format_duration(view.stale_s), format_duration(view.stale_s, compact=True)
                forms = (f"  last rate written {ago} ago", f"  written {short} ago", f"  {short} ago")
                self.update_figure("rate", *(rate + Text(form, "bold") for form in forms))
            elif view.average is not None and view.minimum is not None:
                average = rate + Text(f" avg {si(view.average)}", "dim")
                self.update_figure("rate", average + Text(f" min {si(view.minimum)}", "dim"), average, rate)
            else:
                self.update_figure("rate", rate)
            if view.stale_s is not None:
                self.update_figure("baseline", Text("no rate now: the log gives none", style="bold"), Text("no rate now", style="bold"))
                self._set_flags(slow=False)
            elif view.baseline:
                ratio = view.current / view.baseline
                slow = ratio < view.slow_fraction
                what = "its best sustained" if view.learned else "baseline"
                against = Text.assemble((f"{ratio:.0%}", "bold"), f" of {what} {si(view.baseline)}")
                if view.slow_for_s is not None:
                    since = Text(f"  slow for {format_duration(view.slow_for_s)}", "bold")
                    self.update_figure("baseline", against + since, against + Text("  slow", "bold"))
                elif slow:
                    self.update_figure("baseline", against + Text("  below normal", "bold"), against + Text("  slow", "bold"))
                else:
                    self.update_figure("baseline", against)
                self._set_flags(slow=slow)
            else:
                self.update_figure("baseline", Text("no baseline in config [metrics]", style="dim"), Text("no baseline set", style="dim"))
                self._set_flags(slow=False)
        slowdown = None if view.slow_from is None or view.baseline is None else (view.slow_from, view.baseline)
        if slowdown != self.slowdown:
            self.slowdown = slowdown
            self._repaint("rate-spark")
        self.show_sparkline("rate-spark", view.rates)

        if view.nonfinite_loss is not None:
            loss = Text.assemble("loss ", (f"{view.nonfinite_loss}", "bold red"))
        elif view.losses:
            loss = Text.assemble("loss ", (f"{view.losses[-1]:.4g}", "bold"))
        else:
            loss = Text("no loss in the log yet", style="dim")
        lines = [loss]
        for label, value, form in (("lr", view.lr, "{:.3g}"), ("grad", view.grad_norm, "{:.3g}"), ("MFU", view.mfu, "{:.0%}")):
            if value is not None:
                lines.append(lines[-1] + Text.assemble(f" · {label} ", (form.format(value), "bold")))
        self.update_figure("loss", *reversed(lines))
        self.show_sparkline("loss-spark", view.losses)

        if view.step is None:
            self.update_figure("step", Text("no step count in the log yet", style="dim"), Text("no step count yet", style="dim"))
        elif view.total_steps:
            done = view.step / view.total_steps
            eta = "—" if view.eta_s is None or view.stale_s is not None else format_duration(view.eta_s, compact=True)
            steps = Text.assemble((f"{view.step:,}", "bold"), f"/{view.total_steps:,}")
            until = Text.assemble(" ETA ", (eta, "bold"))
            self.update_figure("step", Text("step ") + steps + f" {done:.1%}" + until, Text("step ") + steps + until, steps + until)
        else:
            self.update_figure("step", Text.assemble("step ", (f"{view.step:,}", "bold")))

    def update_figure(self, name: str, text: Text, *shorter: Text) -> None:
        """Figure row `name` shows `text`, or the first of its `shorter` forms that fits the pane:
        repainted when one's text or style changed."""
        if tuple(map(figure_key, (text, *shorter))) != tuple(map(figure_key, (self.figures[name], *self.shorter.get(name, ())))):
            self.figures[name] = text
            self.shorter[name] = shorter
            self._repaint(name)

    def show_sparkline(self, name: str, values: Sequence[float]) -> None:
        """Sparkline `name` shows `values`: repainted when one of its cells would change."""
        values = tuple(values)
        width = self.size.width
        cells = (width, tuple(bucket_peaks(values, max(width, 1))), min(values, default=None), max(values, default=None))
        if cells != self._cells.get(name):
            self._cells[name] = cells
            self.sparklines[name] = values
            self._repaint(name)

    def _set_flags(self, *, slow: bool | None = None, stale: bool | None = None) -> None:
        if slow is not None and slow != self.slow:
            self.slow = slow
            self._repaint("rate-spark")
        if stale is not None and stale != self.stale:
            self.stale = stale
            for name in STALE_FIGURES:
                self._repaint(name)

    def _repaint(self, name: str) -> None:
        width = self.size.width
        for y, (row, _) in enumerate(self.rows):
            if row == name:
                self.refresh(Region(0, y, width, 1))

    def on_resize(self) -> None:
        self._cells.clear()  # a new width buckets the data anew (the resize repaints it all)

    # -- drawing ---------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        rows = self.rows
        width, base = self.size.width, self.base_style
        if y >= len(rows):
            return Strip.blank(width, base)
        name, index = rows[y]
        if name in self.sparklines:
            return self._sparkline(name, width, sum(row == name for row, _ in rows), base)[index]
        if self.stale and name in STALE_FIGURES:
            base = base + self.kept_style("throughput-pane--stale", lambda component: text_style(self, component))
        figure = self.fitting_figure(name, width)
        key = (figure_key(figure), width, base)
        kept = self._strips.get(name)
        if kept is None or kept[0] != key:
            kept = self._strips[name] = (key, [figure_strip(figure, width, base, self.app.console)])
        return kept[1][0]

    def fitting_figure(self, name: str, width: int) -> Text:
        """Row `name`'s longest form that fits `width` cells (the shortest when none does)."""
        forms = (self.figures[name], *self.shorter.get(name, ()))
        return next((form for form in forms if form.cell_len <= width), forms[-1])

    def _sparkline(self, name: str, width: int, height: int, base: Style) -> list[Strip]:
        slowdown = self.slowdown if name == "rate-spark" else None
        colours = "slow" if name == "rate-spark" and self.slow else name.removesuffix("-spark")
        values = self.sparklines[name]
        key = (values, width, height, base, colours, slowdown, self._colour(f"throughput-pane--{colours}-high"))
        kept = self._strips.get(name)
        if kept is None or kept[0] != key:
            kept = self._strips[name] = (key, self._draw_sparkline(name, values, width, height, base, colours, slowdown))
        return kept[1]

    def _draw_sparkline(
        self, name: str, values: tuple[float, ...], width: int, height: int, base: Style, colours: str,
        slowdown: tuple[int, float] | None,
    ) -> list[Strip]:
        """The sparkline in its colours; with a slowdown, its baseline a line over a scale that holds
        it, and the bars from the slowdown's first rate on in the slow colours."""
        line = None if slowdown is None else slowdown[1]
        scale = steady_scale((*values, line) if line is not None else values) if values else None
        line_style = self.kept_style("throughput-pane--baseline", lambda component: text_style(self, component))

        def strips(colours: str) -> list[Strip]:
            low, high = self._colour(f"throughput-pane--{colours}-low"), self._colour(f"throughput-pane--{colours}-high")
            return sparkline_strips(values, width, height, base, low, high, scale, line, line_style)

        if slowdown is None:
            return strips(colours)
        column = first_column(slowdown[0], len(values), width)
        before, after = strips(name.removesuffix("-spark")), strips("slow")
        return [Strip.join([old.crop(0, column), new.crop(column, width)]) for old, new in zip(before, after)]

    def _colour(self, component: str) -> Color:
        """A component's colour blended over the pane's background (its alpha made solid)."""
        colour = self.kept_style(component, lambda name: Style(color=(self.background_colors[1] + self.get_component_styles(name).color).rich_color)).color
        assert colour is not None  # the style is made of this colour
        return colour
