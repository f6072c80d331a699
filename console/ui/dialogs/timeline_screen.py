"""The run's history (`h`): the journal's events beside a plot of throughput and loss.

Problem verdicts are labelled bands in a strip below the curves (a block over them hid both),
restarts and problem lines are vertical marks.
Enter on an event whose log line this console still holds closes the screen with that line's
number, and the app jumps the log there.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import OptionList
from textual.widgets.option_list import Option
from textual_plotext import PlotextPlot

from console.journal.report import Points, TimelineView, Window, clock_text, round_ticks, timeline_events, timeline_view
from console.state import RATE_UNITS
from console.ui.dialogs.modal import FramedModal
from console.units import si
from console.verdicts import level as verdict_level

#: Colours of the plot's marks (plotext colour names).
BAND_COLOURS = {"warn": "orange", "crit": "red"}
RATE_COLOUR, LOSS_COLOUR, RESTART_COLOUR, PROBLEM_COLOUR = "cyan", "magenta", "green", "red"
#: The share of the plot's height below the lines, where the verdict bands run as a strip.
BAND_ROOM = 0.15
#: The share above them, where the legend is drawn (three rows of a plot at 120×40).
LEGEND_ROOM = 0.15
BAND_MARKER = "▀"
KIND_STYLES = {"verdict": "bold", "problem": "red", "action": "green", "alert": "yellow", "connection": "cyan"}


class TimelinePlot(PlotextPlot):
    """Throughput (left axis) and loss (right axis), each verdict's band a labelled strip below them, and marks."""

    def show(self, view: TimelineView) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        unit = RATE_UNITS.get(view.rate_metric or "", "rate")
        # Each axis leaves its bottom BAND_ROOM free, where the bands' strip runs over no line, and
        # its top LEGEND_ROOM, where the legend (top left) hides none.
        rate_low, rate_high = _headroom(view.rate[1])
        loss_low, loss_high = _headroom(view.loss[1])
        strip = rate_low + (rate_high - rate_low) * BAND_ROOM / 3
        labelled: set[str] = set()
        for name, start, end in view.bands:
            colour = BAND_COLOURS[verdict_level(name)]
            # Each verdict named once in the legend, and each band by its name where it starts.
            plt.plot([start, end], [strip, strip], color=colour, marker=BAND_MARKER, label=None if name in labelled else name)
            plt.text(name, start, strip, color="black", background=colour, alignment="left")
            labelled.add(name)
        for at in view.restarts:
            plt.vline(at, RESTART_COLOUR)
        for at in view.problems:
            plt.vline(at, PROBLEM_COLOUR)
        if view.rate[0]:
            plt.plot(*view.rate, color=RATE_COLOUR, marker="braille", label=unit)
            plt.ylim(rate_low, rate_high, yside="left")  # type: ignore[arg-type]  # textual-plotext types yside as a number; plotext takes "left"/"right"
            plt.yticks(*_round_axis(view.rate[1]), yside="left")  # type: ignore[arg-type]  # as above
        if view.loss[0]:
            plt.plot(*view.loss, color=LOSS_COLOUR, marker="braille", label="loss", yside="right")
            plt.ylim(loss_low, loss_high, yside="right")  # type: ignore[arg-type]  # as above
            plt.yticks(*_round_axis(view.loss[1]), yside="right")  # type: ignore[arg-type]  # as above
        if view.ticks:
            plt.xticks([at for at, _ in view.ticks], [label for _, label in view.ticks])
        plt.xlabel("UTC   green: restarts · red: problem lines")
        self.refresh()


def _headroom(values: tuple[float, ...]) -> tuple[float, float]:
    """An axis's range over `values` with BAND_ROOM of it left free at the bottom and LEGEND_ROOM at the top."""
    low, high = min(values, default=0.0), max(values, default=1.0)
    whole = (high - low or abs(high) * 0.1 or 1.0) / (1 - BAND_ROOM - LEGEND_ROOM)
    return low - whole * BAND_ROOM, high + whole * LEGEND_ROOM


def _round_axis(values: tuple[float, ...]) -> tuple[list[float], list[str]]:
    """Round ticks over `values` and their labels: 14K, 2.4, not 2.39871."""
    ticks = round_ticks(min(values), max(values))
    return list(ticks), [f"{tick:.3g}" if abs(tick) < 1000 else si(tick) for tick in ticks]


class TimelineScreen(FramedModal[int | None]):
    """The journal's window as a list and a plot; dismisses with a log line number to jump to, or None."""

    BINDINGS = [Binding("escape,q,h", "dismiss", "Close")]

    DEFAULT_CSS = """
    TimelineScreen {
        & > .frame { width: 96%; height: 92%; }
        OptionList { width: 2fr; height: 1fr; border: none; }
        TimelinePlot { width: 3fr; height: 1fr; }
    }
    """

    def __init__(self, window: Window, *, held_points: Mapping[str, Points], held_lines: frozenset[int], console_id: str) -> None:
        super().__init__()
        self.window = window
        self.held_points = held_points
        """The series this console holds, in Unix time: drawn at their own resolution where the journal has minutes."""
        self.held_lines = held_lines
        """Numbers of the problem lines this console still holds."""
        self.console_id = console_id
        """This console's journal writer: only its entries' line numbers are its own."""

    def compose(self) -> ComposeResult:
        with Horizontal(classes="frame") as box:
            box.border_title = f"Timeline · {clock_text(self.window.start)[:16]} → {clock_text(self.window.end)[:16]} UTC"
            box.border_subtitle = "↑↓ events · Enter jump to the log line (↵ marks those still held) · Esc close"
            yield OptionList(*self._options(), id="events")
            yield TimelinePlot()

    def _options(self) -> list[Option]:
        options = []
        for index, entry in timeline_events(self.window.entries):
            line = self._line_of(entry)
            text = Text(f"{clock_text(entry.time)[5:16]} ")
            text.append(f"{entry.kind:<10} ", KIND_STYLES.get(entry.kind, "dim"))
            text.append(entry.text)  # log and target text: never markup
            if line is not None:
                text.append(" ↵", "bold")
            options.append(Option(text, id=str(index)))
        return options

    def _line_of(self, entry) -> int | None:
        line = entry.data.get("line")
        mine = entry.kind == "problem" and entry.data.get("console") == self.console_id
        return line if mine and line in self.held_lines else None

    def on_mount(self) -> None:
        self.query_one(TimelinePlot).show(timeline_view(self.window, self.held_points))
        events = self.query_one(OptionList)
        events.focus()
        if self.window.entries:
            events.highlighted = events.option_count - 1

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        assert event.option.id is not None  # each option's id is its entry's index
        entry = self.window.entries[int(event.option.id)]
        line = self._line_of(entry)
        if line is None:
            self.notify("this event has no line in the log any more" if entry.kind == "problem" else "not a log line", timeout=3)
            return
        self.dismiss(line)
