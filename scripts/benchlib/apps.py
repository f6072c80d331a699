"""The measurements that run the console itself, each in a child process of its own.

`scripts/bench.py --child PHASE SPEC RESULT` runs one of PHASES with the JSON spec the
parent wrote and writes a JSON result, so each phase's CPU and memory figures are the
console's alone (no other phase's objects, no sshd or writer in the same process).
The app is the real PulseApp under Textual's headless driver (`run_test`) at 120×40, fed
by the real Monitor over SSH; `BenchApp` only adds a key that records when it was handled.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import sys
import threading
import time
from array import array
from pathlib import Path

from textual import events
from textual.binding import Binding

from benchlib import procs
from benchlib.stats import slope, summary
from benchlib.world import config_from_spec
from console.monitor import Monitor
from console.remote.connect import make_target
from console.state import RunState
from console.ui import app as app_module
from console.ui.app import PulseApp
from console.ui.dialogs.diagnosis_screen import DiagnosisScreen

SIZE = (120, 40)
PING_KEY = "ctrl+b"
PING_EVERY_S = 0.05
PING_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 20.0
STAMP = "T="


class BenchApp(PulseApp):
    """PulseApp plus one key that records when its handler ran (for key-response latency)."""

    BINDINGS = [*PulseApp.BINDINGS, Binding(PING_KEY, "bench_ping", show=False)]
    CSS_PATH = str(Path(app_module.__file__).with_name(PulseApp.CSS_PATH))
    settle_heap = True  # as `pulse` runs it (run_themed_async)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ping_handled: collections.deque[float] = collections.deque()

    def action_bench_ping(self) -> None:
        self.ping_handled.append(time.perf_counter())


class Pinger:
    """A thread that presses PING_KEY every PING_EVERY_S the way the terminal driver's input thread does."""

    def __init__(self, app: BenchApp) -> None:
        self.app = app
        self.sent: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-pinger", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(PING_EVERY_S):
            self.sent.append(time.perf_counter())
            self.app.post_message(events.Key(PING_KEY, None))

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    async def latencies_ms(self) -> list[float]:
        """Handled − pressed for each key (waiting up to PING_TIMEOUT_S for the last ones)."""
        deadline = time.monotonic() + PING_TIMEOUT_S
        while len(self.app.ping_handled) < len(self.sent) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        handled = list(self.app.ping_handled)
        now = time.perf_counter()
        out = [((handled[i] if i < len(handled) else now) - sent) * 1000 for i, sent in enumerate(self.sent)]
        self.app.ping_handled.clear()
        self.sent.clear()
        return out


class StampedRunState(RunState):
    """A RunState that notes when each line carrying a write time (`T=…`) arrived."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arrival_ms: dict[int, float] = {}
        self.written_at: dict[int, float] = {}

    def add_lines(self, lines) -> None:
        lines = list(lines)
        super().add_lines(lines)
        now = time.time()
        for line in lines:
            if line.text.startswith(STAMP):
                written = float(line.text[len(STAMP) :].split(" ", 1)[0])
                self.written_at[line.number] = written
                self.arrival_ms[line.number] = (now - written) * 1000


def watch_screen(app: PulseApp) -> dict[int, float]:
    """Time (time.time()) each log line was first drawn by the log pane, by line number.

    Wraps what draws the pane's rows (`line_renderer`, also behind its render_line), which the
    compositor asks for in each frame that draws the pane.
    """
    pane = app.run_screen.log_pane
    drawn: dict[int, float] = {}
    line_renderer = pane.line_renderer

    def timed_line_renderer():
        render_line, top, shown = line_renderer(), pane.scroll_offset.y, pane._shown

        def timed_render_line(y: int):
            if top + y < len(shown):
                drawn.setdefault(shown[top + y].number, time.time())
            return render_line(y)

        return timed_render_line

    pane.line_renderer = timed_line_renderer
    return drawn


def watch_sample_age(app: PulseApp, state: RunState) -> list[float]:
    """Age (ms) of each sample's data the first time the GPU pane draws it: the frame's time
    minus the time the agent began reading that sample on the target (the same clock here)."""
    pane = app.run_screen.gpu_pane
    ages: list[float] = []
    drawn: set[float] = set()
    render_line = pane.render_line

    def timed_render_line(y: int):
        latest = state.latest
        if latest is not None and latest.time not in drawn and pane.gpus:
            drawn.add(latest.time)
            ages.append((time.time() - latest.time) * 1000)
        return render_line(y)

    pane.render_line = timed_render_line
    return ages


async def until(predicate, timeout_s: float, what: str, step_s: float = 0.005) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(step_s)


def monitored_app(config, state: RunState, **kwargs) -> BenchApp:
    target = make_target(config.target)
    return BenchApp(
        config, state, monitor_factory=lambda changed: Monitor(config, target, state, changed), target=target, **kwargs
    )


async def ready(state: RunState) -> None:
    """The monitor has a sample and follows the log."""
    await until(lambda: state.latest is not None and state.log_path is not None, READY_TIMEOUT_S, "the first sample")


async def writer(argv: list[str]) -> int:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    return int(out.decode().strip() or 0)


# -- phases ------------------------------------------------------------------------------


async def tail(spec: dict) -> dict:
    """Write → RunState and write → drawn on screen, per stamped line."""
    config = config_from_spec(spec["config"])
    state = StampedRunState()
    app = monitored_app(config, state)
    async with app.run_test(size=SIZE) as pilot:
        await ready(state)
        drawn = watch_screen(app)
        written = await writer(spec["writer"])
        await until(lambda: len(drawn.keys() & state.written_at.keys()) >= written, 5.0, "the last lines on screen")
        await pilot.pause()
    screen = [(drawn[n] - state.written_at[n]) * 1000 for n in state.written_at if n in drawn]
    return {
        "written": written,
        "state_ms": summary(list(state.arrival_ms.values())),
        "screen_ms": summary(screen),
    }


async def flood(spec: dict) -> dict:
    """Rising append rates; at each, whether the console kept up and how fast it answered a key."""
    config = config_from_spec(spec["config"])
    state = RunState()
    app = monitored_app(config, state)
    steps = []
    async with app.run_test(size=SIZE):
        await ready(state)
        total = state.lines_received
        for rate in spec["rates"]:
            received_before = state.lines_received
            with Pinger(app) as pinger:
                started = time.monotonic()
                written = await writer([*spec["writer"], str(rate), str(spec["seconds"])])
                wrote_s = time.monotonic() - started
                total += written
                caught_up = True
                try:
                    await until(lambda: state.lines_received >= total, spec["grace_s"], "the flood's last line", 0.01)
                except RuntimeError:
                    caught_up = False
                lag_s = time.monotonic() - started - wrote_s
            keys = await pinger.latencies_ms()
            got = state.lines_received - received_before
            step = {
                "rate": rate,
                "written": written,
                "received": got,
                "write_s": round(wrote_s, 2),
                "lines_per_s": round(got / (wrote_s + lag_s)),
                "catch_up_s": round(lag_s, 3) if caught_up else None,
                "key_ms": summary(keys),
            }
            step["kept_up"] = caught_up and (step["key_ms"]["p99"] or 0) < spec["key_p99_ms"]
            steps.append(step)
            if not caught_up:
                # The pipeline fell behind: higher rates cannot do better.
                await until(lambda: state.lines_received >= total, 60, "the backlog to drain", 0.05)
                break
    kept = [s["rate"] for s in steps if s["kept_up"]]
    return {"steps": steps, "max_rate_kept_up": max(kept) if kept else 0}


async def idle(spec: dict) -> dict:
    """The console's CPU and the remote side's while watching the demo run at 1 Hz.

    `variant` splits the console's cost: "console" (app + monitor), "monitor_only" (the
    sources into a RunState, no app), "app_only" (the app over a RunState that stopped changing).
    """
    config = config_from_spec(spec["config"])
    state = RunState()
    variant = spec.get("variant", "console")
    if variant == "monitor_only":
        monitor = Monitor(config, make_target(config.target), state)
        await monitor.start()
        try:
            await ready(state)
            return await _idle_window(spec, state)
        finally:
            await monitor.stop()
    app = monitored_app(config, state)
    async with app.run_test(size=SIZE):
        await ready(state)
        if variant == "app_only":
            await app.monitor.stop()
        ages = watch_sample_age(app, state)
        out = await _idle_window(spec, state)
        out["screen_age_ms"] = summary(ages)
        return out


async def _idle_window(spec: dict, state: RunState) -> dict:
    kinds = {"agent": "pulse-agent", "follower": "pulse-follow", "sshd": "sshd"}
    await asyncio.sleep(spec["warmup_s"])
    remote_before, console_before, started = procs.tree_cpu(spec["sshd_pid"], kinds), procs.self_cpu_s(), time.monotonic()
    samples_before = state.samples_received
    await asyncio.sleep(spec["seconds"])
    elapsed = time.monotonic() - started
    console = procs.self_cpu_s() - console_before
    remote = procs.cpu_delta(remote_before, procs.tree_cpu(spec["sshd_pid"], kinds))
    samples = state.samples_received - samples_before

    def pct(seconds: float) -> float:
        return round(seconds / elapsed * 100, 3)

    return {
        "seconds": round(elapsed, 1),
        "samples": samples,
        "gpus": len(state.latest.gpus) if state.latest else 0,
        "console_cpu_pct": pct(console),
        "remote_cpu_pct": pct(remote["total"]),
        "remote_cpu_pct_by_process": {key: pct(value) for key, value in remote.items() if key != "total"},
        "console_rss_mib": round(procs.rss_mib(), 1),
    }


async def memory(spec: dict) -> dict:
    """Heap and RSS of the real console (the Monitor over SSH into RunState and the app) for a fixed
    wall-clock time: a flood of lines through the follower first, then the run watched at 1 Hz."""
    config = config_from_spec(spec["config"])
    state = RunState()
    app = monitored_app(config, state)
    out: dict = {"lines": 0, "seconds": spec["seconds"]}
    async with app.run_test(size=SIZE):
        await ready(state)
        gc.collect()
        out["rss_start_mib"], out["heap_start_mib"] = round(procs.rss_mib(), 1), round(procs.heap_mib(), 2)
        started = time.monotonic()
        out["lines"] = await writer(spec["writer"])
        await until(lambda: state.lines_received >= out["lines"], 120, "the flood's last line", 0.05)
        out["ingest_s"] = round(time.monotonic() - started, 2)
        gc.collect()
        out["rss_after_lines_mib"] = round(procs.rss_mib(), 1)
        # A reading a second, after a full collection (garbage waiting for one is not held: it
        # wandered by ~0.5 MiB), into columns allocated up front (readings kept as they come
        # grew this process's heap by ~0.6 MiB/h themselves).
        count = max(int(spec["seconds"]), 2)
        at, rss, heap, blocks = (array("d", bytes(8 * count)) for _ in range(4))
        watched = time.monotonic()
        for index in range(count):
            await asyncio.sleep(1.0)
            gc.collect()
            at[index], rss[index], heap[index] = time.monotonic() - watched, procs.rss_mib(), procs.heap_mib()
            blocks[index] = sys.getallocatedblocks()
    out["rss_end_mib"], out["watched_s"] = round(rss[-1], 1), round(at[-1])
    # Growth over the second half of the window, per hour: the first minutes fill bounded caches
    # (Rich's 4,096 cell widths, the last minute of samples: ~0.5 MiB). RSS counts the pages the
    # process has touched: it rises in steps past its high-water mark and rarely falls, so over
    # minutes one step reads as MiB an hour, and after a flood it stays put while the heap grows
    # into the pages the flood touched. It is given, from its two ends, but the goal is judged on
    # the heap (what the console holds: Python's objects and malloc's chunks in use), which moves
    # by the byte: its least-squares slope.
    half = count // 2
    span_h = (at[-1] - at[half]) / 3600
    out["rss_growth_mib_per_hour"] = round((rss[-1] - rss[half]) / span_h, 2)
    out["heap_growth_mib_per_hour"] = round(slope(list(zip(at[half:], heap[half:]))) * 3600, 2)
    out["heap_late_mib"] = [round(heap[half], 2), round(heap[-1], 2)]
    out["heap_blocks_late"] = [int(blocks[half]), int(blocks[-1])]
    out["heap_mib_each_minute"] = [round(value, 2) for value in heap[::60]]
    out["rss_mib_each_minute"] = [round(value, 1) for value in rss[::60]]
    out["samples"] = state.samples_received
    return out


async def diagnosis(spec: dict) -> dict:
    """Key `d` → the verdict on screen, on a really hung process (py-spy dump included)."""
    config = config_from_spec(spec["config"])
    state = RunState()
    app = monitored_app(config, state)
    times, verdicts, stacks = [], [], []
    async with app.run_test(size=SIZE) as pilot:
        await ready(state)
        await until(lambda: bool(state.latest.processes), READY_TIMEOUT_S, "the hung process in a sample")
        await asyncio.sleep(spec["silent_s"])
        for _ in range(spec["repeats"]):
            app.verdict = None
            pressed = time.perf_counter()
            app.post_message(events.Key("d", "d"))
            await until(lambda: isinstance(app.screen, DiagnosisScreen), 30, "the diagnosis screen")
            times.append((time.perf_counter() - pressed) * 1000)
            verdicts.append(app.verdict.name if app.verdict else None)
            stacks.append(len(getattr(app.screen, "evidence", None).stacks) if getattr(app.screen, "evidence", None) else 0)
            app.post_message(events.Key("escape", None))
            await until(lambda: not isinstance(app.screen, DiagnosisScreen), 10, "the diagnosis screen to close")
            await pilot.pause()
    return {"key_to_verdict_ms": summary(times), "verdicts": verdicts, "stack_groups": stacks}


async def silence(spec: dict) -> dict:
    """A run that wrote once a second stops (idle): seconds from its last write until the header says
    quiet, and until it leaves healthy, in the console as it runs (its 5 s re-judging included)."""
    config = config_from_spec(spec["config"])
    log = Path(config.run.log)
    state = RunState()
    app = monitored_app(config, state)
    seen: list[tuple[float, str, str]] = []
    async with app.run_test(size=SIZE):
        await ready(state)
        await until(lambda: f"step {spec['steps']} " in log.read_text(), 60, "the run's last line", step_s=0.05)
        last_write = log.stat().st_mtime
        while app.verdict is None or app.verdict.name == "healthy":
            if time.time() - last_write > 120:
                raise RuntimeError("the header still says healthy 120 s after the last write")
            if app.verdict is not None and (not seen or seen[-1][2] != app.verdict.summary):
                seen.append((round(time.time() - last_write, 1), app.verdict.name, app.verdict.summary))
            await asyncio.sleep(0.05)
        left = round(time.time() - last_write, 1)
    quiet = next((at for at, _, summary in seen if "quiet" in summary), None)
    return {
        "header_quiet_after_s": quiet,
        "header_left_healthy_after_s": left,
        "verdict": app.verdict.name,
        "summary": app.verdict.summary,
    }


async def console_in_terminal(spec: dict) -> dict:
    """The real console with its terminal driver (console/ui/render/input_driver.py: Textual's, its input
    thread made quieter) on this process's terminal (the parent's pseudo-terminal), until `q`:
    what the parent types reaches it as keys do."""
    config = config_from_spec(spec["config"])
    state = RunState()
    await monitored_app(config, state).run_async()
    return {"lines_received": state.lines_received}


PHASES = {
    "tail": tail,
    "flood": flood,
    "idle": idle,
    "memory": memory,
    "diagnosis": diagnosis,
    "silence": silence,
    "terminal": console_in_terminal,
}


def run_child(phase: str, spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    result = asyncio.run(PHASES[phase](spec))
    Path(result_path).write_text(json.dumps(result))
    return 0
