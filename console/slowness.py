"""Why a run is slow (issue 34): its rate against its own best sustained rate, and the cause named
from outside the process, from a few seconds of stack samples, /proc and NVML.

Pure: the facts come in (console.observe.slow_facts reads them on the target), a verdict goes out.

The baseline is learned, never assumed:
- from the run's journal (the same run across launches): the median of the best hour of its
  per-minute medians (a shorter window while the history is short);
- else from its log: the median of the best run of consecutive rate values as long as half of what
  the log holds (LOG_WINDOW_VALUES at least), so that a start-up burst is not "sustained";
- a baseline set in the config wins over both.
A run is slow when its last rates are below `slow_fraction` of that baseline for a few of its own
intervals (`slowdown`).

The cause is decided by shares of samples (each rule below says its share), in this order, the first
that holds winning; every other is named as ruled out, or as unread when its facts were missing.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from console.model import ProcessReading
from console.observe.pyspy import StackFrame, ThreadSamples, ThreadStack, classify_wait, is_user_frame
from console.units import si

#: A rate below the slow fraction for this many of the run's own intervals (see slowdown) is a slowdown.
SLOW_AFTER_VALUES = 5
#: "Sustained" in a log: the median of at least this many consecutive rate values (half the log's, when more).
LOG_WINDOW_VALUES = 20
#: "Sustained" in a journal: the median of the best hour of per-minute medians.
JOURNAL_WINDOW_S = 3600.0
#: A journal window needs this many minutes with a rate; a log this many values beside the current ones.
MIN_JOURNAL_MINUTES = 10
MIN_LOG_VALUES = 2 * LOG_WINDOW_VALUES
#: A window's median is read from at most about this many of its values (evenly spread).
MEDIAN_OF = 200

#: Shares of a thread's samples that decide a cause.
INPUT_WAIT_SHARE = 0.4
COLLECTIVE_WAIT_SHARE = 0.4
STRAGGLER_GAP = 0.3
COMPILE_SHARE = 0.25
#: A process not of the run taking this share of a run GPU's SM is a neighbour.
NEIGHBOUR_SM_PCT = 15.0
#: The run's threads waiting to run for this share of the window (schedstat run delay): starved.
RUN_DELAY_SHARE = 0.25
#: Recompile lines in the log since the slowdown began that make it "recompiling".
RECOMPILE_LINES = 3
#: Memory pressure: pages swapped in, or the run's major faults, a second; host memory available below this share.
SWAP_IN_PER_S = 50.0
MAJOR_FAULTS_PER_S = 100.0
MEM_AVAILABLE_SHARE = 0.05

#: NVML clock-throttle reasons (nvmlClocksEventReason*) that hold a GPU back, by bit.
THROTTLE_REASONS = {
    0x4: "power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
#: A power cap alone holds a GPU back only when its SM clock is below this share of its maximum.
CAPPED_CLOCK_SHARE = 0.9

_DATA_FILES = ("dataloader.py", "data_loader", "/data/", "datapipes", "fetch.py")
_COMPILE_MARKS = ("torch/_dynamo/", "torch/_inductor/", "convert_frame.py", "compile_fx", "triton/compiler")


# -- the baseline ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Baseline:
    """The rate the run is measured against, and where it comes from."""

    rate: float
    source: str
    """config, journal or log."""
    start: float | None = None
    """Unix seconds: the journal window's first and last minute (None for the config or a log)."""
    end: float | None = None
    values: int = 0
    """How many rate values (log) or minutes (journal) it is the median of."""

    def where(self, now: float) -> str:
        """Against what, in words: `yesterday 14:00–18:00`, `its log's best 20 values`, `the config`."""
        if self.source == "config":
            return "set in the config"
        if self.source == "log" or self.start is None or self.end is None:
            return f"its log's best {self.values} values"
        return clock_span(self.start, self.end, now)


def clock_span(start: float, end: float, now: float) -> str:
    """`today 14:00–15:00`, `yesterday 14:00–18:00`, `2026-11-28 14:00–15:00` (local time)."""
    first, last = datetime.datetime.fromtimestamp(start), datetime.datetime.fromtimestamp(end)
    days = (datetime.datetime.fromtimestamp(now).date() - first.date()).days
    day = "today" if days == 0 else "yesterday" if days == 1 else first.date().isoformat()
    return f"{day} {first:%H:%M}–{last:%H:%M}"


def best_sustained(values: Sequence[float], window: int) -> tuple[float, int] | None:
    """The highest median of `window` consecutive values, and where that window starts. Windows a
    twentieth of `window` apart, each's median read from at most MEDIAN_OF values spread evenly over
    it: a long log costs a few dozen short medians (the cheap diagnosis runs this every few seconds)."""
    if window < 1 or len(values) < window:
        return None
    step, stride = max(1, window // 20), max(1, window // MEDIAN_OF)
    starts = range(0, len(values) - window + 1, step)
    return max((statistics.median(values[i : i + window : stride]), i) for i in starts)


def from_log(values: Sequence[float]) -> Baseline | None:
    """The log's best sustained rate, once it holds MIN_LOG_VALUES rate values (else no history yet)."""
    if len(values) < MIN_LOG_VALUES:
        return None
    window = max(LOG_WINDOW_VALUES, len(values) // 2)
    best = best_sustained(values, window)
    return None if best is None else Baseline(best[0], "log", values=window)


def from_journal(minutes: Sequence[tuple[float, float]]) -> Baseline | None:
    """The best hour of (unix minute start, median rate) rows: the median of the minutes in the one-hour
    window whose median is highest; while the history is shorter than two hours, a quarter of it."""
    rows = sorted(minutes)
    if len(rows) < MIN_JOURNAL_MINUTES:
        return None
    span = rows[-1][0] - rows[0][0] + 60
    width = JOURNAL_WINDOW_S if span >= 2 * JOURNAL_WINDOW_S else max(span / 4, 5 * 60)
    best: tuple[float, int, int] | None = None
    last = 0
    for first in range(len(rows)):
        last = max(last, first)
        while last + 1 < len(rows) and rows[last + 1][0] < rows[first][0] + width:
            last += 1
        window = [rate for _, rate in rows[first : last + 1]]
        if len(window) >= MIN_JOURNAL_MINUTES // 2:
            candidate = (statistics.median(window), first, last)
            if best is None or candidate[0] > best[0]:
                best = candidate
    if best is None:
        return None
    rate, first, last = best
    return Baseline(rate, "journal", rows[first][0], rows[last][0] + 60, last - first + 1)


@dataclass(frozen=True, slots=True)
class Slowdown:
    """The run's rate below `fraction` of its baseline for its last `below_for` values."""

    rate: float
    baseline: Baseline
    below_for: int
    fraction: float

    @property
    def below_pct(self) -> float:
        return (1 - self.rate / self.baseline.rate) * 100

    def text(self, unit: str, now: float) -> str:
        """`9.1K tok/s, 36 % below its best sustained 14.2K (yesterday 14:00–18:00)`."""
        what = "the baseline" if self.baseline.source == "config" else "its best sustained"
        return (f"{si(self.rate)} {unit}, {self.below_pct:.0f} % below {what} {si(self.baseline.rate)} "
                f"({self.baseline.where(now)}), for its last {self.below_for} rate values")


def slowdown(values: Sequence[float], baseline: Baseline | None, fraction: float) -> Slowdown | None:
    """A slowdown when the run's last rate values (two or more) are all below `fraction` × baseline and
    together cover SLOW_AFTER_VALUES of its usual intervals or more.

    A line printed every N steps covers N steps: at a rate r it took baseline / r of the intervals it
    took at its best, so two lines at a hundredth of the baseline rate (a recompiling run logs that
    rarely) cover two hundred intervals, while five lines just below the fraction cover about five.
    """
    if baseline is None or baseline.rate <= 0:
        return None
    limit = fraction * baseline.rate
    below: list[float] = []
    for value in reversed(values):
        if value >= limit:
            break
        below.append(value)
    covered = sum(baseline.rate / max(value, baseline.rate * 1e-3) for value in below)
    if len(below) < 2 or covered < SLOW_AFTER_VALUES:
        return None
    return Slowdown(statistics.median(below), baseline, len(below), fraction)


def against_fastest(speeds: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """Each one's speed as a share of the fastest's (1.0 the fastest, 0–1 as NVRx scores ranks), in the
    order given: ranks by how little of their time is their own work, nodes by their rates."""
    fastest = max(speeds.values(), default=0.0)
    return tuple((name, round(speed / fastest, 3) if fastest > 0 else 1.0) for name, speed in speeds.items())


def slowest_of(speeds: dict[str, float], fraction: float) -> tuple[str, float] | None:
    """The slowest of two or more and its score against the fastest, when that is below `fraction`
    (metrics.slow_fraction: slower than the fastest as a run is slower than its own best)."""
    if len(speeds) < 2:
        return None
    name, score = min(against_fastest(speeds), key=lambda item: item[1])
    return (name, score) if score < fraction else None


def no_history_text(values: int) -> str:
    return f"no history yet: {values} rate values of the {MIN_LOG_VALUES} a learned baseline needs"


# -- the facts a cause is decided from --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessLook:
    """One process of the run over the look's window."""

    pid: int
    label: str
    """What the operator reads: `rank 1`, `worker of rank 0`, `main`."""
    role: str
    rank: int | None
    parent: int | None
    threads: tuple[ThreadSamples, ...]
    """py-spy record with idle threads: where each thread was, sample by sample."""
    ran_ns: int | None = None
    """schedstat over the window, all its threads: on a CPU, and runnable but waiting for one."""
    waited_ns: int | None = None
    main_ran_ns: int | None = None
    main_waited_ns: int | None = None
    major_faults: int | None = None
    """Major page faults over the window."""
    allowed_cpus: int | None = None


@dataclass(frozen=True, slots=True)
class GpuLook:
    index: int
    utilization_pct: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle: int | None = None
    """NVML's clock-throttle reason bits."""
    shares: tuple[tuple[int, float], ...] | None = None
    """(host pid, SM %) of every process on it, from NVML process samples; None when unread."""
    run_pids: frozenset[int] = frozenset()
    """Which of those pids are the run's."""


@dataclass(frozen=True, slots=True)
class HostLook:
    load1: float | None = None
    cpus: int | None = None
    swapped_in_pages: int | None = None
    """Pages swapped in over the window."""
    mem_available_share: float | None = None


@dataclass(frozen=True, slots=True)
class SlowLook:
    window_s: float
    processes: tuple[ProcessLook, ...]
    gpus: tuple[GpuLook, ...] = ()
    host: HostLook = field(default_factory=HostLook)
    recompile_lines: int = 0
    """Dynamo / inductor recompile lines in the log since the slowdown began."""
    unread: tuple[str, ...] = ()
    """What could not be read, each in words (`GPU clocks: pynvml not importable on the target`)."""


@dataclass(frozen=True, slots=True)
class Cause:
    name: str
    """input-bound, slow rank, neighbour on the GPU, CPU starvation, GPU held back, memory pressure, recompiling, unknown."""
    summary: str
    evidence: tuple[str, ...]
    ruled_out: tuple[str, ...] = ()
    scores: tuple[tuple[str, float], ...] = ()
    """A slow rank: each rank's score against the fastest (1.0 the fastest)."""


CAUSES = ("input-bound", "slow rank", "neighbour on the GPU", "CPU starvation", "GPU held back", "memory pressure",
          "recompiling", "unknown")


def _stack(pid: int, frames: tuple[StackFrame, ...]) -> ThreadStack:
    return ThreadStack(pid, 0, None, False, False, frames)


def _share(samples: ThreadSamples, test) -> float:
    total = samples.samples
    return sum(n for stack, n in samples.stacks if test(stack)) / total if total else 0.0


def main_thread(process: ProcessLook) -> ThreadSamples | None:
    """The thread that drives the process: MainThread, else the one with the most samples."""
    named = [t for t in process.threads if t.name == "MainThread"]
    return named[0] if named else max(process.threads, key=lambda t: t.samples, default=None)


def _waits_on_data(pid: int, stack: tuple[StackFrame, ...]) -> bool:
    """A wait for the next batch: on a queue (a data thread's, a DataLoader's), or any wait inside the data code."""
    wait = classify_wait(_stack(pid, stack))
    return wait == "queue get" or (wait in ("lock/condition wait", "sleep", "I/O", "unknown") and any(
        any(mark in frame.file for mark in _DATA_FILES) or "_next_data" in frame.function for frame in stack
    ))


def _in_collective(pid: int, stack: tuple[StackFrame, ...]) -> bool:
    return classify_wait(_stack(pid, stack)) in ("NCCL collective", "rendezvous")


def _compiling(stack: tuple[StackFrame, ...]) -> bool:
    return any(any(mark in frame.file for mark in _COMPILE_MARKS) for frame in stack)


def _frame_text(frame: StackFrame) -> str:
    where = frame.file.rsplit("/", 1)[-1]
    return f"{frame.function} ({where}:{frame.line})" if frame.line else f"{frame.function} ({where})"


def top_frame(samples: ThreadSamples, test=lambda stack: True) -> str | None:
    """The most sampled stack passing `test`, by its innermost frame of the run's own code (else its innermost)."""
    for stack, _ in samples.stacks:
        if stack and test(stack):
            own = next((f for f in stack if is_user_frame(f)), stack[0])
            return _frame_text(own)
    return None


def _drivers(look: SlowLook) -> list[ProcessLook]:
    """The processes that drive the run: its ranks, else its main process."""
    ranks = [p for p in look.processes if p.role == "rank"]
    if ranks:
        return sorted(ranks, key=lambda p: (p.rank is None, p.rank))
    # A main process's own children (torch.compile's workers, a pool) are not what drives the run.
    pids = {p.pid for p in look.processes}
    mains = [p for p in look.processes if p.role == "main" and p.parent not in pids]
    return mains or [p for p in look.processes if p.role not in ("worker", "launcher", "helper")][:1]


def name_cause(look: SlowLook) -> Cause:
    """The cause of a slowdown from `look`; see the module's docstring for the order."""
    drivers = _drivers(look)
    ruled: list[str] = []
    for rule in (_recompiling, _slow_rank, _input_bound, _neighbour_on_gpu, _cpu_starved, _gpu_held_back,
                 _memory_pressure):
        found = rule(look, drivers)
        if isinstance(found, Cause):
            return Cause(found.name, found.summary, found.evidence, tuple(ruled), found.scores)
        if found:
            ruled.append(found)
    return Cause("unknown", "no cause stands out in the stacks, /proc or NVML", (), tuple(ruled) + look.unread)


def _recompiling(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str:
    shares = [(p, _share(t, _compiling)) for p in drivers if (t := main_thread(p)) is not None]
    compiling = [(p, s) for p, s in shares if s >= COMPILE_SHARE]
    if look.recompile_lines >= RECOMPILE_LINES or compiling:
        evidence = []
        if look.recompile_lines:
            evidence.append(f"{look.recompile_lines} recompile lines in the log since the slowdown began")
        evidence += [f"{p.label}: {s:.0%} of its main thread's samples in dynamo/inductor compile frames" for p, s in compiling]
        return Cause("recompiling", "torch.compile recompiles again and again (a shape or guard that changes every step)",
                     tuple(evidence))
    return "not recompiling (no recompile lines, no compile frames)"


def _slow_rank(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str | None:
    ranks = [(p, t) for p in drivers if p.role == "rank" and (t := main_thread(p)) is not None and t.samples]
    if len(ranks) < 2:
        return None
    waits = [(p, t, _share(t, lambda s, pid=p.pid: _in_collective(pid, s))) for p, t in ranks]
    fastest = max(w for _, _, w in waits)
    straggler, samples, least = min(waits, key=lambda item: item[2])
    if fastest < COLLECTIVE_WAIT_SHARE or fastest - least < STRAGGLER_GAP:
        return f"no slow rank (the ranks wait in collectives {least:.0%}–{fastest:.0%} of their samples)"
    # A rank's busy share is what it does between collectives; the fastest rank is the least busy.
    scores = against_fastest({p.label: 1 / max(1 - w, 1 / t.samples) for p, t, w in waits})
    frame = top_frame(samples, lambda s: not _in_collective(straggler.pid, s)) or "its own code"
    evidence = [f"{p.label}: waits in a collective {w:.0%} of its samples" for p, _, w in waits]
    evidence.append(f"{straggler.label} spends its time in {frame}")
    evidence.append("scores against the fastest: " + ", ".join(f"{label} {score:.2g}" for label, score in scores))
    return Cause("slow rank", f"{straggler.label} is the straggler: the other ranks wait for it in collectives",
                 tuple(evidence), scores=scores)


def _input_bound(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str:
    waiting = []
    for p in drivers:
        samples = main_thread(p)
        if samples is None:
            continue
        share = _share(samples, lambda s, pid=p.pid: _waits_on_data(pid, s))
        waiting.append((p, samples, share))
    bound = [(p, t, s) for p, t, s in waiting if s >= INPUT_WAIT_SHARE]
    if not bound or len(bound) < len(waiting):
        top = max((s for _, _, s in waiting), default=0.0)
        return f"not input-bound (the main thread waits on data {top:.0%} of its samples)"
    evidence = []
    for p, samples, share in bound:
        frame = top_frame(samples, lambda s, pid=p.pid: _waits_on_data(pid, s))
        wait = next((classify_wait(_stack(p.pid, stack)) for stack, _ in samples.stacks if _waits_on_data(p.pid, stack)), None)
        evidence.append(f"{p.label}: waits on its data {share:.0%} of its samples ({wait}), in {frame}")
    producers = [p for p in look.processes if p.role == "worker"]
    for worker in producers[:4]:
        samples = main_thread(worker)
        frame = top_frame(samples) if samples is not None else None
        evidence.append(f"{worker.label} (pid {worker.pid}) spends its time in {frame or 'no frame'}")
    if not producers:
        threads = [t for p in drivers for t in p.threads if t.name != "MainThread" and t.samples]
        for thread in threads[:2]:
            evidence.append(f"thread {thread.name or thread.tid} spends its time in {top_frame(thread) or 'no frame'}")
    evidence += [f"GPU {g.index}: {g.utilization_pct:.0f} % busy" for g in look.gpus if g.utilization_pct is not None]
    producer = f"its {len(producers)} DataLoader worker{'s' if len(producers) != 1 else ''}" if producers else "its data thread"
    return Cause("input-bound", f"the run waits on its input: {producer} cannot keep up", tuple(evidence))


def _neighbour_on_gpu(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str | None:
    read = [g for g in look.gpus if g.shares is not None]
    if not read:
        return None
    found = []
    for gpu in read:
        if not gpu.run_pids:
            continue
        ours = sum(pct for pid, pct in gpu.shares or () if pid in gpu.run_pids)
        for pid, pct in gpu.shares or ():
            if pid not in gpu.run_pids and pct >= NEIGHBOUR_SM_PCT:
                found.append((gpu, pid, pct, ours))
    if not found:
        return "no neighbour on the run's GPUs (NVML process samples)"
    evidence = [f"GPU {g.index}: pid {pid}, not of the run, takes {pct:.0f} % of its SM against the run's {ours:.0f} %"
                for g, pid, pct, ours in found]
    evidence += [text for g, *_ in found if (text := _power_text(g))]
    gpu, pid, pct, _ = found[0]
    return Cause("neighbour on the GPU", f"another process (pid {pid}) shares GPU {gpu.index}", tuple(dict.fromkeys(evidence)))


def _power_text(gpu: GpuLook) -> str | None:
    parts = []
    if gpu.throttle:
        reasons = [name for bit, name in THROTTLE_REASONS.items() if gpu.throttle & bit]
        if reasons:
            parts.append("throttled: " + ", ".join(reasons))
    if gpu.power_w is not None and gpu.power_limit_w:
        parts.append(f"{gpu.power_w:.0f} of {gpu.power_limit_w:.0f} W")
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        parts.append(f"SM clock {gpu.sm_clock_mhz} of {gpu.sm_clock_max_mhz} MHz")
    return f"GPU {gpu.index}: " + "; ".join(parts) if parts else None


def _cpu_starved(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str | None:
    window_ns = look.window_s * 1e9
    rows = [(p, p.main_waited_ns / window_ns) for p in drivers if p.main_waited_ns is not None and window_ns > 0]
    if not rows:
        return None
    starved = [(p, share) for p, share in rows if share >= RUN_DELAY_SHARE]
    host = look.host
    if not starved:
        return f"not CPU-starved (the main thread waited to run {max(s for _, s in rows):.0%} of the window)"
    evidence = [f"{p.label}: its main thread was runnable but not running {share:.0%} of the window (schedstat run delay)"
                for p, share in starved]
    cores = next((p.allowed_cpus for p, _ in starved if p.allowed_cpus), None)
    if host.load1 is not None:
        evidence.append(f"load {host.load1:.2f} on {host.cpus} CPUs" + (f"; the run may use {cores}" if cores else ""))
    return Cause("CPU starvation", "the run's threads wait for a CPU: other work holds its cores", tuple(evidence))


def _gpu_held_back(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str | None:
    read = [(g, g.throttle) for g in look.gpus if g.throttle is not None]
    if not read:
        return None
    held = []
    for gpu, throttle in read:
        reasons = {bit for bit in THROTTLE_REASONS if throttle & bit}
        clock_share = gpu.sm_clock_mhz / gpu.sm_clock_max_mhz if gpu.sm_clock_mhz and gpu.sm_clock_max_mhz else None
        if reasons - {0x4} or (0x4 in reasons and clock_share is not None and clock_share < CAPPED_CLOCK_SHARE):
            held.append(gpu)
    if not held:
        return "GPUs not held back (no thermal or slowdown reason; clocks near their maximum)"
    evidence = tuple(text for g in held if (text := _power_text(g)))
    return Cause("GPU held back", "the GPU runs below its clocks: " + ", ".join(
        sorted({THROTTLE_REASONS[b] for g in held for b in THROTTLE_REASONS if (g.throttle or 0) & b})), evidence)


def _memory_pressure(look: SlowLook, drivers: list[ProcessLook]) -> Cause | str:
    host, seconds = look.host, max(look.window_s, 1e-3)
    evidence = []
    if host.swapped_in_pages is not None and host.swapped_in_pages / seconds >= SWAP_IN_PER_S:
        evidence.append(f"{host.swapped_in_pages / seconds:.0f} pages swapped in a second")
    for p in drivers:
        if p.major_faults is not None and p.major_faults / seconds >= MAJOR_FAULTS_PER_S:
            evidence.append(f"{p.label}: {p.major_faults / seconds:.0f} major page faults a second")
    if host.mem_available_share is not None and host.mem_available_share < MEM_AVAILABLE_SHARE:
        evidence.append(f"host memory available {host.mem_available_share:.1%}")
    if evidence:
        return Cause("memory pressure", "the run pages: host memory is short", tuple(evidence))
    return "no memory pressure (no swap-in, few major faults)"


#: /proc/PID/task/TID/schedstat as read: tid → (ns on a CPU, ns runnable but waiting for one).
Schedstat = dict[int, tuple[int, int]]


def process_looks(
    processes: Sequence[ProcessReading],
    records: dict[int, Sequence[ThreadSamples]],
    before: dict[int, Schedstat],
    after: dict[int, Schedstat],
    *,
    affinity: dict[int, int] | None = None,
    faults: dict[int, int] | None = None,
) -> tuple[ProcessLook, ...]:
    """Each labelled process (console.observe.roles) with its recording and its schedstat over the window."""
    looks = []
    for process in processes:
        first, last = before.get(process.pid, {}), after.get(process.pid, {})
        common = [tid for tid in last if tid in first]
        ran = sum(last[t][0] - first[t][0] for t in common) if common else None
        waited = sum(last[t][1] - first[t][1] for t in common) if common else None
        main = process.pid if process.pid in first and process.pid in last else None
        looks.append(ProcessLook(
            process.pid, process.label or process.role or "main", process.role or "main", process.rank, process.ppid,
            tuple(records.get(process.pid, ())), ran, waited,
            last[main][0] - first[main][0] if main is not None else None,
            last[main][1] - first[main][1] if main is not None else None,
            (faults or {}).get(process.pid), (affinity or {}).get(process.pid),
        ))
    return tuple(looks)


def recompile_lines(lines: Iterable[str]) -> int:
    """Dynamo's recompile lines (`TORCH_LOGS=recompiles`, or its cache-limit warning) among `lines`."""
    return sum(1 for line in lines if "Recompiling function" in line or "recompile_limit" in line
               or "cache_size_limit" in line)
