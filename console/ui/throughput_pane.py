"""Throughput: the run's rate against its baseline, the loss, and step progress with an ETA."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Sparkline

from console.ui.plain_lines import PlainLines
from console.ui.styles import KeptStyles
from console.units import format_duration


@dataclass(frozen=True, slots=True)
class ThroughputView:
    """What the pane shows, computed by the app from RunState (the pane does no arithmetic on state)."""

    unit: str | None
    """`tok/s`, `samples/s`, `it/s`; None before the log gave any rate."""
    rates: tuple[float, ...] = ()
    """Recent rate values, oldest first (the sparkline)."""
    current: float | None = None
    average: float | None = None
    minimum: float | None = None
    baseline: float | None = None
    losses: tuple[float, ...] = ()
    step: int | None = None
    total_steps: int | None = None
    eta_s: float | None = None
    slow_fraction: float = 0.8
    stale_s: float | None = None
    """Seconds since the last rate was written when it is overdue: `current` is then history, not now."""
    per_iteration: bool = False
    """The bar prints seconds per iteration (`1.31s/it`): show the rate that way too."""
    lr: float | None = None
    grad_norm: float | None = None
    mfu: float | None = None


def si(value: float) -> str:
    """A rate in three significant figures: 14.2K, 980, 1.05M."""
    for factor, suffix in ((1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def figure_key(text: Text) -> tuple:
    """What a figure line shows: a Text's equality leaves out its own (whole-line) style."""
    return text.plain, text.style, tuple(text.spans)


class FigureLine(PlainLines, KeptStyles, Widget):
    """One row of figures drawn from a strip kept between frames: repainted only when its text
    (or its style) changed, never re-laid-out (an update with layout costs a whole screen
    layout, every second, for nothing). Lighter than a Static, whose every update converts
    the text to Textual's Content and renders it again (0.1-0.35 ms a line, each sample)."""

    DEFAULT_CSS = "FigureLine { height: 1; }"

    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self.text = Text()
        self._strip: tuple[tuple, Strip] | None = None

    def update(self, text: Text) -> None:
        if figure_key(text) != figure_key(self.text):
            self.text = text
            self.refresh()

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.base_style
        if y:
            return Strip.blank(width, base)
        key = (figure_key(self.text), width, base)
        if self._strip is None or self._strip[0] != key:
            if self.text.cell_len <= width:
                text = self.text.copy()
            else:  # too long for the pane: it ends at the last word that fits, as a Static of one line does
                lines = self.text.wrap(self.app.console, max(width, 1), justify="left", overflow="fold")
                text = lines[0] if lines else Text()
            text.rstrip()
            text.end = ""
            # The pane's style, then the line's own over it (Text.render drops a Text's own style), then its spans.
            text.spans[:0] = [Span(0, len(text), base), Span(0, len(text), text.style)]
            self._strip = (key, Strip(text.render(self.app.console), text.cell_len).adjust_cell_length(width, base))
        return self._strip[1]


#: A bar's eighths, lowest first.
BARS = "▁▂▃▄▅▆▇█"


def bucket_peaks(values: Sequence[float], width: int) -> list[float]:
    """The largest value in each of `width` equal slices of `values`; with fewer values than
    cells some slices are empty, and skipped."""
    count = len(values)
    bounds = [count * n // width for n in range(width + 1)]
    return [max(values[start:end]) for start, end in zip(bounds, bounds[1:]) if end > start]


def sparkline_rows(values: Sequence[float], width: int, height: int) -> list[list[tuple[str, float | None]]]:
    """A sparkline `height` rows tall, top row first: each cell's character and where its slice's
    peak stands between the smallest and largest value (0 to 1: its colour), None for a blank.
    Fewer slices than cells are stretched across the width, as Textual's Sparkline draws them."""
    if width <= 0:
        return [[] for _ in range(height)]  # not laid out yet
    if not values:
        return [[(" ", None)] * width for _ in range(height - 1)] + [[("▁", 0.0)] * width]
    if len(values) == 1:
        return [[("█", 1.0)] * width for _ in range(height)]
    peaks = bucket_peaks(values, width)
    low = min(values)
    extent = max(values) - low or 1
    levels = len(BARS) * height - 1
    cells = []
    position, step = 0.0, len(peaks) / width
    for _ in range(width):
        ratio = (peaks[int(position)] - low) / extent
        cells.append((int(ratio * levels), ratio))
        position += step  # added up, not multiplied: the same cells as Textual's own for the same data
    rows = []
    for row in reversed(range(height)):
        bottom, top = row * len(BARS), (row + 1) * len(BARS)
        rows.append(
            [(" ", None) if level < bottom else ("█", ratio) if level >= top else (BARS[level % len(BARS)], ratio) for level, ratio in cells]
        )
    return rows


def blend(low: Color, high: Color, ratio: float) -> Color:
    """The colour `ratio` of the way from `low` to `high`."""
    if low.triplet is None or high.triplet is None:
        return high
    (r1, g1, b1), (r2, g2, b2) = low.triplet, high.triplet
    return Color.from_rgb(r1 + (r2 - r1) * ratio, g1 + (g2 - g1) * ratio, b1 + (b2 - b1) * ratio)


class CellSparkline(PlainLines, KeptStyles, Sparkline):
    """A sparkline repainted only when one of its cells would change, drawn from strips kept
    between frames. A bar's height comes from its slice's maximum scaled between the data's
    minimum and maximum, so when those are unchanged for this width, so is every cell.

    Drawn here, not by Textual's renderable: that took ~0.3 ms a frame for two rows of 40 cells
    (Fraction arithmetic and a Style per cell), every sample."""

    def __init__(self, *, id: str) -> None:
        super().__init__([], id=id)
        self._cells: tuple | None = None
        self._strips: tuple[tuple, list[Strip]] | None = None

    def show(self, values: Sequence[float]) -> None:
        width = self.size.width
        values = list(values)
        cells = (width, tuple(bucket_peaks(values, max(width, 1))), min(values, default=None), max(values, default=None))
        if cells != self._cells:
            self._cells = cells
            self.data = values

    def on_resize(self) -> None:
        self._cells = None  # a new width buckets the data anew (the resize repaints it)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self.base_style
        _, background = self.background_colors
        # The colours are looked up each time: a class on the pane (-slow) changes them with no style notice here.
        low = (background + self.get_component_styles("sparkline--min-color").color).rich_color
        high = (background + self.get_component_styles("sparkline--max-color").color).rich_color
        key = (self.data, width, height, base, low, high)
        if self._strips is None or self._strips[0] != key:
            self._strips = (key, self._draw(width, height, base, low, high))
        strips = self._strips[1]
        return strips[y] if y < len(strips) else Strip.blank(width, base)

    def _draw(self, width: int, height: int, base: Style, low: Color, high: Color) -> list[Strip]:
        styles: dict[float | None, Style] = {None: base}
        strips = []
        for row in sparkline_rows(list(self.data or []), width, height):
            segments = []
            for char, ratio in row:
                style = styles.get(ratio)
                if style is None:
                    style = styles[ratio] = base + Style(color=blend(low, high, ratio))
                segments.append(Segment(char, style))
            strips.append(Strip(Segment.simplify(segments), width))
        return strips


class ThroughputPane(Vertical):
    """Sparklines and figures for the run's rate and loss."""

    DEFAULT_CSS = """
    ThroughputPane {
        height: auto;
        & Sparkline { height: 2; margin: 0 0 0 0; }
        & #loss-spark { height: 1; }
        & Sparkline > .sparkline--max-color { color: $success; }
        & Sparkline > .sparkline--min-color { color: $success 40%; }
        &.-slow Sparkline > .sparkline--max-color { color: $warning; }
        &.-slow Sparkline > .sparkline--min-color { color: $warning 40%; }
        &.-stale #rate-line, &.-stale #baseline-line { color: $warning; }
        & #loss-spark > .sparkline--max-color { color: $accent; }
        & #loss-spark > .sparkline--min-color { color: $accent 40%; }
    }
    """

    def compose(self) -> ComposeResult:
        yield FigureLine(id="rate-line")
        yield CellSparkline(id="rate-spark")
        yield FigureLine(id="baseline-line")
        yield FigureLine(id="loss-line")
        yield CellSparkline(id="loss-spark")
        yield FigureLine(id="step-line")

    def show(self, view: ThroughputView) -> None:
        """Repaint from `view`."""
        rate_line, baseline_line = self.query_one("#rate-line", FigureLine), self.query_one("#baseline-line", FigureLine)
        if view.unit is None or view.current is None:
            rate_line.update(Text("no rate in the log yet", style="dim"))
            baseline_line.update(Text(f"baseline {si(view.baseline)}" if view.baseline else "", style="dim"))
        else:
            self.set_class(view.stale_s is not None, "-stale")
            if view.per_iteration and view.current > 0:
                line = Text.assemble((f"{1 / view.current:.3g}", "bold"), " s/it")
            else:
                line = Text.assemble((si(view.current), "bold"), f" {view.unit}")
            if view.stale_s is not None:
                line.append(f"  last rate written {format_duration(view.stale_s)} ago", "bold")
            elif view.average is not None and view.minimum is not None:
                line.append(f" avg {si(view.average)} min {si(view.minimum)}", "dim")
            rate_line.update(line)
            if view.stale_s is not None:
                baseline_line.update(Text("no rate now: the log gives none", style="bold"))
                self.set_class(False, "-slow")
            elif view.baseline:
                ratio = view.current / view.baseline
                slow = ratio < view.slow_fraction
                baseline_line.update(
                    Text.assemble(
                        (f"{ratio:.0%}", "bold"),
                        f" of baseline {si(view.baseline)}",
                        ("  below normal" if slow else "", "bold"),
                    )
                )
                self.set_class(slow, "-slow")
            else:
                baseline_line.update(Text("no baseline in config [metrics]", style="dim"))
                self.set_class(False, "-slow")
        self.query_one("#rate-spark", CellSparkline).show(view.rates)

        loss_line = self.query_one("#loss-line", FigureLine)
        if view.losses:
            line = Text.assemble("loss ", (f"{view.losses[-1]:.4g}", "bold"))
        else:
            line = Text("no loss in the log yet", style="dim")
        for label, value in (("lr", view.lr), ("grad", view.grad_norm)):
            if value is not None:
                line.append(f" · {label} ")
                line.append(f"{value:.3g}", "bold")
        if view.mfu is not None:
            line.append(" · MFU ")
            line.append(f"{view.mfu:.0%}", "bold")
        loss_line.update(line)
        self.query_one("#loss-spark", CellSparkline).show(view.losses)

        step_line = self.query_one("#step-line", FigureLine)
        if view.step is None:
            step_line.update(Text("no step count in the log yet", style="dim"))
        elif view.total_steps:
            done = view.step / view.total_steps
            eta = "—" if view.eta_s is None or view.stale_s is not None else format_duration(view.eta_s, compact=True)
            step_line.update(
                Text.assemble(
                    "step ",
                    (f"{view.step:,}", "bold"),
                    f"/{view.total_steps:,} {done:.1%} ETA ",
                    (eta, "bold"),
                )
            )
        else:
            step_line.update(Text.assemble("step ", (f"{view.step:,}", "bold")))
