"""The Pulse console: one run's screen, keys from the action table, work in workers.

`PulseApp` shows a `RunScreen` over a `RunState` that something else fills (a Monitor, or a
test); the screen draws it (new lines and samples on the next frame, what else changed each
second). The app owns themes, key gating, the workers and the plan → confirm → execute flow. It
never awaits the network in its own handlers: actions run in workers that post typed messages back.
"""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from textual import on, work
from textual.app import App
from textual.events import Key
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widgets import Input

from console.config import Config
from console.diagnose import Evidence, SteadyVerdict, Verdict
from console.evidence import RunLook
from console.journal.watch import CHEAP_DIAGNOSIS_S, RunWatch
from console.model import LogLine
from console.monitor import Monitor
from console.state import RunState
from console.ui import render
from console.ui.keymap import ACTIONS, ActionSpec, bindings, wired_actions
from console.ui.palette import PulseCommands
from console.verdicts import level as verdict_level
from console.verdicts import worse
from console.ui.screens.run_screen import RunScreen
from console.ui.start import SignalEnding, Sources
from console.ui.themes import PulseTheme, ThemedApp, run_themed_async

if TYPE_CHECKING:  # loaded with the actions and dialogs that need them: the first frame comes sooner
    from console.actions.audit import OutputLine, StepEvent
    from console.actions.guards import ProcessTree
    from console.actions.shown import HiddenControls
    from console.journal.report import Points, Window
    from console.observe.pyspy import ProcessDump

REFRESH_S = 1.0


class Startable(Protocol):
    """What the app needs of a monitor: start feeding the state, and stop."""

    def start(self): ...

    def stop(self): ...


MonitorFactory = Callable[[Callable[[], None]], Startable]
"""Given the app's on-change callback, returns a monitor that feeds the app's RunState."""


class PlanReady(Message):
    """A mutating action has a plan: show it, ask, then run `execute()`."""

    def __init__(
        self,
        title: str,
        lines: list[str],
        execute: Callable[[], AsyncIterator[StepEvent | OutputLine]],
        *,
        confirm: bool = True,
        dangerous: bool = False,
        hidden: Iterable[HiddenControls] = (),
    ) -> None:
        super().__init__()
        self.title = title
        self.lines = lines
        self.execute = execute
        self.confirm = confirm
        self.dangerous = dangerous
        self.hidden = tuple(hidden)
        """The plan's commands that hold control characters: always asked about (console.actions.shown)."""


class TreesToPick(Message):
    """The restart's match found several unrelated process trees: the operator picks the run's, or all."""

    def __init__(self, trees: tuple[ProcessTree, ...], *, note: str | None = None) -> None:
        super().__init__()
        self.trees = trees
        self.note = note
        """Why the picker is shown again (the tree picked before is gone); None the first time."""


class ActionRefusedMessage(Message):
    """An action will not run (read-only, not configured, target unreachable): one line for the operator."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class DumpReady(Message):
    """A py-spy dump arrived."""

    def __init__(self, dump: ProcessDump) -> None:
        super().__init__()
        self.dump = dump


class TimelineReady(Message):
    """The journal's window for the timeline screen was read."""

    def __init__(self, window: Window, held_points: Mapping[str, Points]) -> None:
        super().__init__()
        self.window = window
        self.held_points = held_points
        """The series this console holds (Unix time, value), finer than the window's minutes."""


class VerdictReady(Message):
    """A diagnosis finished; `show` opens the diagnosis screen (a key press asked for it)."""

    def __init__(self, verdict: Verdict, evidence: Evidence, *, show: bool) -> None:
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
        self.run_watch = watch(self) if watch is not None else None
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
        self._on_screen = {spec.action for spec in self.action_specs if spec.on_screen}
        # Read-only: check_action hides these keys (footer and bindings); pressed anyway, on_key
        # runs them so the action itself says why it is refused.
        self._refused_keys = {
            key: spec.action for spec in self.action_specs if read_only and spec.mutating for key in spec.keys.split(",")
        }
        for spec in self.action_specs:
            if spec.action.startswith("custom("):
                self.bind(spec.keys, spec.action, description=spec.description, key_display=spec.key_display)
        self._patterns_said = 0
        self.verdict: Verdict | None = self.run_watch.restored if self.run_watch is not None else None
        """The latest Verdict, shown in the status line until the state changes; at first the journal's
        last word (a reopened console is not blank until its first diagnosis)."""
        self.steady = SteadyVerdict()
        """What the header says: a better verdict once it has held (the journal and the alerts hear the same).
        The journal's last word is not in it: the first diagnosis replaces that at once."""
        self.look = RunLook(target, config, state)
        """The verdicts on the run: from the state, and from its stacks once per quiet stretch."""
        self._judged = False
        """A verdict on what the console itself read has been shown (until then each tick tries one)."""
        self._looking = False
        """A full look (two samples, maybe the stacks) is under way."""
        self._problem_judged: LogLine | None = None
        """The newest problem line the header has been judged with."""
        self.run_screen = RunScreen(
            config,
            state,
            verdict=lambda: self.verdict,
            thresholds=lambda: self.thresholds,
            usual_s=lambda: self.look.usual_s,
            baseline=lambda: self.look.baseline,
            read_only=read_only,
            clock=clock,
            on_first_sample=self.settle_heap_once,  # start-up is over: the first sample is on screen
            id="_default",
        )
        """The run's screen, under every other (the app's default screen)."""

    def get_default_screen(self) -> RunScreen:
        return self.run_screen

    async def on_mount(self) -> None:
        self.set_interval(REFRESH_S, self._tick)
        self.set_interval(CHEAP_DIAGNOSIS_S, self.cheap_diagnosis)
        if self.monitor_factory is not None:
            self.monitor = self.monitor_factory(self.run_screen.mark_changed)
            started = self.monitor.start()
            if inspect.isawaitable(started):
                await started

    async def on_unmount(self) -> None:
        if self.monitor is not None:
            stopped = self.monitor.stop()
            if inspect.isawaitable(stopped):
                await stopped
        if self.run_watch is not None:
            self.run_watch.observe()
            await self.run_watch.close()

    def journal_action(self, entry: dict) -> None:
        """An audit record of an action taken from this console, copied into the run's journal (if it keeps one)."""
        if self.run_watch is not None:
            self.run_watch.record_action(entry)

    def terminal_write(self, text: str) -> None:
        """Write escape sequences (alert notifications) to the terminal, as App.bell does."""
        render.terminal_write(self, text)

    def _tick(self) -> None:
        if self.run_watch is not None:
            self.run_watch.observe()
        # Judged each second, not every CHEAP_DIAGNOSIS_S, until the first verdict (a console opened on a
        # run judges it once two samples are in), while a quiet log nears the floor (its look is due then),
        # and when a problem line came (a traceback is flagged in the header at once, not seconds later).
        problem = self.state.problems[-1] if self.state.problems else None
        if not self._judged or self.look.quiet or problem is not self._problem_judged:
            self._problem_judged = problem
            self.cheap_diagnosis()
        self._say_disabled_patterns()

    def _say_disabled_patterns(self) -> None:
        """A config pattern that ran past its time budget is disabled (user_patterns): say which, once."""
        notices = self.state.disabled_patterns
        for notice in notices[self._patterns_said :]:
            self.notify(notice, title="pattern disabled", severity="warning", timeout=30)
        self._patterns_said = len(notices)

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

    async def on_key(self, event: Key) -> None:
        action = self._refused_keys.get(event.key)
        if action is not None and self.screen is self.run_screen and not isinstance(self.focused, Input):
            event.stop()
            await self.take_action(action)

    async def take_action(self, action: str) -> None:
        """Run a table action (the palette's way in, and a verdict's next step). One that read-only
        hides runs all the same, past check_action, so that it refuses in its own words."""
        if action in self._on_screen:
            await self.run_action(action, self.run_screen)
            return
        if action not in self._refused_keys.values():
            await self.run_action(action)
            return
        name, _, argument = action.partition("(")
        method = getattr(self, f"action_{name}")
        method(int(argument.rstrip(")"))) if argument else method()

    def action_timeline(self) -> None:
        if self.run_watch is None:
            self.notify("no journal for this console: the timeline needs one", severity="warning", timeout=4)
            return
        self.load_timeline(self.run_watch, self.run_watch.recorder.held_points())

    @work(thread=True, exclusive=True, exit_on_error=False, group="timeline")
    def load_timeline(self, run_watch: RunWatch, held_points: Mapping[str, Points]) -> None:
        """Read the journal's whole window in a thread (the file may hold weeks) and post it."""
        from console.journal.report import Window
        from console.journal.store import MAX_AGE_S

        end = time.time()
        entries, minutes = run_watch.journal.window(end - MAX_AGE_S)
        # The window starts where the journal does, not 30 days back.
        start = min([e.time for e in entries[:1]] + [m.minute * 60 for m in minutes[:1]], default=end)
        self.post_message(TimelineReady(Window(start, end, entries, minutes), held_points))

    @on(TimelineReady)
    def _timeline_ready(self, message: TimelineReady) -> None:
        from console.ui.dialogs.timeline_screen import TimelineScreen

        def jump(number: int | None) -> None:
            if number is not None:
                self.run_screen.jump_to_line(number)

        assert self.run_watch is not None  # the timeline is read from it
        held = frozenset(line.number for line in self.state.problems)
        self.push_screen(TimelineScreen(message.window, held_points=message.held_points, held_lines=held, console_id=self.run_watch.journal.holder), callback=jump)

    # -- actions on the run -------------------------------------------------------

    def cheap_diagnosis(self) -> None:
        """Diagnose from the samples and lines already held (no I/O); notify if it got worse. When the
        verdict cannot be earned without the run's stacks, look at them (once per quiet stretch)."""
        verdict, due, proven = self.look.cheap()
        if verdict is None:
            return
        self._judged = True
        if due and self.target is not None and not self._looking:
            self.run_diagnosis(show=False)  # its verdict replaces this one in a few seconds
            if self.verdict is not None and not (proven and worse(verdict.name, self.verdict.name)):
                return
        # The summary changes too ("quiet 12 s"): the header must never keep saying the log progresses.
        if self.verdict is None or (verdict.name, verdict.summary) != (self.verdict.name, self.verdict.summary):
            self.set_verdict(verdict)
        elif self.run_watch is not None:
            self.run_watch.verdict(verdict)  # the alerts' hysteresis counts how long a verdict holds

    def selected_process(self):
        """The process on the process table's selected row while the table has focus (None when that
        process is gone: never another one in its place), else the run's main process."""
        from console.evidence import main_process

        sample = self.state.latest
        processes = sample.processes if sample else ()
        if self.run_screen.process_pane.has_focus:
            pid = self.run_screen.process_pane.selected_pid()
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
        from console.ui.dialogs.signal_screen import SignalScreen

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
                    lambda: execute_signal(self.target, self.config, plan, on_record=self.journal_action),
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
        from console.ui.dialogs.dump_screen import DumpScreen

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
            from console.ui.dialogs.diagnosis_screen import DiagnosisScreen

            self.push_screen(DiagnosisScreen(message.verdict, message.evidence))

    def set_verdict(self, verdict) -> None:
        """Show `verdict`, held steady (console.diagnose.steady), in the status line; notify when it is worse
        than the previous one."""
        previous = self.verdict
        verdict = self.verdict = self.steady.observe(verdict, self.clock())
        if self.run_watch is not None:
            self.run_watch.verdict(verdict)
        if previous is not None and worse(verdict.name, previous.name):
            severity: SeverityLevel = "error" if verdict_level(verdict.name) == "crit" else "warning"
            self.notify(f"{verdict.name}: {verdict.summary}", title="run got worse", severity=severity, timeout=10)
        self.run_screen.refresh_panes()

    def action_restart(self) -> None:
        self.plan_restart_with(root=None, all_roots=False)

    def plan_restart_with(self, *, root: int | None, all_roots: bool) -> None:
        """Plan the restart, with the operator's pick among process trees once made (`root`, or
        `all_roots`): its confirmation, or the picker while the match finds several trees and none is
        picked. The plan warns when the verdict on screen is healthy."""
        from console.actions.restart import PlanRefused, execute_restart, plan_restart

        async def make_plan():
            try:
                plan = await plan_restart(self.target, self.config, read_only=self.read_only, root=root,
                                          all_roots=all_roots, verdict=self.verdict)
            except PlanRefused as refused:
                if not refused.plan.root_needed:
                    raise
                gone = None if root is None else f"PID {root} is no longer the root of a tree the match finds: pick again"
                return TreesToPick(refused.plan.trees, note=gone)
            return PlanReady("Restart the run", plan.describe(), lambda: execute_restart(self.target, self.config, plan, on_record=self.journal_action),
                             dangerous=True, hidden=plan.hidden)

        self.prepare_action(make_plan)

    @on(TreesToPick)
    def _trees_to_pick(self, message: TreesToPick) -> None:
        from console.ui.dialogs.tree_picker_screen import RootChoice, TreePickerScreen

        def picked(choice: RootChoice | None) -> None:
            if choice is not None:
                self.plan_restart_with(root=choice.root, all_roots=choice.root is None)

        self.push_screen(TreePickerScreen(message.trees, note=message.note), callback=picked)

    def action_warmup(self) -> None:
        from console.actions.warmup import execute_warmup, plan_warmup

        async def make_plan():
            plan = plan_warmup(self.config, read_only=self.read_only, sample=self.state.latest)  # warns of GPUs in use
            confirmed = [hidden.escaped for hidden in plan.hidden]  # run only after the dialog that shows them
            return PlanReady("Sequential warmup", plan.describe(),
                             lambda: execute_warmup(self.target, self.config, plan, confirmed=confirmed,
                                                    on_record=self.journal_action),
                             hidden=plan.hidden)

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
            selected_gpus=self.run_screen.gpu_pane.selected_gpus(),
        )

        async def make_plan():
            plan = plan_custom(custom, context, read_only=self.read_only)
            confirmed = [hidden.escaped for hidden in plan.hidden]  # run only after the dialog that shows them
            return PlanReady(
                custom.name,
                plan.describe(),
                lambda: execute_custom(self.target, self.config, plan, confirmed=confirmed, on_record=self.journal_action),
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
        from console.ui.dialogs.action_screen import ActionScreen
        from console.ui.dialogs.confirm_screen import ConfirmScreen

        def run(confirmed: bool | None) -> None:
            if confirmed:
                self.push_screen(ActionScreen(message.title, message.execute), callback=lambda _ok: self.run_screen.mark_changed())

        if message.confirm or message.hidden:  # confirm = false never skips confirming an escaped command
            screen = ConfirmScreen(message.title, message.lines, dangerous=message.dangerous, hidden=message.hidden)
            self.push_screen(screen, callback=run)
        else:
            run(True)


async def run_console_app(config: Config, args: argparse.Namespace, sources: Sources, ending: SignalEnding) -> int:
    """Run the console on `sources` (started before the UI loaded: console.ui.start) until quit, or
    until `ending` says a signal ended it (its exit status then)."""

    def attach(on_change: Callable[[], None]) -> Monitor:
        sources.monitor.on_change = on_change
        return sources.monitor

    def take_watch(app: PulseApp) -> RunWatch | None:
        sources.terminal.append(app.terminal_write)
        return sources.watch

    def make_app(theme: str, themes: dict[str, PulseTheme]) -> PulseApp:
        app = PulseApp(
            config,
            sources.state,
            monitor_factory=attach,
            target=sources.target,
            read_only=bool(getattr(args, "read_only", False)),
            theme=theme,
            themes=themes,
            watch=take_watch,
        )
        # Through the app's queue: a signal before the app mounted ends it once mounted, by the
        # same way out (an exit before its start would skip its unmount: the journal left open).
        ending.exit_with(lambda status: app.call_next(app.exit, return_code=status))
        return app

    return await run_themed_async(make_app, args)
