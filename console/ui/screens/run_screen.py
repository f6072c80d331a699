"""The one screen of a run: its panes, their repaint and titles, the log's input modes, jumps and follow.

The single-run console shows it as its default screen; the fleet console shows one per node
(`NodeScreen`, with the fleet's extras). What the screen says is computed from the RunState in
console.ui.run_figures; the screen only lays out, repaints and takes the log's keys. A new pane
is one widget, one CSS rule in pulse.tcss and one line in `compose`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.dom import NoScreen
from textual.events import Resize
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input

from console.config import Config
from console.diagnose import Verdict
from console.model import Sample, run_pids
from console.observe.roles import fold_helpers
from console.state import RunState
from console.stall import Silence
from console.ui.panes.gpu_pane import GpuPane
from console.ui.panes.key_hints import KeyHints
from console.ui.panes.log_pane import LogPane
from console.ui.panes.process_pane import ProcessPane
from console.ui.panes.progress_bar_line import ProgressBarLine
from console.ui.panes.status_bar import StatusBar
from console.ui.panes.throughput_pane import ThroughputPane
from console.ui.panes.titled_box import TitledBox
from console.ui.render import BaseScreen
from console.ui.run_figures import (
    RATE_WINDOW_S,
    BoxTitles,
    LogReading,
    StatusView,
    gpu_graphs,
    gpu_titles,
    log_titles,
    process_titles,
    progress_bar_view,
    status_view,
    throughput_view,
)
from console.ui.themes import Thresholds

if TYPE_CHECKING:  # console.slowness loads with the first diagnosis: the first frame does not wait for it
    from console.slowness import Baseline, Slowdown

#: The screen repaints what changed, and ages, this often.
REFRESH_S = 1.0
#: A sample drawn less than this long ago drew what the second's tick would (ages, figures, the
#: bar's latest redraw): with samples each second the tick draws nothing, one frame a second, not two.
#: Past a sample's period (a second, give or take its jitter, or the tick and the samples drift into
#: step and both draw), so that only a missing sample leaves the tick to draw.
TICK_AFTER_SAMPLE_S = 1.5 * REFRESH_S
#: New log lines and samples go to the panes at most once a frame (Textual draws at most 60 a
#: second): they are on screen the frame after they arrive, and a flood is written in batches.
FRAME_S = 1 / 60
#: Under load (an update less than a frame after the last), updates are spaced this far apart
#: instead: a flood is drawn 20 times a second, so drawing it does not starve the keys.
LOADED_UPDATE_S = 0.05
#: A sample that comes while the log is writing lines waits this long at most for the next line, and
#: is drawn in its frame: a log that writes a line a second or more often (HF Trainer's dicts, a step
#: line a second) costs a frame per line, not one per line and one per sample. Lines never wait (the
#: tail's latency); the sample's wait is at most this part of its period ([gpus] poll_s), so the GPU
#: rows are never a sample behind.
SAMPLE_WAITS_FOR_LINE_S = 0.8
#: The log is writing lines while its last line was drawn less than this long ago (a line every two
#: seconds or more often); a quieter log's samples are drawn as they come.
LINES_RECENT_S = 2.0
#: Below either, the compact layout: one line per GPU role, so the log keeps room.
COMPACT_WIDTH, COMPACT_HEIGHT = 100, 30
#: The log input box's prompt in each of its modes.
LOG_INPUT_PROMPTS = {
    "search": "search (regex, any case): Enter jumps to the nearest match above · n/N next/previous · Esc clears",
    "filter": "show only lines matching (regex, any case): Enter keeps · Esc clears",
    "goto": "go to line number: Enter jumps · Esc closes",
}


class StateChanged(Message, bubble=False):
    """The run's state changed (posted by `RunScreen.mark_changed`, from any thread)."""


class RunScreen(BaseScreen):
    """One run's status line, four panes and log, repainted from its RunState."""

    def __init__(
        self,
        config: Config,
        state: RunState,
        *,
        verdict: Callable[[], Verdict | None],
        thresholds: Callable[[], Thresholds],
        usual_s: Callable[[], float | None] = lambda: None,
        baseline: Callable[[], Baseline | None] = lambda: None,
        read_only: bool = False,
        clock: Callable[[], float] = time.monotonic,
        node_name: str | None = None,
        log_note: str = "",
        on_first_sample: Callable[[], None] = lambda: None,
        poll_s: float | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.config = config
        self.state = state
        self.verdict = verdict
        """The run's latest verdict (None: none yet), for the status line."""
        self.thresholds = thresholds
        self.usual_s = usual_s
        """The run's usual gap between log writes (None: not learned): the processes box's stall limit."""
        self.baseline = baseline
        """What the verdict measures the run's rate against (None: nothing yet): the throughput pane's."""
        self.read_only = read_only
        self.clock = clock
        self.node_name = node_name
        """The fleet node this screen shows (None: the console's one run)."""
        self.log_note = log_note
        """Said last in the log box's subtitle (a fleet node's line pacing)."""
        self.on_first_sample = on_first_sample
        self.poll_s = poll_s
        """Look for new lines and samples this often: a run whose state has no change callback."""
        self.log_input_mode = "filter"
        """What the log's input box does: `search`, `filter` or `goto` (LOG_INPUT_PROMPTS)."""
        self._dirty = True
        self._painted_sample: Sample | None = None
        self._painted_slowdown: Slowdown | None = None
        self._painted_at = float("-inf")
        self._frame_pending = False
        self._lines_drawn_at = 0.0
        self._sample_drawn_at = float("-inf")
        self._held_sample: Timer | None = None
        """Draws a sample that waits for the log's next line, if none comes first (SAMPLE_WAITS_FOR_LINE_S)."""
        self._news_drawn: tuple[object, ...] = ()
        self._panes_found = False
        """on_mount has found the panes: until then there is nothing to repaint (a verdict set first)."""

    # -- layout ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        with TitledBox(id="gpus-box", classes="box"):
            yield GpuPane(id="gpus")
        with Horizontal(id="middle"):
            with TitledBox(id="processes-box", classes="box"):
                yield ProcessPane(id="processes")
            with TitledBox(id="throughput-box", classes="box"):
                yield ThroughputPane(id="throughput")
        with TitledBox(id="log-box", classes="box"):
            yield Input(placeholder="show only lines containing…  (Enter keeps, Esc clears)", id="search")
            yield LogPane(id="log", max_lines=self.state.lines.maxlen or 10_000)
            yield ProgressBarLine(id="progress-line")
        yield KeyHints(id="keys")

    def on_mount(self) -> None:
        # Kept by reference: timers run while a modal screen is on top, where queries would not find them.
        query = self.query_one
        self.status_bar = query(StatusBar)
        self.gpu_pane = query(GpuPane)
        self.process_pane = query(ProcessPane)
        self.throughput_pane = query(ThroughputPane)
        self.log_pane = query(LogPane)
        self.progress_line = query(ProgressBarLine)
        self.search_input = query("#search", Input)
        self.gpus_box, self.processes_box, self.log_box = (query(f"#{name}-box", TitledBox) for name in ("gpus", "processes", "log"))
        self._panes_found = True
        query("#throughput-box", TitledBox).border_title = f"Throughput · {RATE_WINDOW_S / 60:.0f} min"
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)
        self._size_classes()
        self.refresh_panes()
        self.flush_log()
        self.log_pane.focus()
        self.set_interval(REFRESH_S, self.tick)
        if self.poll_s is not None:
            self.set_interval(self.poll_s, self.update_pending)

    def on_resize(self, _event: Resize) -> None:
        if hasattr(self, "gpu_pane"):  # a resize can come before on_mount, which sizes the first layout
            self._size_classes()

    def _size_classes(self) -> None:
        width, height = self.app.size
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.set_class(width < 110, "-narrow")
        self.set_class(height < 34, "-short")
        self.set_class(compact, "-compact")
        self.gpu_pane.set_compact(compact)
        self._show_gpu_graphs()  # a role's row or a GPU's, as the bars

    def _theme_changed(self, _theme: object) -> None:
        self._dirty = True
        self.refresh_panes()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app gates every key, the screen's too (read-only, what is wired)."""
        return self.app.check_action(action, parameters)

    # -- state → panes -----------------------------------------------------------

    def mark_changed(self) -> None:
        """The monitor's on-change callback (cheap, any thread): new log lines and a new sample
        are drawn on the next frame, anything else on the next tick."""
        self._dirty = True
        if not self._frame_pending:
            self._frame_pending = True
            # A message, not call_later: that wraps the callback anew each time, and Textual then
            # reads its signature to call it (a few times a second, ~50 µs each).
            self.post_message(StateChanged())

    @on(StateChanged)
    def _update_in_frame(self) -> None:
        """Update now, or, log lines having been drawn less than a frame ago (a flood),
        LOADED_UPDATE_S after them: whatever arrives meanwhile joins the same batch. A sample
        alone is no load: a line arriving just after one is drawn at once. A sample alone while
        the log writes lines waits for the next one (SAMPLE_WAITS_FOR_LINE_S)."""
        since = time.monotonic() - self._lines_drawn_at
        if since < LINES_RECENT_S and self._only_a_sample_pending():
            self._frame_pending = False  # the next line posts its own frame, and draws the sample in it
            if self._held_sample is None:
                wait_s = SAMPLE_WAITS_FOR_LINE_S * min(1.0, self.config.gpus.poll_s)
                self._held_sample = self.set_timer(wait_s, self.update_pending)
        elif since < FRAME_S:
            self.set_timer(LOADED_UPDATE_S - since, self.update_pending)
        else:
            self.update_pending()

    def _only_a_sample_pending(self) -> bool:
        """A sample is all that changed: no new line, no event (those are drawn at once), and one
        sample was drawn already (the first is drawn as it comes: the console's start waits for it)."""
        state = self.state
        return (
            state.latest is not self._painted_sample
            and self._painted_sample is not None
            and not (state.lines and state.lines[-1].number > self.log_pane.last_number)
            and self._news() == self._news_drawn
        )

    def _news(self) -> tuple[object, ...]:
        """What, besides lines, is drawn at once when it changes: the latest event (a connection, a
        lost agent, a log event), the log followed, and a bar appearing or ending."""
        state = self.state
        return state.events[-1] if state.events else None, state.log_path, state.progress is None

    def update_pending(self) -> None:
        """Draw the lines and the sample that arrived since the last frame."""
        self._frame_pending = False
        if self._held_sample is not None:
            self._held_sample.stop()
            self._held_sample = None
        self._news_drawn = self._news()
        if self.flush_log():
            self._lines_drawn_at = time.monotonic()
            self._dirty = True  # their figures (throughput, problems) are drawn by the next tick at the latest
        if self.state.latest is not self._painted_sample:
            self.refresh_panes()  # the freshest sample on screen now, not up to a tick later
            self._sample_drawn_at = self.clock()

    def tick(self) -> None:
        """Once a second: what changed and what ages (the status line, the log's age, the bar's
        latest redraw), unless a sample's frame just drew them."""
        if self.clock() - self._sample_drawn_at < TICK_AFTER_SAMPLE_S:
            return
        # Samples arriving each second draw what log lines changed (throughput) in their own frame:
        # the tick draws it only when none came, so a watched run costs one frame a second, not two.
        self.refresh_panes(force=False, unless_painted_within=REFRESH_S)
        self.flush_log()  # a state fed without mark_changed, lines held while a modal was up, the bar's ETA

    def flush_log(self) -> bool:
        """Write the lines that arrived since the last flush, in one batch, if the screen is on show;
        True when there were any."""
        if not self._panes_found or not self.log_pane.is_attached:
            return False  # a timer fired while the app tears its screens down
        try:
            if not self.is_current:
                return False
        except NoScreen:  # the timer fired while the app tears its screens down
            return False
        pane = self.log_pane
        lines = self.state.lines_after(pane.last_number)
        if lines:
            pane.append(lines)
        self.progress_line.show(progress_bar_view(self.state, self.clock()))
        return bool(lines)

    def refresh_panes(self, force: bool = True, unless_painted_within: float = 0.0) -> None:
        """Repaint from the state: the status line always (ages move), the rest when it changed
        and was not painted less than `unless_painted_within` seconds ago."""
        if not self._panes_found or not self.process_pane.is_attached:
            return  # a sample or a tick while the app tears its screens down: their styles are gone
        now = self.clock()
        self.status_bar.show(self.status_view(now))
        verdict = self.verdict()
        found = verdict.slowdown if verdict is not None else None
        # A slowdown found (or ended) is marked on the throughput graph at once, not at the next sample.
        if not (force or found != self._painted_slowdown or (self._dirty and now - self._painted_at >= unless_painted_within)):
            self._refresh_titles(now)
            return
        self._painted_slowdown = found
        self._dirty = False
        self._painted_at = now
        sample = self._painted_sample = self.state.latest
        if sample is not None:
            self.gpu_pane.show(sample.gpus, roles=self.config.gpus.roles, own_pids=run_pids(sample.processes), thresholds=self.thresholds())
            self._show_gpu_graphs()
            self.process_pane.show(fold_helpers(sample.processes, self.config.stall.cpu_idle_pct))
            self.on_first_sample()
        self.throughput_pane.show(throughput_view(self.state, self.config.metrics, self.clock(), found, self.baseline()))
        self._refresh_titles(now)

    def _show_gpu_graphs(self) -> None:
        """The graph view's figures over the readings held, computed only while it shows."""
        pane = self.gpu_pane
        if pane.graphs:
            pane.show_graphs(gpu_graphs(self.state.gpu_history, self.config.gpus.roles, by_role=pane.compact))

    def status_view(self, now: float) -> StatusView:
        """The status line now: where the run is, its link, the sample's age and the verdict."""
        return status_view(self.config, self.state, self.verdict(), read_only=self.read_only, now=now)

    def _refresh_titles(self, now: float) -> None:
        span = self.gpu_pane.graph_view.span_s if self.gpu_pane.graphs else None
        set_box(self.gpus_box, gpu_titles(self.state.latest, self.node_name, graphs_span_s=span))
        silence = Silence(self.state.log_silent_s(now), self.usual_s(), override_s=self.config.stall.log_silent_s)
        set_box(self.processes_box, process_titles(self.state, silence, now))
        self._refresh_log_titles()

    def _refresh_log_titles(self) -> None:
        pane = self.log_pane
        reading = LogReading(
            filter_text=pane.filter_text,
            search_text=pane.search_text,
            line_count=pane.line_count,
            error=pane.filter_error or pane.search_error,
            following=pane.following,
            unseen=pane.unseen,
        )
        set_box(self.log_box, log_titles(self.state, self.config.run.log, reading, extra=self.log_note))

    @on(LogPane.FollowChanged)
    def _follow_changed(self) -> None:
        self._refresh_log_titles()

    def action_toggle_gpu_graphs(self) -> None:
        """`g`: the GPUs as graphs over the readings held, or as bars of the newest."""
        self.gpu_pane.set_graphs(not self.gpu_pane.graphs)
        self._show_gpu_graphs()
        self._refresh_titles(self.clock())

    # -- the log's keys ------------------------------------------------------------

    def action_toggle_follow(self) -> None:
        # The log box's subtitle says "following" or "paused · f to follow", set here rather than when
        # the pane's FollowChanged has bubbled up (hops of a busy loop under a flood); no toast on
        # top: each one mounted costs a layout of the whole screen.
        self.log_pane.toggle_follow()
        self._refresh_log_titles()

    def action_next(self) -> None:
        self._jump(backwards=False, match=bool(self.log_pane.search_text))

    def action_previous(self) -> None:
        self._jump(backwards=True, match=bool(self.log_pane.search_text))

    def action_next_problem(self) -> None:
        self._jump(backwards=False, match=False)

    def action_previous_problem(self) -> None:
        self._jump(backwards=True, match=False)

    def _jump(self, *, backwards: bool, match: bool) -> None:
        pane = self.log_pane
        if match:
            line = pane.next_match(backwards=backwards)
        else:
            line = pane.next_problem(self._problem_names(), backwards=backwards)
        if line is None:
            what = "match" if match else "problem"
            self.notify(f"no {what} {'above' if backwards else 'below'}", severity="information", timeout=2)
        self._refresh_log_titles()

    def _problem_names(self) -> frozenset[int]:
        """The line naming each problem the log holds: a traceback's exception line, once for all its lines."""
        return frozenset(problem.name.number for problem in self.state.spans.problems)

    def jump_to_line(self, number: int) -> None:
        """The log at line `number` (a timeline event's), or say it has left the pane."""
        landed = self.log_pane.go_to_line(number)
        if landed is None or landed.number != number:
            self.notify("that line has left the log pane", severity="information", timeout=3)
        self._refresh_log_titles()

    def action_problem_log(self) -> None:
        """`l`, the key verdicts name: the log at its newest problem (the end when there is none)."""
        pane = self.log_pane
        pane.focus()
        if pane.filter_text:
            self.clear_log_input()
        if pane.last_problem(self._problem_names()) is None:
            pane.follow()
            self.notify("no problem in the log held: following its end", timeout=3)
        self._refresh_log_titles()

    def action_follow(self) -> None:
        self.log_pane.follow()

    def action_toggle_tree(self) -> None:
        self.notify("process tree" if self.process_pane.toggle_tree() else "process list", timeout=2)

    def action_toggle_line_numbers(self) -> None:
        self.log_pane.line_numbers = not self.log_pane.line_numbers

    def action_search(self) -> None:
        self._open_log_input("search")

    def action_filter(self) -> None:
        self._open_log_input("filter")

    def action_go_to_line(self) -> None:
        self._open_log_input("goto")

    def _open_log_input(self, mode: str) -> None:
        box = self.search_input
        self.log_input_mode = mode
        box.placeholder = LOG_INPUT_PROMPTS[mode]
        box.add_class("-visible")
        box.value = {"search": self.log_pane.search_text, "filter": self.log_pane.filter_text}.get(mode, "")
        box.focus()

    @on(Input.Changed, "#search")
    def _log_input_changed(self, event: Input.Changed) -> None:
        mode = self.log_input_mode
        if mode == "filter":
            self.log_pane.filter_text = event.value
        elif mode == "search":
            self.log_pane.search_text = event.value
        self._refresh_log_titles()

    @on(Input.Submitted, "#search")
    def _log_input_submitted(self, event: Input.Submitted) -> None:
        mode = self.log_input_mode
        pane = self.log_pane
        if mode == "goto":
            event.input.value = ""
            try:
                number = int(event.value.strip())
            except ValueError:
                self.notify(f"not a line number: {event.value.strip()[:40]!r}", severity="warning", timeout=3)
                return
            line = pane.go_to_line(number)
            if line is None:
                self.notify(f"no line {number} or later is held", severity="warning", timeout=3)
            elif line.number != number:
                self.notify(f"line {number} is not held (pruned or filtered out): at line {line.number}", timeout=3)
        elif mode == "search" and event.value and pane.next_match(backwards=True) is None:
            self.notify("no match", severity="information", timeout=2)
        if not event.value or mode == "goto":
            event.input.remove_class("-visible")
        pane.focus()
        self._refresh_log_titles()

    def clear_log_input(self) -> None:
        """Clear the search and the filter, hide the input box."""
        box = self.search_input
        box.value = ""
        box.remove_class("-visible")
        self.log_pane.filter_text = ""
        self.log_pane.search_text = ""

    def action_clear_search(self) -> None:
        """Esc: clear the search and filter, and follow the end again."""
        self.clear_log_input()
        self.log_pane.follow()
        self.log_pane.focus()
        self._refresh_log_titles()


def set_box(box: TitledBox, titles: BoxTitles) -> None:
    """A box's border as `titles` words it: target text, never parsed as markup; coloured by its level."""
    box.set_titles(Text(titles.title), Text(titles.subtitle))
    box.set_class(titles.level == "warn", "-warn")
    box.set_class(titles.level == "crit", "-crit")
