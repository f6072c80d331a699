"""Gather the evidence for one diagnosis from a target (the I/O half of console.diagnose).

In parallel: two samples `window_s` apart from the sampling agent (processes with CPU% by
delta, GPUs with each process's SM % on the second, the log's stat at both ends of the
window) and the log's last bytes (problem kinds, throughput, dead threads, NCCL lines),
unless the console already follows the log into a RunState. When NCCL's watchdog spoke, the
ranks' flight-recorder dumps are read. Then, only when the run looks stuck (silent, idle or
busy) or its progress is drawn only on a terminal (its log cannot tell), every rank and worker
is dumped with py-spy in parallel, each summarised per thread.
A key press to a verdict stays under ~3 s.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import statistics
import time
from dataclasses import replace
from typing import Literal

from console.config import Config
from console.diagnose import DeadThread, Evidence, ProblemLine, StackSummary, diagnose, lifetime_write_interval_s
from console.model import LogLine, ProcessReading, Sample
from console.observe.follow import MAX_LINE_BYTES, log_pattern
from console.observe.lines import classify_line
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
from console.observe.pyspy import (
    ProcessDump,
    classify_wait,
    collective_call,
    group_identical,
    main_thread,
    stack_signature,
    where,
)
from console.observe.pyspy_run import DumpError, dump
from console.observe.sampler import gpu_processes_unseen, sample_once
from console.observe.textsafe import sanitize
from console.remote.shell import quote
from console.remote.target import Target, TargetError
from console.state import RunState

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
#: Verdicts that a stack dump can explain (a busy run may only spin in a wait).
_STUCK = ("hung", "unknown", "buffered")


async def gather(
    target: Target,
    config: Config,
    *,
    window_s: float | None = None,
    follower_state: RunState | None = None,
    dump_stacks: DumpStacks = "auto",
    launched_at: float | None = None,
) -> Evidence:
    """One look at the run on `target`: what `console.diagnose.diagnose` needs.

    `follower_state`: the console's RunState, when it already follows the log (its problem
    lines since the last launch and its throughput series are used; no tail is read).
    `launched_at`: the target-clock time of the console's last launch, if any.
    `dump_stacks`: 'auto' dumps only when the run looks stuck. TargetError when the target
    cannot be sampled.
    """
    window_s = config.stall.sample_window_s if window_s is None else window_s
    sampling = asyncio.ensure_future(sample_once(target, config, window_s, process_utilization=True))
    if follower_state is None and config.run.log:
        tail = asyncio.ensure_future(read_tail_text(target, config, timeout=window_s + TAIL_TIMEOUT_S))
    else:
        tail = None
    try:
        first, last = await sampling
        tail_text = await tail if tail is not None else ""
    finally:
        if tail is not None:  # also when sampling failed first: the tail's own error is collected, not leaked
            tail.cancel()
            await asyncio.gather(tail, return_exceptions=True)

    if follower_state is not None:
        evidence = from_samples(first, last, config, follower_state, timed=True, launched_at=launched_at)
    else:
        state = RunState()
        state.add_lines(tail_lines(tail_text, config, time.monotonic()))
        evidence = with_lifetime_rhythm(from_samples(first, last, config, state, timed=False, launched_at=launched_at), tail_text)

    if evidence.nccl:
        evidence = replace(evidence, flight=await read_flight_records(target, evidence.processes, timeout=TAIL_TIMEOUT_S))
    if dump_stacks == "never" or not evidence.processes:
        return evidence
    # A log that cannot show progress (drawn only on a terminal) leaves the stacks to tell work from a spinning wait.
    if dump_stacks == "auto" and diagnose(evidence, config).name not in _STUCK and evidence.terminal_only_progress is None:
        return evidence
    return await with_stacks(target, config, evidence)


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
    if evidence.log_write_interval_s is not None or evidence.log_silent_s is None:
        return evidence
    lives = [p.elapsed_s for p in evidence.processes if p.elapsed_s is not None and p.state not in ("Z", "X")]
    if not lives:
        return evidence
    written_for = max(lives) - evidence.log_silent_s
    interval = lifetime_write_interval_s(tail, evidence.log_size, written_for)
    if interval is None:
        return evidence
    return replace(evidence, log_write_interval_s=round(interval, 3), log_rhythm_estimated=True)


def tail_lines(tail: str, config: Config, now: float) -> list[LogLine]:
    """The lines of a log's tail as tail_script printed it, made safe and classified, all read at `now`."""
    raws = tail.split("\n")
    if raws and not raws[-1]:
        raws.pop()
    out = []
    for number, raw in enumerate(raws, 1):
        text, cut = sanitize(raw, MAX_LINE_BYTES)
        out.append(LogLine(number, text, classify_line(text, config.metrics.patterns), cut, now))
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
        **_log_fields(first, last, config, launched_at),
        **_line_fields(lines, config, timed),
    )
    return ev


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
    # Each problem once, by the line that names it (a traceback's exception line, not "Traceback").
    problems = tuple(
        ProblemLine(p.kind, p.name.text, round(now - p.name.time, 1) if timed else None, p.thread)
        for p in spans[-MAX_PROBLEMS:]
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
        "dead_threads": dead,
        "nccl": tuple(nccl),
        "terminal_only_progress": state.terminal_only_progress,
    }
    if timed:
        fields["log_write_interval_s"] = state.write_interval_s()
    if metric is None or not values:
        return fields
    fields.update(rate_metric=metric, rate_now=statistics.median(values), rate_baseline=config.metrics.baseline(metric))
    if timed and state.last_rate_at is not None:
        fields.update(rate_silent_s=round(now - state.last_rate_at, 1), rate_interval_s=state.rate_interval_s())
    return fields


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


async def with_stacks(target: Target, config: Config, evidence: Evidence) -> Evidence:
    """`evidence` with every rank's and worker's threads summarised, all dumped with py-spy in
    parallel (DUMPS_AT_ONCE at a time, each bounded by DUMP_TIMEOUT_S); why none could be, if so."""
    chosen = dump_order(evidence.processes)
    if not chosen:
        return evidence
    limit = asyncio.Semaphore(DUMPS_AT_ONCE)

    async def one(process: ProcessReading) -> ProcessDump:
        async with limit:
            return await dump(target, process.pid, py_spy=config.target.py_spy, timeout=DUMP_TIMEOUT_S)

    results = await asyncio.gather(*(one(p) for p in chosen), return_exceptions=True)
    for result in results:
        if not isinstance(result, (ProcessDump, DumpError)):
            raise result
    return with_dumps(evidence, list(zip(chosen, results)))


def with_dumps(evidence: Evidence, dumps: list[tuple[ProcessReading, ProcessDump | DumpError]]) -> Evidence:
    """`evidence` with each process's dump summarised, or why none could be taken (pure)."""
    stacks: list[StackSummary] = []
    failures: list[str] = []
    for process, result in dumps:
        if isinstance(result, ProcessDump):
            stacks += summarise(result, process)
        elif result.code in ("no_such_process", "unsupported_python") and process.role not in ("rank", "main"):
            continue  # a worker that ended meanwhile, or a child that is not Python (a shell, MPI's orted)
        else:
            failures.append(f"{process.label}: {result}" if process.label else str(result))
    if not stacks:
        return replace(evidence, stack_error=failures[0] if failures else "no process of the run could be dumped")
    return replace(evidence, stacks=tuple(stacks), stacks_missing=tuple(failures))


def summarise(process: ProcessDump, reading: ProcessReading | None = None) -> tuple[StackSummary, ...]:
    """One StackSummary per group of identical threads of a py-spy dump, most common first.

    `reading`: the process as sampled, for its place in the run (label, role, rank, parent) and CPU.
    """
    main = main_thread(process)
    out = []
    for count, thread in group_identical(process.threads):
        wait = classify_wait(thread)
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
            )
        )
    return tuple(out)
