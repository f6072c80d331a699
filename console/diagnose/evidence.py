"""What one look at the run saw, and the verdict it earns: the diagnosis's data, no logic. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from console.model import GpuReading, LineKind, ProcessReading
from console.observe.nccl import FlightRecord, NcclFact
from console.observe.progress import TerminalOnlyProgress
from console.sent import SentSignal

if TYPE_CHECKING:  # console.slowness (and py-spy's parsing under it) loads with the first diagnosis, not for the first frame
    from console.slowness import Baseline, Slowdown, SlowLook


@dataclass(frozen=True, slots=True)
class ProblemLine:
    """A problem seen since the last launch (console/observe/problems.py), by the line that names it."""

    kind: LineKind
    """The gravest kind among the problem's lines."""
    text: str
    """The line that names it: a traceback's exception line, never "Traceback (most recent call last):"."""
    age_s: float | None = None
    """Seconds since that line arrived; None when unknown (a tail read has no times)."""
    thread: str | None = None
    """The thread whose uncaught exception this is, when it is one."""
    progress_after: bool = False
    """The log reported progress (steps, rates, losses) after the problem's last line."""
    family: str | None = None
    """The family of problems its framework handles itself (console.observe.recovered), if one."""


@dataclass(frozen=True, slots=True)
class RecoveredFamily:
    """How often a family of self-handled problems occurred since the launch: '23 autotune configs skipped'."""

    text: str
    """'23 autotune configs skipped: out of shared memory'."""
    family: str


@dataclass(frozen=True, slots=True)
class DeadThread:
    """A thread whose uncaught exception reached the log ("Exception in thread NAME:" and its traceback)."""

    name: str
    exception: str
    """The traceback's last line, e.g. 'torch.OutOfMemoryError: CUDA out of memory. …'."""
    age_s: float | None = None
    progress_after: bool = False
    """The log went on reporting progress (steps, rates, losses) after the thread died."""


@dataclass(frozen=True, slots=True)
class StackSummary:
    """One thread of a py-spy dump, summarised: what it waits on and where in user code."""

    pid: int
    tid: int
    name: str
    idle: bool
    wait: str | None
    """What the thread waits on (e.g. 'queue', 'lock', 'sleep'), None when running."""
    where: str
    """The innermost frame worth reading, e.g. 'Queue.get (queue.py:171) ← pack_hidden (hung.py:9)'."""
    count: int = 1
    """Identical threads folded into this one (DataLoader workers)."""
    main: bool = False
    """The process's main thread (MainThread, else its first thread)."""
    signature: tuple = ()
    """Every frame's (function, file, line): equal signatures are the same stack."""
    collective: str | None = None
    """The collective it is in (all_reduce, barrier, ...) or 'synchronize'; None when in none."""
    label: str = ""
    """The process's place in the run, as console.observe.roles labels it."""
    role: str = ""
    rank: int | None = None
    parent: int | None = None
    """The process's parent PID (a worker's rank)."""
    cpu_pct: float | None = None
    """The process's CPU% over the sampling window."""
    motion: str | None = None
    """How the thread moved while it was recorded (console.observe.pyspy.MOTIONS): moving, paced, busy,
    waiting or still; None when it was not recorded."""
    run_env: tuple[tuple[str, str], ...] = ()
    """The process's RANK, WORLD_SIZE, MASTER_ADDR, ... (a rank waiting at start-up is named by them)."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one look at the run saw. Times are seconds; 'now' is the target's clock."""

    window_s: float
    processes: tuple[ProcessReading, ...] = ()
    """The run's processes at the end of the window; cpu_pct (and each thread's) is the delta over it."""
    process_error: str | None = None
    gpus: tuple[GpuReading, ...] = ()
    """The run's GPUs (all GPUs when the config names none)."""
    gpu_source: str = "none"
    gpu_error: str | None = None
    in_pid_namespace: bool = False
    gpu_contexts_unseen: bool = False
    """Seen from a PID namespace, the GPUs hold memory and none of it is under a PID of the run."""
    log_path: str | None = None
    log_exists: bool = False
    log_kind: str = "file"
    """What the log's path is (model.file_kind): a device or a FIFO has no size or age to judge by."""
    log_size: int = 0
    log_growth: int = 0
    """Bytes the log grew during the window."""
    log_silent_s: float | None = None
    """Seconds since the log last grew (now − its mtime)."""
    log_warnings_only_s: float | None = None
    """Seconds the log has written only warnings and problems since it last wrote progress, when the
    lines' times are known (a follower): a block-buffered stdout's stderr still reaches the log."""
    log_written_since_launch: bool | None = None
    """None when no launch is known."""
    rate_metric: str | None = None
    rate_now: float | None = None
    rate_baseline: float | None = None
    rate_values: tuple[float, ...] = ()
    """Every rate value the log gave that the look holds, oldest first: the run's own history."""
    rate_history: Baseline | None = None
    """The run's best sustained rate learned from its journal, when the caller read one."""
    slow_look: SlowLook | None = None
    """A slow run's stacks, /proc and NVML over a few seconds (console.slow_look), once it was taken."""
    rate_silent_s: float | None = None
    """Seconds since the last throughput line, when one was seen."""
    rate_interval_s: float | None = None
    """The run's usual gap between throughput lines (None until learned)."""
    log_write_interval_s: float | None = None
    """The run's usual gap between writes to its log (None until learned)."""
    log_rhythm_estimated: bool = False
    """log_write_interval_s was estimated from one look at the log (its size over the run's writing time), not learned."""
    problems: tuple[ProblemLine, ...] = ()
    """Problem lines since the last launch, oldest first."""
    families: tuple[RecoveredFamily, ...] = ()
    """The self-handled problem families seen since the last launch, each counted."""
    dead_threads: tuple[DeadThread, ...] = ()
    """Threads that died of an uncaught exception, as the log tells."""
    nccl: tuple[NcclFact, ...] = ()
    """What the log's NCCL watchdog and flight-recorder lines say."""
    flight: tuple[FlightRecord, ...] = ()
    """The ranks' flight-recorder dumps, when the run wrote them."""
    stacks: tuple[StackSummary, ...] = ()
    """Each dumped thread (identical ones folded), with how it moved while recorded."""
    stack_error: str | None = None
    """Why no stacks were dumped when a dump was tried (with its advice)."""
    stacks_missing: tuple[str, ...] = ()
    """Ranks or main processes that could not be dumped while others were, each with why."""
    launched_at: float | None = None
    """When the console last launched the run (target clock), None when it did not."""
    terminal_only_progress: TerminalOnlyProgress | None = None
    """The log showed a framework starting whose progress draws only on a terminal, and no progress since."""
    signals: tuple[SentSignal, ...] = ()
    """For each stopped process (state T), the last signal Pulse sent it since it started, as audited."""


    @property
    def progress_silent_s(self) -> float | None:
        """Seconds since the log last showed progress: its silence, or longer while it writes only warnings."""
        if self.log_warnings_only_s is None:
            return self.log_silent_s
        return max(self.log_silent_s or 0.0, self.log_warnings_only_s)

    @property
    def progress_grew(self) -> bool:
        """The log grew during the window with more than warnings."""
        return self.log_growth > 0 and self.log_warnings_only_s is None


@dataclass(frozen=True)
class Verdict:
    """A diagnosis: its name, one-line summary, the observations behind it and what to do."""

    name: str
    summary: str
    evidence: list[str]
    next_step: str
    step: str | None = None
    """The action that takes the next step, one of NEXT_STEPS (the console binds each to a key; `next_step` names none)."""
    slowdown: Slowdown | None = None
    """A slow verdict's slowdown: the rate, the baseline it is below, for how many values (the throughput graph marks it)."""
