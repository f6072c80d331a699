"""RunState: the one truth the panes render and the diagnosis reads.

Bounded ring buffers only, so a console left open for days holds constant memory.
Sources write into it from the event loop; readers never block.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from console.model import (
    PROBLEM_KINDS,
    ConnectionState,
    ConnectionStatus,
    Event,
    GpuReading,
    LineInfo,
    LineKind,
    LogLine,
    ProgressLine,
    Sample,
)
from console.observe.problems import ProblemSpans
from console.observe.progress import TerminalOnlyProgress, terminal_only_progress
from console.observe.textsafe import sanitize

#: Other series a log can give, shown beside the rate.
TRAINING_METRICS = ("loss", "lr", "grad_norm", "mfu")
#: A bar redraws up to ten times a second: its figures join the series at most this often.
PROGRESS_POINT_S = 1.0
#: Metrics a log can give for throughput, best first: the console shows the first one seen.
RATE_METRICS = ("tokens_per_s", "samples_per_s", "it_per_s")
RATE_UNITS = {"tokens_per_s": "tok/s", "samples_per_s": "samples/s", "it_per_s": "it/s"}
#: Writes (and progress updates) whose gaps make the log's rhythm: the newest this many.
RHYTHM_WRITES = 100
#: Lines arriving closer together than this are one write (one flush of the run, one read of the follower).
SAME_WRITE_S = 0.02
#: A rhythm needs at least this many gaps between writes; fewer say nothing about the run.
RHYTHM_MIN_GAPS = 5
#: How far back the samples are held (the target's clock): the verdicts compare the newest with
#: one ~10 s older (journal/watch.py, fleet/fleet.py), and the run's history is in its journal.
#: An hour of them at 1 Hz held ~25 MB that nothing read.
SAMPLE_WINDOW_S = 60.0
#: The GPUs' readings held for the GPU pane's graphs: ten minutes at 1 Hz (~2 MB for 8 GPUs). Only the
#: GPU readings, not the samples' processes and threads, which are what made an hour of samples heavy.
GPU_HISTORY_POINTS = 600


@dataclass(frozen=True, slots=True)
class Point:
    """A value from the log and the local time its line was written (LogLine.time)."""

    time: float
    value: float


class RunState:
    """Bounded history of one run on one target."""

    def __init__(
        self,
        *,
        max_samples: int = 600,
        max_lines: int = 10_000,
        max_points: int = 3600,
        max_events: int = 1000,
        max_problems: int = 500,
        max_gpu_readings: int = GPU_HISTORY_POINTS,
        clock=time.monotonic,
    ) -> None:
        self.clock = clock
        self.samples: deque[Sample] = deque(maxlen=max_samples)
        """The samples of the last SAMPLE_WINDOW_S (two at least), at most `max_samples`."""
        self.samples_received = 0
        self.gpu_history: deque[tuple[float, tuple[GpuReading, ...]]] = deque(maxlen=max_gpu_readings)
        """(target time, GPU readings) of each sample that read the GPUs, oldest first: the GPU pane's graphs."""
        self.lines: deque[LogLine] = deque(maxlen=max_lines)
        self.problems: deque[LogLine] = deque(maxlen=max_problems)
        self.spans = ProblemSpans(max_problems)
        """The problems the problem lines make (a traceback is one), each named by its last line."""
        self.events: deque[Event] = deque(maxlen=max_events)
        self.series: dict[str, deque[Point]] = {
            name: deque(maxlen=max_points) for name in (*RATE_METRICS, *TRAINING_METRICS)
        }
        self.step: int | None = None
        self.total_steps: int | None = None
        self.lines_received = 0
        self.log_first_line = 1
        """Number of the current log's first line: lines before it are an earlier launch's."""
        self.last_line_at: float | None = None
        self.first_line_at: float | None = None
        self.last_progress_at: float | None = None
        """When the log last wrote progress: a line that is no warning and no problem, or a bar's redraw.
        A run whose stdout is block-buffered may still write its stderr's warnings: those show no progress."""
        self.nonfinite_loss: float | None = None
        """The loss as the latest line with a loss wrote it, when that was nan or inf."""
        self.last_rate_at: float | None = None
        self.write_times: deque[float] = deque(maxlen=RHYTHM_WRITES + 1)
        """Arrival times of the log's writes (lines arriving together are one): its rhythm."""
        self.log_mtimes: deque[float] = deque(maxlen=RHYTHM_WRITES + 1)
        """The log's mtime (target clock) each time a sample saw it change: writes that are not
        lines (a progress bar redrawn with \\r) still count, at the samples' resolution."""
        self.last_sample_at: float | None = None
        self.connection = ConnectionState(ConnectionStatus.CONNECTING)
        self.agent_lost: str | None = None
        """Why the sampling agent ended, until its next sample: what is held is no longer live."""
        self.log_path: str | None = None
        # Lines, and last_rate_at, are dated by when they were written: a backlog's rates are history.
        self.progress: ProgressLine | None = None
        """The progress bar's current redraw (the log's unfinished last line), if one is drawing."""
        self.terminal_only_progress: TerminalOnlyProgress | None = None
        """Set when the log shows a framework starting whose progress display draws only on a
        terminal (so a silent log is not a stall by itself); cleared once progress reaches the log."""
        self._progress_point_at: float | None = None
        self.disabled_patterns: list[str] = []
        """A notice for each config pattern the follower disabled (past its time budget), oldest first."""
        self.read_bytes = 0
        self.read_writes = 0
        """Bytes of the current log the follower read, and the writes (line ends, redraws) they hold: the
        log's density of writes, for a rhythm estimated before one is learned (console.stall)."""

    # -- writers -------------------------------------------------------------

    def note_read(self, nbytes: int, writes: int) -> None:
        """The follower read `nbytes` of the log holding `writes` writes."""
        self.read_bytes += nbytes
        self.read_writes += writes

    def add_sample(self, sample: Sample) -> None:
        samples = self.samples
        samples.append(sample)
        while len(samples) > 2 and sample.time - samples[0].time > SAMPLE_WINDOW_S:
            samples.popleft()
        self.samples_received += 1
        if sample.gpus:
            self.gpu_history.append((sample.time, sample.gpus))
        self.last_sample_at = self.clock()
        self.agent_lost = None
        log = sample.log
        if log is not None and log.exists and (not self.log_mtimes or log.mtime > self.log_mtimes[-1]):
            self.log_mtimes.append(log.mtime)

    def add_lines(self, lines: Iterable[LogLine]) -> None:
        for line in lines:
            self.lines.append(line)
            self.lines_received = max(self.lines_received, line.number)
            info = line.info
            if info.kind in PROBLEM_KINDS:
                self.problems.append(line)
                self.spans.add(line)
            elif self.spans.open:  # a traceback's frames are lines of no problem kind
                self.spans.add(line)
            if self.step is None and self.progress is None and self.terminal_only_progress is None:
                self._look_for_terminal_only_progress(line.text)
            self._add_series(info, line.time)
            if info.step is not None:
                self.step = info.step
            if info.total_steps is not None:
                self.total_steps = info.total_steps
            self.last_line_at = line.time
            if self.first_line_at is None:
                self.first_line_at = line.time
            if info.kind is LineKind.NORMAL and not info.continues:
                self.last_progress_at = line.time
            self._note_write(line.time)

    def _note_write(self, written: float) -> None:
        """One more write for the log's rhythm (lines or redraws arriving together are one)."""
        if not self.write_times or written - self.write_times[-1] > SAME_WRITE_S:
            self.write_times.append(written)

    def _look_for_terminal_only_progress(self, text: str) -> None:
        """Until progress first shows, a start-up banner may name a progress display the log never sees."""
        hidden = self.terminal_only_progress = terminal_only_progress(text)
        if hidden is not None:
            self.add_event("log", f"no progress will reach the log: {hidden.framework}: {hidden.advice}")

    def _add_series(self, info: LineInfo, written: float) -> None:
        for name in RATE_METRICS:
            value = getattr(info, name)
            if value is not None:
                self.series[name].append(Point(written, value))
                self.last_rate_at = written
        for name in TRAINING_METRICS:
            value = getattr(info, name)
            if value is not None:
                self.series[name].append(Point(written, value))
        if info.loss is not None or info.nonfinite_loss is not None:
            self.nonfinite_loss = info.nonfinite_loss
        if info.step is not None:
            self.terminal_only_progress = None  # progress reaches the log after all

    def set_progress(self, progress: ProgressLine | None) -> None:
        """The bar's latest redraw (None: its line was finished); its figures join the series
        at most every PROGRESS_POINT_S of write time, its step at once."""
        self.progress = progress
        if progress is None:
            return
        self._note_write(progress.time)  # a bar's redraw is a write of the log, though no line
        self.last_progress_at = progress.time
        self.terminal_only_progress = None
        if self._progress_point_at is None or abs(progress.time - self._progress_point_at) >= PROGRESS_POINT_S:
            self._progress_point_at = progress.time
            self._add_series(progress.info, progress.time)
        if progress.info.step is not None:
            self.step = progress.info.step
        if progress.info.total_steps is not None:
            self.total_steps = progress.info.total_steps

    def set_connection(self, state: ConnectionState) -> None:
        if state != self.connection:
            self.connection = state
            self.add_event("connection", state.describe(self.clock()))

    def add_event(self, kind: str, text: str, **data) -> None:
        self.events.append(Event(self.clock(), kind, text, data))

    def start_new_log(self, path: str) -> None:
        """The run was relaunched onto a new log: forget the old run's problems and rates."""
        self.log_path = path
        self.problems.clear()
        self.spans.clear()
        self.progress = self.terminal_only_progress = self._progress_point_at = None
        for points in self.series.values():
            points.clear()
        self.step = self.total_steps = None
        self.last_rate_at = self.nonfinite_loss = None
        self.first_line_at = self.last_progress_at = None
        self.write_times.clear()
        self.log_mtimes.clear()
        self.read_bytes = self.read_writes = 0
        self.log_first_line = self.lines_received + 1
        self.add_event("log", f"following {sanitize(path, 300)[0]}")  # a file name from the target: untrusted

    # -- readers -------------------------------------------------------------

    def current_lines(self) -> list[LogLine]:
        """The lines held from the current log (an earlier launch's are left out)."""
        return self.lines_after(self.log_first_line - 1)

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def lines_after(self, number: int) -> list[LogLine]:
        """Lines with a number above `number`, oldest first (what a pane has not shown yet)."""
        out: list[LogLine] = []
        for line in reversed(self.lines):
            if line.number <= number:
                break
            out.append(line)
        out.reverse()
        return out

    @property
    def rate_metric(self) -> str | None:
        """The throughput metric this run's log gives, or None before the first one."""
        for name in RATE_METRICS:
            if self.series[name]:
                return name
        return None

    def values(self, name: str, since_s: float | None = None, *, newest: int | None = None) -> list[float]:
        """The series' values, oldest first: all of them, those of the last `since_s` seconds, or at
        most the `newest` ones. A window is read back from the newest point, never the whole series (a
        long run holds max_points of each), and ends at the first point older than it: points are
        appended as they arrive, so their times rise but for small steps back (a rotated file's first
        lines dated by its mtime), which can only leave out a point at the window's edge."""
        points = self.series[name]
        if since_s is None and newest is None:
            return [p.value for p in points]
        cutoff = None if since_s is None else self.clock() - since_s
        out: list[float] = []
        for point in reversed(points):
            if (newest is not None and len(out) >= newest) or (cutoff is not None and point.time < cutoff):
                break
            out.append(point.value)
        out.reverse()
        return out

    def latest_value(self, name: str) -> float | None:
        """The series' newest value (None before any)."""
        points = self.series[name]
        return points[-1].value if points else None

    def rate_interval_s(self) -> float | None:
        """The median gap between throughput lines: the run's usual progress interval (None until learned)."""
        name = self.rate_metric
        if name is None:
            return None
        newest = [p.time for p in islice(reversed(self.series[name]), RHYTHM_WRITES)]
        return usual_gap_s(newest[::-1])

    def rate_silent_s(self, now: float) -> float | None:
        """Seconds since the last throughput line was written, at `now` (this side's clock); None before one."""
        return None if self.last_rate_at is None else round(now - self.last_rate_at, 1)

    def log_silent_s(self, now: float) -> float | None:
        """Seconds since the log last grew at `now` (this side's monotonic clock): from the stat in
        the latest sample, aged by the time since it arrived; else from the last line received."""
        sample = self.latest
        if sample is not None and sample.log is not None and sample.log.exists and self.last_sample_at is not None:
            return max(0.0, sample.time - sample.log.mtime) + max(0.0, now - self.last_sample_at)
        if self.last_line_at is not None:
            return max(0.0, now - self.last_line_at)
        return None

    def warnings_only_s(self, now: float) -> float | None:
        """Seconds the log has written only warnings and problems, since its last progress (or since the
        first line read, when none was progress); None while its last line is progress, or before lines."""
        if self.last_line_at is None or (self.last_progress_at is not None and self.last_progress_at >= self.last_line_at):
            return None
        since = self.last_progress_at if self.last_progress_at is not None else self.first_line_at
        return None if since is None else round(max(0.0, now - since), 1)

    def write_interval_s(self) -> float | None:
        """How often the log usually writes (None until learned): the shorter of the median gaps
        between line arrivals and between the mtimes samples saw; each can only overstate it."""
        found = [gap for gap in (usual_gap_s(list(self.write_times)), usual_gap_s(list(self.log_mtimes))) if gap]
        return min(found, default=None)


def usual_gap_s(times: list[float]) -> float | None:
    """The median gap between successive `times`; None with fewer than RHYTHM_MIN_GAPS gaps."""
    # Closer than SAME_WRITE_S is one write: two ranks printing one step into one log are one beat, not a 0 s rhythm.
    gaps = sorted(b - a for a, b in zip(times, times[1:]) if b - a > SAME_WRITE_S)
    return gaps[len(gaps) // 2] if len(gaps) >= RHYTHM_MIN_GAPS else None
