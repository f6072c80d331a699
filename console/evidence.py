"""Gather the evidence for one diagnosis from a target (the I/O half of console.diagnose).

In parallel: two samples `window_s` apart from the sampling agent (processes with CPU% by
delta, GPUs with each process's SM % on the second, the log's stat at both ends of the
window) and the log's last bytes (problem kinds, throughput, dead threads, NCCL lines),
unless the console already follows the log into a RunState. When NCCL's watchdog spoke, the
ranks' flight-recorder dumps are read. Then, only when the verdict cannot be earned without
them (console.diagnose.wants_stacks: the log shows no progress), every rank and worker is
dumped with py-spy and recorded for a second (py-spy record, never pausing it), each thread
summarised with how it moved. A key press to a verdict stays under ~4 s.

A follower's RunState gives the same evidence without a command (state_evidence); RunLook
judges a followed run from it every few seconds and looks at the stacks itself, once per quiet
stretch of the log (StackLooks), for the console and `pulse watch` alike.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import statistics
import time
from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from console.config import Config, StallConfig
from console.diagnose import (
    DeadThread,
    Evidence,
    ProblemLine,
    RecoveredFamily,
    StackSummary,
    Verdict,
    baseline_of,
    diagnose,
    log_proves,
    slow_look_due,
    slowdown_of,
    wants_slow_look,
    wants_stacks,
)
from console.model import LogLine, ProcessReading, Sample
from console.observe.follow import MAX_LINE_BYTES, log_pattern
from console.observe.lines import LineReader
from console.observe.nccl import (
    DEFAULT_DUMP_PREFIX,
    DUMP_PREFIX_VARIABLES,
    MAX_DUMP_BYTES,
    FlightRecord,
    NcclFact,
    dump_rank,
    nccl_fact,
    parse_flight_record,
)
from console.observe.sampler import gpu_processes_unseen, sample_once
from console.observe.textsafe import sanitize
from console.remote.shell import quote
from console.remote.target import Target, TargetError
from console.sent import SentSignal, last_signal, read_records, signals_sent
from console.state import RunState
from console.stall import QUIET_FLOOR_S, Silence, interval_from_density, lifetime_write_interval_s
from console.user_patterns import MetricPatterns

if TYPE_CHECKING:  # py-spy's parsing and runner (and the remote process helpers under it) and console.slowness
    # load with the first look at the stacks, or the first diagnosis: the console's first frame does not wait for them
    from console.observe.pyspy import ProcessDump, ThreadSamples
    from console.observe.pyspy_run import DumpError
    from console.slowness import Baseline, SlowLook

DumpStacks = Literal["auto", "always", "never"]

#: How much of the log's end is read for problem lines and throughput when nothing follows it.
TAIL_BYTES = 256 * 1024
#: How long reading the tail may take beyond the sampling window (a slow link, a slow login shell).
TAIL_TIMEOUT_S = 10.0
#: Problem lines an Evidence keeps (the newest).
MAX_PROBLEMS = 20
#: NCCL facts an Evidence keeps (the newest).
MAX_NCCL_FACTS = 20
#: Flight-recorder dumps read at most (one per rank on this host).
MAX_FLIGHT_DUMPS = 64
#: Throughput is the median of this many newest values (one noisy line is not a trend).
RATE_VALUES = 5
DUMP_TIMEOUT_S = 5.0
#: A verdict from what a follower holds compares the newest sample with one about this old.
STATE_WINDOW_S = 10.0


async def gather(
    target: Target,
    config: Config,
    *,
    window_s: float | None = None,
    follower_state: RunState | None = None,
    dump_stacks: DumpStacks = "auto",
    launched_at: float | None = None,
    rate_histories: Mapping[str, Baseline] | None = None,
) -> Evidence:
    """One look at the run on `target`: what `console.diagnose.diagnose` needs.

    `follower_state`: the console's RunState, when it already follows the log (its problem
    lines since the last launch and its throughput series are used; no tail is read).
    `launched_at`: the target-clock time of the console's last launch, if any.
    `dump_stacks`: 'auto' dumps and records the stacks only when the verdict cannot be earned
    without them (console.diagnose.wants_stacks). `rate_histories`: the run's best sustained rate of
    each metric from its journal, when the caller read one. A run slow against its baseline gets its slow look
    (console.slow_look) unless `dump_stacks` is 'never'. TargetError when the target cannot be sampled.
    """
    window_s = config.stall.sample_window_s if window_s is None else window_s
    early: list[asyncio.Future[StacksTaken]] = []

    def on_first(sample: Sample) -> None:
        # A log quiet past the floor already: the stacks will be wanted; take them during the window.
        if dump_stacks != "never" and _quiet_past_floor(sample):
            early.append(asyncio.ensure_future(take_stacks(target, config, sample.processes)))

    sampling = asyncio.ensure_future(sample_once(target, config, window_s, process_utilization=True, on_first=on_first))
    if follower_state is None and config.run.log:
        tail = asyncio.ensure_future(read_tail_text(target, config, timeout=window_s + TAIL_TIMEOUT_S))
    else:
        tail = None
    try:
        first, last = await sampling
        tail_text = await tail if tail is not None else ""
    except BaseException:
        for task in early:
            task.cancel()
        await asyncio.gather(*early, return_exceptions=True)
        raise
    finally:
        if tail is not None:  # also when sampling failed first: the tail's own error is collected, not leaked
            tail.cancel()
            await asyncio.gather(tail, return_exceptions=True)

    if follower_state is not None:
        state = follower_state
        evidence = from_samples(first, last, config, follower_state, timed=True, launched_at=launched_at)
        evidence = with_read_rhythm(evidence, follower_state)
    else:
        state = RunState()
        state.add_lines(tail_lines(tail_text, config, time.monotonic()))
        evidence = with_lifetime_rhythm(from_samples(first, last, config, state, timed=False, launched_at=launched_at), tail_text)
    if rate_histories and evidence.rate_metric is not None and evidence.rate_metric in rate_histories:
        evidence = replace(evidence, rate_history=rate_histories[evidence.rate_metric])
    if dump_stacks != "never" and wants_slow_look(evidence, config):
        from console.slow_look import read_slow_look

        evidence = replace(evidence, slow_look=await read_slow_look(
            target, evidence.processes, evidence.gpus, py_spy=config.target.py_spy,
            recompile_lines=recompiles_since_slow(state, evidence, config)))

    if evidence.nccl:
        evidence = replace(evidence, flight=await read_flight_records(target, evidence.processes, timeout=TAIL_TIMEOUT_S))
    wanted = bool(evidence.processes) and (dump_stacks == "always" or (dump_stacks == "auto" and wants_stacks(evidence, config)))
    if not wanted:
        for task in early:
            task.cancel()
        await asyncio.gather(*early, return_exceptions=True)
        return evidence
    taken = await early[0] if early else await take_stacks(target, config, evidence.processes)
    if not taken.dumps:
        return evidence
    return with_dumps(evidence, taken.dumps, recorded=taken.recorded, woke=taken.woke, busy_pct=config.stall.cpu_idle_pct)


def _quiet_past_floor(sample: Sample) -> bool:
    log = sample.log
    return log is not None and log.exists and sample.time - log.mtime >= QUIET_FLOOR_S and bool(sample.processes)


def state_evidence(state: RunState, config: Config, *, fresh_s: float | None = None) -> Evidence | None:
    """Evidence from what a follower already holds (no command on the target): the newest sample against
    one about STATE_WINDOW_S older. None before two samples, or when the newest is older than `fresh_s`
    (the follower has lost the target)."""
    samples = state.samples
    if len(samples) < 2:
        return None
    if fresh_s is not None and (state.last_sample_at is None or state.clock() - state.last_sample_at > fresh_s):
        return None
    last = samples[-1]
    first = next((s for s in samples if last.time - s.time <= STATE_WINDOW_S), samples[-2])
    if first is last:
        first = samples[-2]
    return with_read_rhythm(from_samples(first, last, config, state, timed=True), state)


class StackLooks:
    """The run's stacks, looked at once per quiet stretch of its log and held for the verdicts between.

    A stretch is the log at one size: once it grows, the look is forgotten. A look is due when the
    verdict cannot be earned without the stacks (console.diagnose.wants_stacks): once when the quiet
    passes the floor, and once more when it passes the stall limit (a quiet evaluation that then
    hangs is caught). Never a look per frame: the verdicts in between reuse the one held.
    """

    def __init__(self) -> None:
        self._stretch: tuple[str | None, int] | None = None
        self._held: Evidence | None = None
        self._stage = 0

    @staticmethod
    def _stage_of(evidence: Evidence, config: Config) -> int:
        silence = Silence(evidence.progress_silent_s, evidence.log_write_interval_s, evidence.log_rhythm_estimated,
                          config.stall.log_silent_s, grew=evidence.progress_grew)
        return 2 if silence.stalled else 1

    def _stretch_of(self, evidence: Evidence) -> tuple[str | None, int]:
        """The stretch `evidence` is in: the log's size, unless all it wrote since is warnings (no progress)."""
        if evidence.log_warnings_only_s is not None and self._stretch is not None and self._stretch[0] == evidence.log_path:
            return self._stretch
        return evidence.log_path, evidence.log_size

    def _enter(self, evidence: Evidence) -> None:
        stretch = self._stretch_of(evidence)
        if stretch != self._stretch:
            self._stretch, self._held, self._stage = stretch, None, 0

    def due(self, evidence: Evidence, config: Config) -> bool:
        """A look at the stacks is due for `evidence` (taken from the state, without stacks)."""
        self._enter(evidence)
        return self._stage < self._stage_of(evidence, config) and wants_stacks(evidence, config)

    def remember(self, evidence: Evidence, config: Config) -> None:
        """Hold a look's stacks (or why none could be taken) for the rest of its stretch."""
        self._enter(evidence)
        if evidence.stacks or evidence.stack_error:
            self._held = evidence
            self._stage = self._stage_of(evidence, config)

    def apply(self, evidence: Evidence) -> Evidence:
        """`evidence` with the stacks held for its stretch, if any."""
        held = self._held
        if held is None or self._stretch_of(evidence) != self._stretch:
            return evidence
        return replace(evidence, stacks=held.stacks, stack_error=held.stack_error, stacks_missing=held.stacks_missing,
                       flight=held.flight or evidence.flight)


class CheapVerdict(NamedTuple):
    """A verdict from what the follower holds, and whether it waits on a look at the stacks."""

    verdict: Verdict | None
    """None before two samples."""
    look_due: bool
    """A look at the stacks is due (`RunLook.full()` takes it; never without a target)."""
    proven: bool
    """The verdict is a problem the log proves already (console.diagnose.log_proves): shown while the look is on its way."""


class RunLook:
    """Verdicts on a run a follower feeds into `state`: from what it holds (cheap, every few seconds)
    and, when a verdict cannot be earned without them, from the run's stacks, once per quiet stretch."""

    def __init__(self, target: Target | None, config: Config, state: RunState) -> None:
        self.target, self.config, self.state = target, config, state
        self.looks = StackLooks()
        self.rate_histories: dict[str, Baseline] = {}
        """The run's best sustained rate of each metric from its journal, set by whoever reads the journal."""
        self._slow_look: SlowLook | None = None
        """The slow look of the slowdown in progress: taken once per slowdown, held while it lasts."""
        self._estimated_s: float | None = None
        self.baseline: Baseline | None = None
        """What the last verdict measured the run's rate against (console.diagnose.baseline_of): the
        config's, else the journal's or the log's best sustained rate; None before it has one."""
        self.quiet = False
        """The last verdict found the log quiet, no look at the stacks held yet: the floor is seconds
        away, so a caller judges every second (not every CHEAP_DIAGNOSIS_S) until the look is due."""

    @property
    def usual_s(self) -> float | None:
        """The log's usual gap between writes: learned by the follower, else as last estimated."""
        return self.state.write_interval_s() or self._estimated_s

    def cheap(self) -> CheapVerdict:
        """The verdict from the state and the stacks held, whether a look at the stacks is due, and
        whether the log proves it already."""
        evidence = state_evidence(self.state, self.config)
        if evidence is None:
            return CheapVerdict(None, False, False)
        self._estimated_s = evidence.log_write_interval_s if evidence.log_rhythm_estimated else None
        evidence = replace(evidence, rate_history=self.rate_histories.get(evidence.rate_metric or ""))
        self.baseline = baseline_of(evidence)
        due = self.target is not None and self.looks.due(evidence, self.config)
        held = self._with_slow_look(self.looks.apply(evidence))
        verdict = diagnose(held, self.config)
        due = due or (self.target is not None and slow_look_due(held, verdict))
        silence = Silence(evidence.progress_silent_s, evidence.log_write_interval_s, override_s=self.config.stall.log_silent_s)
        self.quiet = self.target is not None and not silence.progressing and not held.stacks and not due
        return CheapVerdict(verdict, due, log_proves(verdict, held))

    async def full(self, *, launched_at: float | None = None) -> tuple[Verdict, Evidence]:
        """A full look (two samples, and the stacks when the verdict needs them), held for the stretch."""
        if self.target is None:
            raise TargetError("no target to look at: the verdict comes from what the follower holds")
        evidence = self._with_slow_look(await gather(self.target, self.config, follower_state=self.state,
                                                     launched_at=launched_at, rate_histories=self.rate_histories))
        self.looks.remember(evidence, self.config)
        return diagnose(evidence, self.config), evidence

    def _with_slow_look(self, evidence: Evidence) -> Evidence:
        """`evidence` with the slowdown's look once one was taken; the look is forgotten when the slowdown ends."""
        if slowdown_of(evidence, self.config.metrics.slow_fraction) is None:
            self._slow_look = None
        elif evidence.slow_look is not None:
            self._slow_look = evidence.slow_look
        elif self._slow_look is not None:
            return replace(evidence, slow_look=self._slow_look)
        return evidence


def dump_prefixes(processes: tuple[ProcessReading, ...]) -> list[str]:
    """Where the run's flight recorder writes: its ranks' TORCH_FR_DUMP_TEMP_FILE /
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE, and PyTorch's default."""
    found = [dict(p.run_env).get(name) for p in processes for name in DUMP_PREFIX_VARIABLES]
    return list(dict.fromkeys([*(f for f in found if f), DEFAULT_DUMP_PREFIX]))


def flight_script(prefixes: list[str]) -> str:
    """Bash printing `== PATH` and the base64 of each flight-recorder dump `PREFIX<rank>` (small files only)."""
    globs = " ".join(f"{quote(prefix)}[0-9]*" for prefix in prefixes)
    return (
        f"n=0; for f in {globs}; do [ -f \"$f\" ] || continue; n=$((n+1)); [ $n -le {MAX_FLIGHT_DUMPS} ] || break; "
        f'[ "$(stat -c %s -- "$f")" -le {MAX_DUMP_BYTES} ] || continue; '
        'echo "== $f"; base64 -w0 -- "$f"; echo; done; true'
    )


async def read_flight_records(target: Target, processes: tuple[ProcessReading, ...], *, timeout: float) -> tuple[FlightRecord, ...]:
    """The ranks' flight-recorder dumps on `target`, parsed safely; none when there are none or they cannot be read."""
    prefixes = dump_prefixes(processes)
    try:
        result = await target.run(flight_script(prefixes), timeout)
    except TargetError:
        return ()
    return parse_flight_listing(result.stdout, prefixes)


def parse_flight_listing(listing: str, prefixes: list[str]) -> tuple[FlightRecord, ...]:
    """FlightRecords from flight_script's output (a dump that does not parse is left out)."""
    records = []
    lines = listing.split("\n")
    for header, body in zip(lines, lines[1:]):
        if not header.startswith("== "):
            continue
        path = header[3:]
        rank = next((r for prefix in prefixes if (r := dump_rank(path, prefix)) is not None), None)
        if rank is None:
            continue
        try:
            records.append(parse_flight_record(base64.b64decode(body, validate=True), rank))
        except (ValueError, binascii.Error):
            continue
    return tuple(sorted(records, key=lambda r: r.rank))


def tail_script(log: str, tail_bytes: int) -> str:
    """Bash printing the run's log (the newest match of a glob): whole lines of its last `tail_bytes`."""
    # Unquoted $pattern under IFS= is globbed but never split or evaluated: odd names stay inert.
    n = int(tail_bytes)
    return (
        f"IFS=; pattern={quote(log_pattern(log))}; "
        'file=$(ls -1td -- $pattern 2>/dev/null | head -n 1); [ -f "$file" ] || exit 0; '
        f'if [ "$(stat -c %s -- "$file")" -gt {n} ]; then tail -c {n} -- "$file" | tail -n +2; '
        'else cat -- "$file"; fi'
    )


async def read_tail_text(target: Target, config: Config, *, timeout: float, tail_bytes: int = TAIL_BYTES) -> str:
    """The whole lines of the run's log's last `tail_bytes`, as written (empty when it is missing).

    One command reads the log's end, so the tail is exact however slowly the link delivers it.
    TargetError when the target does not answer within `timeout`.
    """
    if not config.run.log:
        return ""
    return (await target.run(tail_script(config.run.log, tail_bytes), timeout)).stdout


async def read_tail(target: Target, config: Config, *, timeout: float, tail_bytes: int = TAIL_BYTES) -> list[LogLine]:
    """The last lines of the run's log, made safe and classified (none when it is missing)."""
    text = await read_tail_text(target, config, timeout=timeout, tail_bytes=tail_bytes)
    return tail_lines(text, config, time.monotonic())


def with_lifetime_rhythm(evidence: Evidence, tail: str) -> Evidence:
    """A one-shot look's evidence with the log's usual write gap estimated from the log itself
    (no history to learn it from): the oldest process's writing time over the writes the log holds."""
    written_for = _written_for_s(evidence)
    if written_for is None:
        return evidence
    return _estimated(evidence, lifetime_write_interval_s(tail, evidence.log_size, written_for))


def with_read_rhythm(evidence: Evidence, state: RunState) -> Evidence:
    """A followed log's evidence, before its rhythm is learned (a console opened on a run that had
    gone quiet), with the rhythm estimated as `pulse check` does, at the density of what was read."""
    written_for = _written_for_s(evidence)
    if written_for is None:
        return evidence
    return _estimated(evidence, interval_from_density(state.read_writes, state.read_bytes, evidence.log_size, written_for))


def _written_for_s(evidence: Evidence) -> float | None:
    """How long the run has been writing its log (its oldest process's life up to the last write);
    None when the rhythm is known already or nothing tells."""
    if evidence.log_write_interval_s is not None or evidence.log_silent_s is None:
        return None
    lives = [p.elapsed_s for p in evidence.processes if p.elapsed_s is not None and p.state not in ("Z", "X")]
    return max(lives) - evidence.log_silent_s if lives else None


def _estimated(evidence: Evidence, interval: float | None) -> Evidence:
    if interval is None:
        return evidence
    return replace(evidence, log_write_interval_s=round(interval, 3), log_rhythm_estimated=True)


def tail_lines(tail: str, config: Config, now: float) -> list[LogLine]:
    """The lines of a log's tail as tail_script printed it, made safe and classified, all read at `now`."""
    raws = tail.split("\n")
    if raws and not raws[-1]:
        raws.pop()
    out = []
    reader = LineReader(MetricPatterns(config.metrics.patterns))  # a block's continuation lines take its kind, as the follower reads them
    for number, raw in enumerate(raws, 1):
        text, cut = sanitize(raw, MAX_LINE_BYTES)
        out.append(LogLine(number, text, reader.read(text), cut, now))
    return out


def from_samples(
    first: Sample,
    last: Sample,
    config: Config,
    lines: RunState,
    *,
    timed: bool,
    launched_at: float | None = None,
) -> Evidence:
    """Evidence from two samples `window` apart and the log lines held in `lines`.

    `timed`: the lines' arrival times are real (a live follower), so problem ages and
    throughput silence can be measured; lines just read from a tail have no such times.
    """
    roles = config.gpus.roles
    gpus = tuple(g for g in last.gpus if not roles or g.index in roles)
    ev = Evidence(
        window_s=round(last.time - first.time, 2),
        processes=last.processes,
        process_error=last.process_error,
        gpus=gpus,
        gpu_source=last.gpu_source,
        gpu_error=last.gpu_error,
        in_pid_namespace=last.in_pid_namespace,
        gpu_contexts_unseen=gpu_processes_unseen(last),
        launched_at=launched_at,
        signals=signals_to_stopped(last.processes, config.audit_log),
        **_log_fields(first, last, config, launched_at),
        **_line_fields(lines, config, timed),
    )
    return ev


def signals_to_stopped(processes: tuple[ProcessReading, ...], audit_log: str) -> tuple[SentSignal, ...]:
    """The last signal Pulse sent each stopped process (state T) of the run, from its audit log: read only
    when one is stopped, so a look at a running run never opens the file."""
    stopped = [p for p in processes if p.state == "T"]
    if not stopped:
        return ()
    try:
        sent = signals_sent(read_records(audit_log))
    except (OSError, ValueError, KeyError, TypeError):
        return ()  # an unreadable record is no fact: the stop is then someone else's, as far as Pulse knows
    now = time.time()
    found = (last_signal(sent, p.pid, now - p.elapsed_s) for p in stopped)
    return tuple(s for s in found if s is not None)


def _log_fields(first: Sample, last: Sample, config: Config, launched_at: float | None) -> dict:
    log = last.log
    if log is None:
        return {"log_path": config.run.log}
    before = first.log
    if not log.exists:
        return {"log_path": log.path, "log_exists": False, "log_written_since_launch": False if launched_at else None}
    if log.kind != "file":  # a device's or a FIFO's size and mtime are no writes of the run
        return {"log_path": log.path, "log_exists": True, "log_kind": log.kind}
    if before is not None and before.exists and before.inode == log.inode:
        growth = max(0, log.size - before.size)
    else:
        growth = log.size  # appeared or replaced during the window
    return {
        "log_path": log.path,
        "log_exists": True,
        "log_size": log.size,
        "log_growth": growth,
        "log_silent_s": round(max(0.0, last.time - log.mtime), 1),  # the last write, however long the window
        "log_written_since_launch": None if launched_at is None else log.mtime >= launched_at,
    }


def _line_fields(state: RunState, config: Config, timed: bool) -> dict:
    now = state.clock()
    # NCCL's account and a dead thread's later progress come with problem lines: a log without any
    # is not scanned (the fleet judges every node this way on each repaint).
    lines = state.current_lines() if state.problems else []
    spans = list(state.spans.problems)
    # A problem is judged by what followed it: the last line of progress, and each problem's neighbours
    # (the autotuner's "Runtime error during autotuning:" before it, "Ignoring this choice." after it).
    last_progress = max((line.number for line in lines if _progress(line)), default=0)
    texts = {line.number: line.text for line in lines}
    from console.observe.recovered import count_text, family_of, reason_of  # with the first diagnosis, not at start

    families: dict[str, list] = {}
    named = []
    for p in spans:
        around = [texts.get(n, "") for n in range(p.first - 1, p.last + 2)] + [p.name.text]
        family = family_of(around)
        named.append((p, family))
        if family is not None:
            families.setdefault(family.name, [family, 0, None])
            entry = families[family.name]
            entry[1] += 1
            entry[2] = entry[2] or reason_of(family, around)
    # Each problem once, by the line that names it (a traceback's exception line, not "Traceback").
    problems = tuple(
        ProblemLine(p.kind, p.name.text, round(now - p.name.time, 1) if timed else None, p.thread,
                    progress_after=last_progress > p.last, family=family.name if family else None)
        for p, family in named[-MAX_PROBLEMS:]
    )
    dead = tuple(
        DeadThread(
            p.thread,
            p.name.text,
            round(now - p.name.time, 1) if timed else None,
            any(_progress(line) for line in lines if line.number > p.last),
        )
        for p in spans
        if p.thread is not None and p.name.number > p.first  # its traceback's exception line has come
    )
    nccl = [fact for line in lines if (fact := _nccl_line(line.text)) is not None][-MAX_NCCL_FACTS:]
    metric = state.rate_metric
    values = [] if metric is None else state.values(metric, newest=RATE_VALUES)
    fields: dict = {
        "problems": problems,
        "families": tuple(RecoveredFamily(count_text(f, n, why), f.name) for f, n, why in families.values()),
        "dead_threads": dead,
        "nccl": tuple(nccl),
        "terminal_only_progress": state.terminal_only_progress,
    }
    if timed:
        fields["log_write_interval_s"] = state.write_interval_s()
        fields["log_warnings_only_s"] = state.warnings_only_s(now)
    if metric is None or not values:
        return fields
    fields.update(rate_metric=metric, rate_now=statistics.median(values), rate_baseline=config.metrics.baseline(metric),
                  rate_values=tuple(state.values(metric)))
    if timed and state.last_rate_at is not None:
        fields.update(rate_silent_s=state.rate_silent_s(now), rate_interval_s=state.rate_interval_s())
    return fields


def recompiles_since_slow(state: RunState, evidence: Evidence, config: Config) -> int:
    """Dynamo's recompile lines among the lines after the run's last rate at or above the slow limit."""
    found = slowdown_of(evidence, config.metrics.slow_fraction)
    metric = evidence.rate_metric
    if found is None or metric is None:
        return 0
    limit = found.fraction * found.baseline.rate
    since: list[str] = []
    for line in reversed(state.current_lines()):
        value = getattr(line.info, metric, None)
        if value is not None and value >= limit:
            break
        since.append(line.text)
    from console.slowness import recompile_lines  # a slowdown was found: the diagnosis loaded it

    return recompile_lines(since)


def _nccl_line(text: str) -> NcclFact | None:
    # Most lines are neither: a cheap test first, the parse only for NCCL's own lines.
    if "NCCL" not in text and "light recorder" not in text:
        return None
    return nccl_fact("", text)


def _progress(line: LogLine) -> bool:
    info = line.info
    return any(value is not None for value in (info.step, info.loss, info.tokens_per_s, info.samples_per_s, info.it_per_s))


#: py-spy dumps running at once on one target (each is a channel on its connection).
DUMPS_AT_ONCE = 8
#: The most processes one diagnosis dumps: ranks and main processes first, then their workers.
MAX_DUMPED = 32
#: Roles whose stacks say nothing about the run's progress (a launcher waits on its ranks).
_NOT_DUMPED = ("launcher", "shell")
_DUMP_ORDER = {"rank": 0, "main": 0, "worker": 1, "child": 2}


def main_process(processes: tuple[ProcessReading, ...]) -> ProcessReading | None:
    """The process whose stack matters most: the run's main program or its lowest rank, never a
    launcher or shell; else the oldest process whose parent is not one of the run's."""
    live = [p for p in processes if p.state not in ("Z", "X")]
    programs = [p for p in live if p.role in ("main", "rank")]
    if programs:
        return min(programs, key=lambda p: (p.rank if p.rank is not None else -1, p.pid))
    pids = {p.pid for p in processes}
    roots = [p for p in live if p.ppid not in pids]
    return max(roots, key=lambda p: p.elapsed_s, default=None)


def dump_order(processes: tuple[ProcessReading, ...]) -> list[ProcessReading]:
    """The live processes a diagnosis dumps, ranks (or the main program) first, then workers; at most MAX_DUMPED."""
    live = [p for p in processes if p.state not in ("Z", "X") and p.role not in _NOT_DUMPED]
    live.sort(key=lambda p: (_DUMP_ORDER.get(p.role, 3), p.rank if p.rank is not None else -1, p.pid))
    return live[:MAX_DUMPED]


@dataclass(frozen=True, slots=True)
class StacksTaken:
    """What one look at the stacks of a run's processes took."""

    dumps: list[tuple[ProcessReading, ProcessDump | DumpError]]
    recorded: dict[int, list[ThreadSamples]]
    """pid → what py-spy record saw of its threads."""
    woke: dict[int, int]
    """tid → how often the thread was scheduled while it was recorded."""


async def take_stacks(
    target: Target, config: Config, processes: tuple[ProcessReading, ...], *, at_once: int = DUMPS_AT_ONCE
) -> StacksTaken:
    """Every rank's and worker's stack (dump_order), and how each thread moved: each process dumped with
    py-spy, then every process recorded for RECORD_S (py-spy record, never pausing it), `at_once`
    processes at a time, each bounded by DUMP_TIMEOUT_S; each thread's schedstat read just before and
    just after the recordings. The dumps come first: the pause a dump makes wakes a blocked thread,
    which must not read as a thread that woke by itself."""
    from console.observe.pyspy import ProcessDump, merged
    from console.observe.pyspy_run import DumpError, dump, record

    chosen = dump_order(processes)
    if not chosen:
        return StacksTaken([], {}, {})
    limit = asyncio.Semaphore(at_once)
    py_spy = config.target.py_spy

    async def bounded(work):
        async with limit:
            return await work

    dumped = await asyncio.gather(
        *(bounded(dump(target, p.pid, py_spy=py_spy, timeout=DUMP_TIMEOUT_S)) for p in chosen), return_exceptions=True
    )
    alive = [p for p, result in zip(chosen, dumped) if isinstance(result, ProcessDump)]
    pids = [p.pid for p in alive]
    before = await read_timeslices(target, pids) if pids else {}
    recorded = list(await asyncio.gather(
        *(bounded(record(target, p.pid, py_spy=py_spy, timeout=DUMP_TIMEOUT_S)) for p in alive), return_exceptions=True
    ))
    # A main thread seen on the CPU in one place only: a long call, or a loop whose other frames are
    # short (a GPU-bound loop waits in its .item()); one more recording tells them apart.
    dump_of = {p.pid: result for p, result in zip(chosen, dumped) if isinstance(result, ProcessDump)}
    again = [i for i, (p, samples) in enumerate(zip(alive, recorded)) if _one_place(dump_of[p.pid], samples)]
    more = await asyncio.gather(
        *(bounded(record(target, alive[i].pid, py_spy=py_spy, timeout=DUMP_TIMEOUT_S)) for i in again),
        return_exceptions=True,
    )
    for i, samples in zip(again, more):
        if isinstance(samples, list) and isinstance(first := recorded[i], list):
            recorded[i] = merged(first, samples)
    after = await read_timeslices(target, pids) if pids else {}
    for result in (*dumped, *recorded):
        if not isinstance(result, (ProcessDump, DumpError, list)):
            raise result
    return StacksTaken(
        dumps=[(p, result) for p, result in zip(chosen, dumped) if isinstance(result, (ProcessDump, DumpError))],
        recorded={p.pid: samples for p, samples in zip(alive, recorded) if isinstance(samples, list)},
        woke={tid: after[tid] - slices for tid, slices in before.items() if tid in after},
    )


def _one_place(dumped: ProcessDump | DumpError, recorded: list[ThreadSamples] | BaseException) -> bool:
    from console.observe.pyspy import ProcessDump, main_thread, on_the_cpu_in_one_place

    if not isinstance(dumped, ProcessDump) or not isinstance(recorded, list):
        return False
    main = main_thread(dumped)
    return main is not None and on_the_cpu_in_one_place(next((s for s in recorded if s.tid == main.thread_id), None), main)


def timeslices_script(pids: list[int]) -> str:
    """Bash printing `PID TID SLICES` for every thread of `pids`: /proc's count of times each was scheduled."""
    listed = " ".join(str(int(pid)) for pid in pids)
    return (
        f"for p in {listed}; do for t in /proc/$p/task/*; do "
        'read -r _ _ n < "$t/schedstat" 2>/dev/null && echo "$p ${t##*/} $n"; done; done; true'
    )


def parse_timeslices(text: str) -> dict[int, int]:
    """Thread id → times scheduled, from timeslices_script's output (a line that does not parse is left out)."""
    found = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and all(word.isdigit() for word in words):
            found[int(words[1])] = int(words[2])
    return found


async def read_timeslices(target: Target, pids: list[int]) -> dict[int, int]:
    """How often each thread of `pids` has been scheduled so far (none when /proc cannot be read)."""
    try:
        result = await target.run(timeslices_script(pids), DUMP_TIMEOUT_S, login=False)
    except TargetError:
        return {}
    return parse_timeslices(result.stdout)


def with_dumps(
    evidence: Evidence,
    dumps: list[tuple[ProcessReading, ProcessDump | DumpError]],
    *,
    recorded: dict[int, list[ThreadSamples]] | None = None,
    woke: dict[int, int] | None = None,
    busy_pct: float = StallConfig().cpu_idle_pct,
) -> Evidence:
    """`evidence` with each process's dump summarised, or why none could be taken (pure); with
    `recorded` (pid → what py-spy record saw) and `woke` (tid → times scheduled meanwhile), how each
    thread moved (a thread over `busy_pct` CPU in the sampling window was on the CPU)."""
    from console.observe.pyspy import ProcessDump

    stacks: list[StackSummary] = []
    failures: list[str] = []
    for process, result in dumps:
        if isinstance(result, ProcessDump):
            samples = None if recorded is None else recorded.get(process.pid, [])
            stacks += summarise(result, process, samples, woke or {}, busy_pct)
        elif result.code in ("no_such_process", "unsupported_python") and process.role not in ("rank", "main"):
            continue  # a worker that ended meanwhile, or a child that is not Python (a shell, MPI's orted)
        else:
            failures.append(f"{process.label}: {result}" if process.label else str(result))
    if not stacks:
        return replace(evidence, stack_error=failures[0] if failures else "no process of the run could be dumped")
    return replace(evidence, stacks=tuple(stacks), stacks_missing=tuple(failures))


def summarise(
    process: ProcessDump,
    reading: ProcessReading | None = None,
    recorded: list[ThreadSamples] | None = None,
    woke: dict[int, int] | None = None,
    busy_pct: float = StallConfig().cpu_idle_pct,
) -> tuple[StackSummary, ...]:
    """One StackSummary per group of identical threads of a py-spy dump, most common first.

    `reading`: the process as sampled, for its place in the run (label, role, rank, parent) and CPU.
    `recorded`: what py-spy record saw of its threads, and `woke` how often each was scheduled
    meanwhile: how each moved (a group of identical threads moved when one of them did).
    """
    from console.observe.pyspy import (
        MOTIONS, classify_wait, collective_call, group_identical, main_thread, stack_signature, thread_motion, where,
    )

    main = main_thread(process)
    by_tid = {samples.tid: samples for samples in recorded or ()}
    busy = {t.tid for t in (reading.thread_cpu if reading is not None else ()) if (t.cpu_pct or 0.0) > busy_pct}
    out = []
    for count, thread in group_identical(process.threads):
        wait = classify_wait(thread)
        motion = None
        if recorded is not None:
            alike = [t for t in process.threads if stack_signature(t) == stack_signature(thread)]
            seen = [thread_motion(by_tid.get(t.thread_id), t, (woke or {}).get(t.thread_id), t.thread_id in busy) for t in alike]
            motion = min((m for m in seen if m is not None), key=MOTIONS.index, default=None)
        out.append(
            StackSummary(
                pid=process.pid,
                tid=thread.thread_id,
                name=thread.name or str(thread.thread_id),
                idle=not thread.active,
                wait=None if wait in ("running", "unknown") else wait,
                where=where(thread),
                count=count,
                main=main is not None and thread.thread_id == main.thread_id,
                signature=stack_signature(thread),
                collective=collective_call(thread),
                label=reading.label if reading is not None else "",
                role=reading.role if reading is not None else "",
                rank=reading.rank if reading is not None else None,
                parent=reading.ppid if reading is not None else None,
                cpu_pct=reading.cpu_pct if reading is not None else None,
                motion=motion,
                run_env=reading.run_env if reading is not None else (),
            )
        )
    return tuple(out)
