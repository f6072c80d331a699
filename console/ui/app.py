"""The Pulse console: panes over one RunState, keys from the action table, work in workers.

`PulseApp` renders a `RunState` that something else fills (a Monitor, or a test). It never
awaits the network in its own handlers: new log lines and a new sample are drawn on the frame
after they arrive (at most one update a frame, so a flood coalesces), what else changed on a
1 s tick, and actions run in workers that post typed messages back.
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
from collections.abc import Callable
from typing import Protocol

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.dom import NoScreen
from textual.message import Message
from textual.widgets import Footer, Input

from console.config import Config
from console.evidence import RunLook
from console.observe.roles import fold_helpers
from console.stall import Silence, is_stalled
from console.journal.watch import CHEAP_DIAGNOSIS_S, RunWatch
from console.model import ConnectionState, Sample, run_pids
from console.monitor import Monitor
from console.observe.sampler import gpu_processes_unseen
from console.observe.textsafe import sanitize
from console.ui.start import Sources
from console.user_patterns import disabled_notices
from console.state import RunState
from console.ui.action_screen import ActionScreen
from console.ui.confirm_screen import ConfirmScreen
from console.ui.diagnosis_screen import DiagnosisScreen, verdict_level
from console.ui.gpu_pane import GpuPane
from console.ui.keymap import ACTIONS, STEP_KEYS, ActionSpec, bindings, wired_actions
from console.ui.log_pane import LogPane
from console.ui.palette import PulseCommands
from console.ui.process_pane import ProcessPane
from console.ui.run_view import (
    FRAME_S,
    LOADED_UPDATE_S,
    RATE_WINDOW_S,
    compose_run_panes,
    progress_bar_view,
    throughput_view,
)
from console.ui.status_bar import StatusBar, StatusView
from console.ui.themes import PulseTheme, ThemedApp, run_themed_async
from console.ui.titled_box import TitledBox
from console.ui.progress_bar_line import ProgressBarLine
from console.ui.throughput_pane import ThroughputPane, ThroughputView
from console.units import format_duration

REFRESH_S = 1.0
#: A log that grew less than this long ago "grew just now".
JUST_NOW_S = 2.0
#: Below either, the compact layout: one line per GPU role, so the log keeps room.
COMPACT_WIDTH, COMPACT_HEIGHT = 100, 30
#: The log input box's prompt in each of its modes.
LOG_INPUT_PROMPTS = {
    "search": "search (regex, any case): Enter jumps to the nearest match above · n/N next/previous · Esc clears",
    "filter": "show only lines matching (regex, any case): Enter keeps · Esc clears",
    "goto": "go to line number: Enter jumps · Esc closes",
}


class Startable(Protocol):
    """What the app needs of a monitor: start feeding the state, and stop."""

    def start(self): ...

    def stop(self): ...


MonitorFactory = Callable[[Callable[[], None]], Startable]
"""Given the app's on-change callback, returns a monitor that feeds the app's RunState."""


class StateChanged(Message, bubble=False):
    """The monitor changed the run's state (posted by mark_changed, from any thread)."""


class PlanReady(Message):
    """A mutating action has a plan: show it, ask, then run `execute()`."""

    def __init__(
        self, title: str, lines: list[str], execute, *, confirm: bool = True, dangerous: bool = False, hidden=()
    ) -> None:
        super().__init__()
        self.title = title
        self.lines = lines
        self.execute = execute
        self.confirm = confirm
        self.dangerous = dangerous
        self.hidden = tuple(hidden)
        """The plan's commands that hold control characters: always asked about (console.actions.shown)."""


class ActionRefusedMessage(Message):
    """An action will not run (read-only, not configured, target unreachable): one line for the operator."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class DumpReady(Message):
    """A py-spy dump arrived."""

    def __init__(self, dump) -> None:
        super().__init__()
        self.dump = dump


class TimelineReady(Message):
    """The journal's window for the timeline screen was read."""

    def __init__(self, window) -> None:
        super().__init__()
        self.window = window


class VerdictReady(Message):
    """A diagnosis finished; `show` opens the diagnosis screen (a key press asked for it)."""

    def __init__(self, verdict, evidence, *, show: bool) -> None:
        super().__init__()
        self.verdict = verdict
        self.evidence = evidence
        self.show = show


class PulseApp(ThemedApp):
    """The console for one run on one target."""

    CSS_PATH = "pulse.tcss"
    TITLE = "Pulse"
    COMMANDS = App.COMMANDS | {PulseCommands}
    BINDINGS = bindings(ACTIONS)

    def __init__(
        self,
        config: Config,
        state: RunState,
        *,
        monitor_factory: MonitorFactory | None = None,
        target=None,
        read_only: bool = False,
        clock: Callable[[], float] = time.monotonic,
        theme: str | None = None,
        themes: dict[str, PulseTheme] | None = None,
        watch: Callable[[PulseApp], RunWatch | None] | None = None,
    ) -> None:
        super().__init__(theme=theme, themes=themes)
        self.watch = watch(self) if watch is not None else None
        """The run's journal and alerts (None: the console journals nothing)."""
        self.config = config
        self.state = state
        self.target = target
        self.read_only = read_only
        self.clock = clock
        self.monitor_factory = monitor_factory
        self.monitor: Startable | None = None
        self.action_specs: tuple[ActionSpec, ...] = wired_actions(config, has_target=target is not None)
        self._wired = {spec.action for spec in self.action_specs}
        # Read-only: check_action hides these keys (footer and bindings); pressed anyway, on_key
        # runs them so the action itself says why it is refused.
        self._refused_keys = {
            key: spec.action for spec in self.action_specs if read_only and spec.mutating for key in spec.keys.split(",")
        }
        for spec in self.action_specs:
            if spec.action.startswith("custom("):
                self.bind(spec.keys, spec.action, description=spec.description, key_display=spec.key_display)
        self._dirty = True
        self._painted_sample: Sample | None = None
        self._painted_at = float("-inf")
        self._frame_pending = False
        self._lines_drawn_at = 0.0
        self._patterns_said = 0
        self.log_input_mode = "filter"
        """What the log's input box does: `search`, `filter` or `goto` (LOG_INPUT_PROMPTS)."""
        self.verdict = None
        """The latest Verdict, shown in the status line until the state changes."""
        self.look = RunLook(target, config, state)
        """The verdicts on the run: from the state, and from its stacks once per quiet stretch."""
        self._judged = False
        """A verdict on what the console itself read has been shown (until then each tick tries one)."""
        self._looking = False
        """A full look (two samples, maybe the stacks) is under way."""
        if self.watch is not None and self.watch.restored is not None:
            from console.diagnose import Verdict

            # The journal's last word until the first diagnosis: a reopened console is not blank.
            restored = self.watch.restored
            # A journal written before verdicts named their step kept its console key.
            step = restored.get("step", {key: step for step, key in STEP_KEYS.items()}.get(restored.get("key")))
            self.verdict = Verdict(restored["verdict"], restored["summary"], restored["evidence"], restored["next_step"], step)

    # -- layout ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield from compose_run_panes(self.state.lines.maxlen or 10_000, search=True)
        yield Footer()

    async def on_mount(self) -> None:
        # Kept by reference: timers run while a modal screen is on top, where queries would not find them.
        query = self.query_one
        self.status_bar = query(StatusBar)
        self.gpu_pane = query(GpuPane)
        self.process_pane = query(ProcessPane)
        self.throughput_pane = query(ThroughputPane)
        self.log_pane = query(LogPane)
        self.progress_line = query(ProgressBarLine)
        self.search_input = query("#search", Input)
        self.footer = query(Footer)
        self.gpus_box, self.processes_box, self.log_box = (query(f"#{name}-box", TitledBox) for name in ("gpus", "processes", "log"))
        query("#throughput-box").border_title = f"Throughput · {RATE_WINDOW_S / 60:.0f} min"
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self._size_classes()
        self.refresh_panes()
        self.flush_log()
        self.log_pane.focus()
        self.set_interval(REFRESH_S, self._tick)
        self.set_interval(CHEAP_DIAGNOSIS_S, self.cheap_diagnosis)
        if self.monitor_factory is not None:
            self.monitor = self.monitor_factory(self.mark_changed)
            started = self.monitor.start()
            if inspect.isawaitable(started):
                await started

    async def on_unmount(self) -> None:
        if self.monitor is not None:
            stopped = self.monitor.stop()
            if inspect.isawaitable(stopped):
                await stopped
        if self.watch is not None:
            self.watch.observe()
            await self.watch.close()

    def terminal_write(self, text: str) -> None:
        """Write escape sequences (alert notifications) to the terminal, as App.bell does."""
        if not self.is_headless and self._driver is not None:
            self._driver.write(text)

    def on_resize(self) -> None:
        if hasattr(self, "gpu_pane"):  # a resize can come before on_mount, which sizes the first layout
            self._size_classes()

    def _size_classes(self) -> None:
        width, height = self.size
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.screen.set_class(width < 110, "-narrow")
        self.screen.set_class(height < 34, "-short")
        self.screen.set_class(compact, "-compact")
        self.gpu_pane.set_compact(compact)
        self.footer.compact = compact

    # -- themes ------------------------------------------------------------------

    def _theme_changed(self, _theme) -> None:
        self._dirty = True
        self.refresh_panes()

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
        alone is no load: a line arriving just after one is drawn at once."""
        since = time.monotonic() - self._lines_drawn_at
        if since < FRAME_S:
            self.set_timer(LOADED_UPDATE_S - since, self._update_pending)
        else:
            self._update_pending()

    def _update_pending(self) -> None:
        self._frame_pending = False
        if self.flush_log():
            self._lines_drawn_at = time.monotonic()
        if self.state.latest is not self._painted_sample:
            self.refresh_panes()  # the freshest sample on screen now, not up to a tick later

    def _tick(self) -> None:
        if self.watch is not None:
            self.watch.observe()
        # Judged each second, not every CHEAP_DIAGNOSIS_S, until the first verdict (a console opened on a
        # run judges it once two samples are in) and while a quiet log nears the floor (its look is due then).
        if not self._judged or self.look.quiet:
            self.cheap_diagnosis()
        # Samples arriving each second draw what log lines changed (throughput) in their own frame:
        # the tick draws it only when none came, so a watched run costs one frame a second, not two.
        self.refresh_panes(force=False, unless_painted_within=REFRESH_S)
        self.flush_log()  # a state fed without mark_changed, lines held while a modal was up, the bar's ETA
        self._say_disabled_patterns()

    def _say_disabled_patterns(self) -> None:
        """A config pattern that ran past its time budget is disabled (user_patterns): say which, once."""
        notices = disabled_notices()
        for notice in notices[self._patterns_said :]:
            self.notify(notice, title="pattern disabled", severity="warning", timeout=30)
        self._patterns_said = len(notices)

    def flush_log(self) -> bool:
        """Write the lines that arrived since the last flush, in one batch, if the pane is on show;
        True when there were any."""
        pane = self.log_pane
        try:
            if not pane.screen.is_current:
                return False
        except NoScreen:  # the timer fired while the app tears its screens down
            return False
        lines = self.state.lines_after(pane.last_number)
        if lines:
            pane.append(lines)
        self.progress_line.show(progress_bar_view(self.state, self.clock()))
        return bool(lines)

    def refresh_panes(self, force: bool = True, unless_painted_within: float = 0.0) -> None:
        """Repaint from the state: the status line always (ages move), the rest when it changed
        and was not painted less than `unless_painted_within` seconds ago."""
        if not self.process_pane.is_attached:
            return  # a sample or a tick while the app tears its screens down: their styles are gone
        now = self.clock()
        self.status_bar.show(self.status_view(now))
        if not (force or (self._dirty and now - self._painted_at >= unless_painted_within)):
            self._refresh_titles(now)
            return
        self._dirty = False
        self._painted_at = now
        sample = self._painted_sample = self.state.latest
        gpus = self.gpu_pane
        if sample is not None:
            gpus.show(sample.gpus, roles=self.config.gpus.roles, own_pids=run_pids(sample.processes), thresholds=self.thresholds)
            self.process_pane.show(fold_helpers(sample.processes, self.config.stall.cpu_idle_pct))
            self.settle_heap_once()  # start-up is over: the first sample is on screen
        self.throughput_pane.show(self.throughput_view())
        self._refresh_titles(now)

    def status_view(self, now: float) -> StatusView:
        target = self.config.target
        container = target.container.describe() if target.container else None
        connection: ConnectionState = self.state.connection
        # Whole seconds rounded up: 0.2 s and 0.9 s both read 1 s, so at 1 Hz the line holds still.
        age = None if self.state.last_sample_at is None else math.ceil(max(0.0, now - self.state.last_sample_at))
        return StatusView(
            host=target.host or "this machine",
            container=container,
            run=self.config.run.name,
            status=connection.status,
            connection=connection.describe(now),
            sample_age_s=age,
            verdict=self.verdict.name if self.verdict else None,
            verdict_summary=self.verdict.summary if self.verdict else "",
            verdict_level=verdict_level(self.verdict.name) if self.verdict else "ok",
            read_only=self.read_only,
        )

    def throughput_view(self) -> ThroughputView:
        """The throughput pane's figures for this run, now."""
        return throughput_view(self.state, self.config.metrics, self.clock())

    def _refresh_titles(self, now: float) -> None:
        sample = self.state.latest
        gpus_box = self.gpus_box
        subtitle, level = self.gpu_subtitle(sample)
        gpus_box.set_titles("GPUs", Text(subtitle))  # target text: never parsed as markup
        gpus_box.set_class(level == "warn", "-warn")
        gpus_box.set_class(level == "crit", "-crit")

        processes_box = self.processes_box
        # Counted from the sample: the pane folds a compile's helpers into one row.
        alive = sum(p.state not in ("Z", "X") for p in sample.processes) if sample is not None else 0
        if sample is None:
            title = Text("Processes")
        elif sample.process_error:
            title = Text(f"Processes · {sample.process_error}")
        else:
            title = Text(f"Processes · {alive} alive")
        silent = self.state.log_silent_s(now)
        # The verdict's own stall (console.stall.is_stalled): the box never says "stalled" where the header does not.
        log = Silence(silent, self.look.usual_s, override_s=self.config.stall.log_silent_s)
        stalled = is_stalled(log, self.state.rate_silent_s(now), self.state.rate_interval_s())
        if silent is None:
            grew = "log not read yet"
        else:
            # Under 2 s reads "just now": a run writing every second would flip 0s/1s, and each
            # flip repaints the whole box with the table in it. Never past the stall limit, though.
            just_now = silent < JUST_NOW_S and not stalled
            grew = "log grew just now" if just_now else f"log grew {format_duration(silent)} ago"
        processes_box.set_titles(title, Text(grew))
        processes_box.set_class(stalled, "-crit")
        processes_box.set_class(sample is not None and alive == 0, "-warn")
        self._refresh_log_titles()

    def gpu_subtitle(self, sample: Sample | None) -> tuple[str, str]:
        """The GPUs pane's subtitle and how loud it should be: source, errors, unseen processes."""
        if sample is None:
            return "waiting for the first sample", "ok"
        if sample.gpu_error:
            return f"GPU read failed: {sample.gpu_error}", "crit"
        parts = []
        if sample.gpus:
            names = {gpu.name for gpu in sample.gpus}
            parts.append(f"{len(sample.gpus)} × {names.pop()}" if len(names) == 1 else f"{len(sample.gpus)} GPUs")
        parts.append(sample.gpu_source)
        level = "ok"
        if any(gpu.error for gpu in sample.gpus):
            parts.append("GPU fault")
            level = "crit"
        if self.processes_unseen(sample):
            parts.insert(0, "processes unseen (PID namespace)")
            level = "warn" if level == "ok" else level
        return " · ".join(parts), level

    @staticmethod
    def processes_unseen(sample: Sample) -> bool:
        """True when the driver lists PIDs none of which is the run's (a PID namespace hides the mapping)."""
        return gpu_processes_unseen(sample)

    def _refresh_log_titles(self) -> None:
        box, pane = self.log_box, self.log_pane
        # The path comes from the target (a file's name may hold escape sequences or markup).
        path = sanitize(self.state.log_path or self.config.run.log or "no log configured", 300)[0]
        parts = []
        if pane.filter_text:
            parts.append(f"filter “{pane.filter_text}”: {pane.line_count} lines")
        if pane.search_text:
            parts.append(f"search “{pane.search_text}” · n/N")
        if pane.filter_error or pane.search_error:
            parts.append(pane.filter_error or pane.search_error)
        if pane.following:
            parts.append("following")
        else:
            parts.append(f"paused · {pane.unseen} new lines · f to follow" if pane.unseen else "paused · f to follow")
        problems = len(self.state.spans.problems)
        if problems:
            parts.append(f"{problems} problem{'s' if problems != 1 else ''} · {'[/]' if pane.search_text else 'n/N'} jump")
        box.set_titles(Text(f"Log · {path}"), Text(" · ".join(parts)))
        box.set_class(not pane.following and pane.unseen > 0, "-warn")

    @on(LogPane.FollowChanged)
    def _follow_changed(self) -> None:
        self._refresh_log_titles()

    # -- keys ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        table_actions = {spec.action for spec in ACTIONS}
        if action == "custom":
            action = f"custom({parameters[0]})" if parameters else ""
            if action not in self._wired:
                return False
        elif action in table_actions and action not in self._wired:
            return False
        return action not in self._refused_keys.values()

    async def on_key(self, event) -> None:
        action = self._refused_keys.get(event.key)
        if action is not None and self.screen is self.screen_stack[0] and not isinstance(self.focused, Input):
            event.stop()
            await self.take_action(action)

    async def take_action(self, action: str) -> None:
        """Run a table action (the palette's way in). One that read-only hides runs all the same,
        past check_action, so that it refuses in its own words."""
        if action not in self._refused_keys.values():
            await self.run_action(action)
            return
        name, _, argument = action.partition("(")
        method = getattr(self, f"action_{name}")
        method(int(argument.rstrip(")"))) if argument else method()

    def action_timeline(self) -> None:
        if self.watch is None:
            self.notify("no journal for this console: the timeline needs one", severity="warning", timeout=4)
            return
        self.load_timeline()

    @work(thread=True, exclusive=True, exit_on_error=False, group="timeline")
    def load_timeline(self) -> None:
        """Read the journal's whole window in a thread (the file may hold weeks) and post it."""
        from console.journal.report import Window
        from console.journal.store import MAX_AGE_S

        end = time.time()
        entries, minutes = self.watch.journal.window(end - MAX_AGE_S)
        # The window starts where the journal does, not 30 days back.
        start = min([e.time for e in entries[:1]] + [m.minute * 60 for m in minutes[:1]], default=end)
        self.post_message(TimelineReady(Window(start, end, entries, minutes)))

    @on(TimelineReady)
    def _timeline_ready(self, message: TimelineReady) -> None:
        from console.ui.timeline_screen import TimelineScreen

        def jump(number: int | None) -> None:
            if number is None:
                return
            landed = self.log_pane.go_to_line(number)
            if landed is None or landed.number != number:
                self.notify("that line has left the log pane", severity="information", timeout=3)
            self._refresh_log_titles()

        held = frozenset(line.number for line in self.state.problems)
        self.push_screen(TimelineScreen(message.window, held_lines=held, console_id=self.watch.journal.holder), callback=jump)

    def action_toggle_follow(self) -> None:
        # The log box's subtitle says "following" or "paused · f to follow", set here rather than when
        # the pane's FollowChanged has bubbled up to the app (four hops of a busy loop under a flood);
        # no toast on top: each one mounted costs a layout of the whole screen.
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
        """Esc on the main screen: clear the search and filter, and follow the end again."""
        if self.screen is not self.screen_stack[0]:
            return
        self.clear_log_input()
        self.log_pane.follow()
        self.log_pane.focus()
        self._refresh_log_titles()

    # -- actions on the run -------------------------------------------------------

    def cheap_diagnosis(self) -> None:
        """Diagnose from the samples and lines already held (no I/O); notify if it got worse. When the
        verdict cannot be earned without the run's stacks, look at them (once per quiet stretch)."""
        verdict, due = self.look.cheap()
        if verdict is None:
            return
        self._judged = True
        if due and self.target is not None and not self._looking:
            self.run_diagnosis(show=False)  # its verdict replaces this one in a few seconds
            if self.verdict is not None:
                return
        # The summary changes too ("quiet 12 s"): the header must never keep saying the log progresses.
        if self.verdict is None or (verdict.name, verdict.summary) != (self.verdict.name, self.verdict.summary):
            self.set_verdict(verdict)
        elif self.watch is not None:
            self.watch.verdict(verdict)  # the alerts' hysteresis counts how long a verdict holds

    def selected_process(self):
        """The process on the process table's selected row while the table has focus (None when that
        process is gone: never another one in its place), else the run's main process."""
        from console.evidence import main_process

        sample = self.state.latest
        processes = sample.processes if sample else ()
        if self.process_pane.has_focus:
            pid = self.process_pane.selected_pid()
            return next((p for p in processes if p.pid == pid), None)
        return main_process(processes)

    def action_dump(self) -> None:
        chosen = self.selected_process()
        if chosen is None:
            self.notify("no live process selected to dump: is the run (or the selected row) alive?", severity="warning")
            return
        self.notify(f"py-spy dump of pid {chosen.pid}…", timeout=2)
        self.run_dump(chosen.pid)

    def action_signal(self) -> None:
        """`k`: choose a signal for the selected process, then the plan, a confirmation, the audit."""
        from console.actions.signal import execute_signal, plan_signal
        from console.observe.roles import script_and_args
        from console.ui.signal_screen import SignalScreen

        chosen = self.selected_process()
        if chosen is None:
            self.notify("no live process selected to signal: is the run (or the selected row) alive?", severity="warning")
            return

        def planned(signal: str | None) -> None:
            if signal is None:
                return

            async def make_plan():
                plan = await plan_signal(self.target, chosen.pid, signal, chosen.cmdline, read_only=self.read_only)
                return PlanReady(
                    f"Send SIG{signal}",
                    plan.describe(),
                    lambda: execute_signal(self.target, self.config, plan),
                    dangerous=signal in ("KILL", "TERM", "STOP"),
                )

            self.prepare_action(make_plan)

        if self.read_only:
            planned("TERM")  # the plan refuses every signal read-only, in its own words
            return
        self.push_screen(SignalScreen(chosen.pid, script_and_args(chosen.cmdline)), callback=planned)

    @work(exclusive=True, exit_on_error=False, group="dump")
    async def run_dump(self, pid: int) -> None:
        """py-spy on the target (posts DumpReady, or a one-line refusal)."""
        from console.observe.pyspy_run import DumpError, dump

        try:
            result = await dump(self.target, pid, py_spy=self.config.target.py_spy)
        except DumpError as exc:
            self.post_message(ActionRefusedMessage(str(exc)))
            return
        self.post_message(DumpReady(result))

    @on(DumpReady)
    def _dump_ready(self, message: DumpReady) -> None:
        from console.ui.dump_screen import DumpScreen

        self.push_screen(DumpScreen(message.dump))

    def action_diagnose(self) -> None:
        self.notify("diagnosing: sampling the run…", timeout=2)
        self.run_diagnosis(show=True)

    @work(exclusive=True, exit_on_error=False, group="diagnose")
    async def run_diagnosis(self, *, show: bool) -> None:
        """Gather evidence from the target and diagnose it (posts VerdictReady)."""
        from console.remote.target import TargetError

        self._looking = True
        try:
            verdict, evidence = await self.look.full()
        except TargetError as exc:
            self.post_message(ActionRefusedMessage(f"diagnosis failed: {exc}"))
            return
        finally:
            self._looking = False
        self.post_message(VerdictReady(verdict, evidence, show=show))

    @on(VerdictReady)
    def _verdict(self, message: VerdictReady) -> None:
        self.set_verdict(message.verdict)
        if message.show:
            self.push_screen(DiagnosisScreen(message.verdict, message.evidence))

    def set_verdict(self, verdict) -> None:
        """Show `verdict` in the status line; notify when it is worse than the previous one."""
        from console.verdicts import worse

        previous = self.verdict
        self.verdict = verdict
        if self.watch is not None:
            self.watch.verdict(verdict)
        if previous is not None and worse(verdict.name, previous.name):
            severity = "error" if verdict_level(verdict.name) == "crit" else "warning"
            self.notify(f"{verdict.name}: {verdict.summary}", title="run got worse", severity=severity, timeout=10)
        self.refresh_panes()

    def action_restart(self) -> None:
        from console.actions.restart import execute_restart, plan_restart

        async def make_plan():
            plan = await plan_restart(self.target, self.config, read_only=self.read_only)
            return PlanReady("Restart the run", plan.describe(), lambda: execute_restart(self.target, self.config, plan),
                             dangerous=True, hidden=plan.hidden)

        self.prepare_action(make_plan)

    def action_warmup(self) -> None:
        from console.actions.warmup import execute_warmup, plan_warmup

        async def make_plan():
            plan = plan_warmup(self.config, read_only=self.read_only)
            confirmed = [hidden.escaped for hidden in plan.hidden]  # run only after the dialog that shows them
            return PlanReady("Sequential warmup", plan.describe(),
                             lambda: execute_warmup(self.target, self.config, plan, confirmed=confirmed), hidden=plan.hidden)

        self.prepare_action(make_plan)

    def action_custom(self, index: int) -> None:
        from console.actions.custom import action_context, execute_custom, plan_custom

        custom = self.config.actions[index]
        sample = self.state.latest
        context = action_context(
            self.config,
            sample.processes if sample else (),
            self.state.log_path,
            selected=self.selected_process(),
            selected_gpus=self.gpu_pane.selected_gpus(),
        )

        async def make_plan():
            plan = plan_custom(custom, context, read_only=self.read_only)
            confirmed = [hidden.escaped for hidden in plan.hidden]  # run only after the dialog that shows them
            return PlanReady(
                custom.name,
                plan.describe(),
                lambda: execute_custom(self.target, self.config, plan, confirmed=confirmed),
                confirm=custom.confirm,
                dangerous=custom.dangerous,
                hidden=plan.hidden,
            )

        self.prepare_action(make_plan)

    @work(exclusive=True, exit_on_error=False, group="plan")
    async def prepare_action(self, make_plan) -> None:
        """Build an action's plan off the UI's handlers (planning may read the target)."""
        from console.actions.audit import ActionRefused
        from console.remote.target import TargetError

        try:
            self.post_message(await make_plan())
        except (ActionRefused, TargetError) as exc:
            self.post_message(ActionRefusedMessage(str(exc)))

    @on(ActionRefusedMessage)
    def _refused(self, message: ActionRefusedMessage) -> None:
        self.notify(message.text, severity="warning", timeout=6)

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        def run(confirmed: bool | None) -> None:
            if confirmed:
                self.push_screen(ActionScreen(message.title, message.execute), callback=lambda _ok: self.mark_changed())

        if message.confirm or message.hidden:  # confirm = false never skips confirming an escaped command
            screen = ConfirmScreen(message.title, message.lines, dangerous=message.dangerous, hidden=message.hidden)
            self.push_screen(screen, callback=run)
        else:
            run(True)


async def run_console_app(config: Config, args: argparse.Namespace, sources: Sources) -> int:
    """Run the console on `sources` (started before the UI loaded: console.ui.start) until quit."""

    def attach(on_change: Callable[[], None]) -> Monitor:
        sources.monitor.on_change = on_change
        return sources.monitor

    def take_watch(app: PulseApp) -> RunWatch | None:
        sources.terminal.append(app.terminal_write)
        return sources.watch

    def make_app(theme: str, themes: dict[str, PulseTheme]) -> PulseApp:
        return PulseApp(
            config,
            sources.state,
            monitor_factory=attach,
            target=sources.target,
            read_only=bool(getattr(args, "read_only", False)),
            theme=theme,
            themes=themes,
            watch=take_watch,
        )

    return await run_themed_async(make_app, args)
