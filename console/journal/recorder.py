"""From a RunState to journal rows, once a second; and back, when a console opens again.

`JournalRecorder.observe()` takes what is new in the state since its last call (problems,
throughput and loss values, log events, the connection, GPU memory) and queues it
in the journal; `verdict()` queues a verdict change. It reads the state only: it runs on
the event loop next to the panes and never waits for the disk (the journal's thread does).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from console.diagnose import Verdict
from console.journal.store import Journal
from console.model import ConnectionStatus, Event, LineKind, LogLine, Sample
from console.observe.problems import GRAVITY
from console.state import RATE_METRICS, Point, RunState
from console.units import format_gib

#: A GPU's memory is journaled again when it passes its high-water mark by this much.
HIGH_WATER_STEP_MIB = 1024
#: How many evidence lines a verdict entry keeps.
EVIDENCE_LINES = 5
#: How much of a problem line is kept.
PROBLEM_TEXT_CHARS = 300
#: Series a journal keeps per minute.
METRICS = (*RATE_METRICS, "loss")
#: Each GPU's history per minute, as `gpu{index}.{figure}` series: (figure, its heading in `pulse report`,
#: how a reading gives it). The SM clock only where the source reads it (GpuReading.sm_clock_mhz).
GPU_FIGURES = (
    ("util_pct", "busy %", lambda gpu: gpu.utilization_pct),
    ("memory_pct", "memory %", lambda gpu: gpu.memory_pct),
    ("power_w", "power W", lambda gpu: gpu.power_w),
    ("sm_clock_mhz", "SM MHz", lambda gpu: gpu.sm_clock_mhz),
)


def gpu_metric(index: int, figure: str) -> str:
    return f"gpu{index}.{figure}"


#: A journal written before verdicts named their step kept the console key of it; the keys of that format.
KEY_STEPS = {"p": "dump", "R": "restart", "l": "log", "w": "warmup"}


def verdict_data(verdict: Verdict) -> dict:
    """A Verdict as a journal entry's data (and an alert's fields)."""
    return {
        "verdict": verdict.name,
        "summary": verdict.summary,
        "evidence": list(verdict.evidence[:EVIDENCE_LINES]),
        "next_step": verdict.next_step,
        "step": verdict.step,
    }


def verdict_of(data: dict) -> Verdict:
    """The Verdict a journal entry's data holds (`verdict_data`'s inverse), from either format."""
    step = data.get("step", KEY_STEPS.get(data.get("key", "")))
    return Verdict(data["verdict"], data["summary"], list(data["evidence"]), data["next_step"], step)


class VerdictRecorder:
    """Journals the changes of one verdict (a run's, or a Slurm job's: its nodes' worst)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.verdict_name: str | None = None

    def verdict(self, verdict: Verdict) -> None:
        """Queue `verdict` when its name differs from the last one journaled."""
        if verdict.name == self.verdict_name:
            return
        previous, self.verdict_name = self.verdict_name, verdict.name
        self.journal.add("verdict", f"{verdict.name}: {verdict.summary}", {**verdict_data(verdict), "previous": previous})


class JournalRecorder(VerdictRecorder):
    """Journals one RunState's news; `observe()` once a second, `verdict()` on each diagnosis."""

    def __init__(self, journal: Journal, state: RunState, *, wall: Callable[[], float] = time.time) -> None:
        super().__init__(journal)
        self.state = state
        self.wall = wall
        self._last_event: Event | None = state.events[-1] if state.events else None
        self._lines_before = state.lines_received
        """Lines held before this recorder began: their problems are not news."""
        self._said: dict[int, LineKind] = {}
        """The kind journaled for each problem held, by its first line's number."""
        self._taken_until = {name: (points[-1].time if points else float("-inf")) for name, points in state.series.items()}
        self._connection = state.connection.status
        self._lost_at: float | None = None
        self._high_water: dict[int, int] = {}
        self._gpus_taken: Sample | None = None
        for entry in journal.entries(kinds=("gpu_memory",)):
            self._high_water[entry.data["gpu"]] = max(self._high_water.get(entry.data["gpu"], 0), entry.data["used_mib"])

    def to_wall(self, monotonic: float) -> float:
        """A state time (the state's monotonic clock) as Unix time."""
        return self.wall() - (self.state.clock() - monotonic)

    def held_points(self) -> dict[str, tuple[tuple[float, float], ...]]:
        """The journaled series as the state holds them, each point at its Unix time: finer than the
        journal's minutes (read on the event loop: the follower appends to them there)."""
        return {name: tuple((self.to_wall(p.time), p.value) for p in self.state.series[name]) for name in METRICS}

    def observe(self) -> None:
        """Queue what changed in the state since the last call."""
        self._log_events()
        self._problems()
        self._series()
        self._connection_changes()
        self._gpu_memory()
        self._gpu_history()

    def _log_events(self) -> None:
        fresh: list[Event] = []
        for event in reversed(self.state.events):
            if event is self._last_event:
                break
            fresh.append(event)
        if self.state.events:
            self._last_event = self.state.events[-1]
        for event in reversed(fresh):
            # The follower's news: a new, replaced or truncated log is how a relaunch shows from outside.
            if event.kind == "log" and event.data.get("ev") != "idle":
                self.journal.add("log", event.text, {k: v for k, v in event.data.items() if k != "ev"}, at=self.to_wall(event.time))

    def _problems(self) -> None:
        """Each problem once, by its first line as it arrives; again, by the line that names it, when a
        later line made it graver (a traceback's first line names nothing, its `…OutOfMemoryError` says OOM)."""
        said: dict[int, LineKind] = {}
        for problem in self.state.spans.problems:
            if problem.first <= self._lines_before:
                continue
            before = self._said.get(problem.first)
            if before is None:
                before = problem.head.info.kind
                self._journal_problem(before, problem.head)
            said[problem.first] = before
            if GRAVITY[problem.kind] < GRAVITY[before]:
                said[problem.first] = problem.kind
                self._journal_problem(problem.kind, problem.name)
        self._said = said  # only the problems still held: bounded as the spans are

    def _journal_problem(self, kind: LineKind, line: LogLine) -> None:
        self.journal.add(
            "problem",
            line.text[:PROBLEM_TEXT_CHARS],
            # Line numbers count this console's lines: `console` says whose they are.
            {"problem": kind.value, "line": line.number, "log": self.state.log_path, "console": self.journal.holder},
            at=self.to_wall(line.time),
        )

    def _series(self) -> None:
        for name in METRICS:
            points = self.state.series[name]
            since = self._taken_until[name]
            if not points or points[-1].time <= since:
                continue
            fresh: list[Point] = []
            for point in reversed(points):
                if point.time <= since:
                    break
                fresh.append(point)
            self._taken_until[name] = points[-1].time
            self.journal.add_values(name, ((self.to_wall(p.time), p.value) for p in fresh))

    def _connection_changes(self) -> None:
        connection = self.state.connection
        was, now = self._connection, connection.status
        if now is was:
            return
        self._connection = now
        if now is ConnectionStatus.CONNECTED:
            if self._lost_at is None:
                self.journal.add("connection", "connected", {"status": now.value})
            else:
                gap = round(self.wall() - self._lost_at, 1)
                self._lost_at = None
                self.journal.add("connection", f"reconnected after a {gap:g} s gap", {"status": now.value, "gap_s": gap})
        elif was is ConnectionStatus.CONNECTED:
            self._lost_at = self.wall()
            detail = connection.detail or now.value
            self.journal.add("connection", f"connection lost: {detail}", {"status": now.value, "detail": connection.detail})

    def _gpu_memory(self) -> None:
        sample = self.state.latest
        if sample is None:
            return
        for gpu in sample.gpus:
            used = gpu.memory_used_mib
            if used is None:
                continue
            high = self._high_water.get(gpu.index)
            if high is not None and used < high + HIGH_WATER_STEP_MIB:
                continue
            self._high_water[gpu.index] = used
            of = f" of {format_gib(gpu.memory_total_mib)}" if gpu.memory_total_mib else ""
            self.journal.add(
                "gpu_memory",
                f"GPU {gpu.index} memory high-water {format_gib(used)}{of}",
                {"gpu": gpu.index, "used_mib": used, "total_mib": gpu.memory_total_mib},
            )


    def _gpu_history(self) -> None:
        """Each new sample's GPU figures into their per-minute series (the journal's minutes table)."""
        sample = self.state.latest
        if sample is None or sample is self._gpus_taken:
            return
        self._gpus_taken = sample
        at = self.wall()  # the sample just arrived (its own time is the target's clock)
        for gpu in sample.gpus:
            for figure, _, read in GPU_FIGURES:
                value = read(gpu)
                if value is not None:
                    self.journal.add_values(gpu_metric(gpu.index, figure), ((at, float(value)),))


def restore(state: RunState, journal: Journal, *, since_s: float, wall: Callable[[], float] = time.time) -> Verdict | None:
    """Fill a new console's state from the journal: the series' per-minute medians and the
    verdict changes of the last `since_s` (as events). Returns the last journaled verdict, or None."""
    now_wall, now = wall(), state.clock()
    since = now_wall - since_s
    for minute in journal.minutes(since):
        if minute.metric in state.series:
            middle = min(minute.minute * 60 + 30, now_wall)  # the open minute's middle may be ahead
            state.series[minute.metric].append(Point(now - (now_wall - middle), minute.median))
    last = None
    for entry in journal.entries(since, kinds=("verdict",)):
        state.events.append(Event(now - (now_wall - entry.time), "verdict", entry.text, {"from_journal": True}))
        last = entry.data
    return verdict_of(last) if last is not None else None
