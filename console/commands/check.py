"""`pulse check`: one look at the run, a verdict, an exit code — for scripts and cron.

    pulse check CONFIG|flags [--json] [--stall-after SECONDS]

Exit status: 0 healthy; 1 any other verdict (slow, buffered, hung, dead, oom, diverged,
launch_failed, gpu_contexts_unseen, stopped, unknown); 2 the target is unreachable or the config is
bad (one line on stderr says which and what to do).

With `--json` one object is printed (keys always present; null where nothing is known):

    verdict        string: healthy | slow | buffered | hung | dead | oom | diverged |
                   launch_failed | gpu_contexts_unseen | stopped | unknown
    summary        string: the verdict in one sentence
    evidence       [string]: the observations behind it, e.g.
                   "pid 447 CPU 0.0% over 1.5 s, state S, 18 threads: python3 -u hung.py",
                   "log silent 312 s (threshold 300 s)"
    next_step      string: what to do; `step` the action that does it: dump | log |
                   restart | warmup | continue (the console's p, l, R, w, k) or null
    target         string: where the run was looked at ("local", "pulse-test/pct 200", ...)
    gpu_source     "nvml" | "nvidia-smi" | "none";  gpu_error: string or null
    gpus           [{index, name, uuid, memory_used_mib, memory_total_mib, utilization_pct,
                     temperature_c, power_w, power_limit_w, processes: [{pid, used_mib, name}]}]
                   the run's GPUs ([gpus] roles), all GPUs when none are configured; the
                   processes' PIDs are the driver's (the host's, even inside a container)
    in_pid_namespace  bool: the target's view is a PID namespace (a container)
    processes      [{pid, ppid, state, cpu_pct, threads, rss_mib, elapsed_s, cmdline,
                     stdout, unbuffered, role, rank, label, gpus}]   cpu_pct: over the
                   sampling window, not ps's lifetime average; stdout: where fd 1 points;
                   unbuffered: -u or PYTHONUNBUFFERED seen (null: unreadable); role:
                   launcher | rank | worker | child | main | shell | "" (unknown); rank: the
                   rank it is or serves (RANK / LOCAL_RANK in its environment) or null; label:
                   e.g. "launcher (torchrun)", "rank 1 · GPU 1", "worker of rank 1"; gpus: the
                   GPU indices the driver lists it on
    process_error  string or null
    window_s       number: seconds between the two samples
    log            {path, exists, size, growth_bytes, seconds_since_growth,
                    problem_kinds: [string], problems: [{kind, text}]}  (the problems in
                   the log's tail, newest last, each once by the line that names it: a traceback
                   by its exception line; kind: the gravest of its lines, as `pulse classify` names them)
    throughput     {metric, current, baseline, ratio} or null (current: median of the newest
                   values in the log; ratio: current / baseline, null without a baseline)
    stacks         [{pid, tid, name, idle, wait, where, count, label, main, collective, motion}]
                   or null when no dump was taken (one is taken only when the log shows no
                   progress: then every rank and worker is dumped and recorded for 1 s);
                   label: the process's role as in processes; main: its main thread;
                   collective: the collective it is in (all_reduce, barrier, ...,
                   "synchronize") or null; motion: how it moved while recorded: moving,
                   paced (sleeps in its own loop and wakes), busy (on the CPU in one place),
                   waiting, still, or null (not recorded); stack_error: string or null (why
                   no dump could be taken, with py-spy's advice)
    dead_threads   [{name, exception}]: threads whose uncaught exception reached the log
    nccl           [string]: what NCCL's watchdog lines and flight-recorder dumps say (the
                   collective that timed out, the ranks that never joined it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

from console.config import Config, StallConfig
from console.diagnose import Evidence, Verdict, diagnose
from console.verdicts import is_problem
from console.evidence import gather
from console.journal.store import read_rate_histories
from console.model import GpuReading, ProcessReading
from console.observe.nccl import nccl_lines
from console.observe.roles import fold_helpers
from console.remote.connect import make_target
from console.remote.target import TargetError
from console.state import RATE_UNITS

EXIT_HEALTHY = 0
EXIT_PROBLEM = 1
EXIT_UNREACHABLE = 2


def run_check(config: Config, args: argparse.Namespace) -> int:
    """`pulse check`: gather, diagnose, report (text, or JSON with --json); the exit status by verdict."""
    if not (config.run.match or config.run.pidfile):
        _error(f"{config.source}: nothing names the run's processes: give --match REGEX or --pidfile (or [run] match)")
        return EXIT_UNREACHABLE
    try:
        label, evidence = asyncio.run(_look(config))
    except TargetError as exc:
        _error(str(exc))
        return EXIT_UNREACHABLE
    verdict = diagnose(evidence, config)
    if getattr(args, "json", False):
        print(json.dumps(report_json(label, evidence, verdict), indent=2))
    else:
        write_report(label, evidence, verdict, sys.stdout)
    return EXIT_PROBLEM if is_problem(verdict.name) else EXIT_HEALTHY


async def _look(config: Config) -> tuple[str, Evidence]:
    target = make_target(config.target)
    try:
        return target.label, await gather(target, config, rate_histories=read_rate_histories(config))
    finally:
        await target.close()


def _error(text: str) -> None:
    print(f"pulse check: {text}", file=sys.stderr)


# -- JSON --------------------------------------------------------------------------------------


def _gpu_json(g: GpuReading) -> dict:
    return {
        "index": g.index,
        "name": g.name,
        "uuid": g.uuid,
        "memory_used_mib": g.memory_used_mib,
        "memory_total_mib": g.memory_total_mib,
        "utilization_pct": g.utilization_pct,
        "temperature_c": g.temperature_c,
        "power_w": g.power_w,
        "power_limit_w": g.power_limit_w,
        "processes": [{"pid": p.pid, "used_mib": p.used_mib, "name": p.name} for p in g.processes],
    }


def _process_json(p: ProcessReading) -> dict:
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "state": p.state,
        "cpu_pct": p.cpu_pct,
        "threads": p.threads,
        "rss_mib": p.rss_mib,
        "elapsed_s": p.elapsed_s,
        "cmdline": p.cmdline,
        "stdout": p.stdout,
        "unbuffered": p.unbuffered,
        "role": p.role,
        "rank": p.rank,
        "label": p.label,
        "gpus": list(p.gpus),
    }


def _throughput(ev: Evidence) -> dict | None:
    if ev.rate_metric is None or ev.rate_now is None:
        return None
    ratio = round(ev.rate_now / ev.rate_baseline, 3) if ev.rate_baseline else None
    return {"metric": ev.rate_metric, "current": ev.rate_now, "baseline": ev.rate_baseline, "ratio": ratio}


def _problem_kinds(ev: Evidence) -> list[str]:
    return sorted({p.kind.value for p in ev.problems})


def report_json(label: str, ev: Evidence, verdict: Verdict) -> dict:
    """The documented `pulse check --json` object (see the module docstring)."""
    stacks = None
    if ev.stacks:
        stacks = [
            {
                "pid": s.pid,
                "tid": s.tid,
                "name": s.name,
                "idle": s.idle,
                "wait": s.wait,
                "where": s.where,
                "count": s.count,
                "label": s.label,
                "main": s.main,
                "collective": s.collective,
                "motion": s.motion,
            }
            for s in ev.stacks
        ]
    return {
        "verdict": verdict.name,
        "summary": verdict.summary,
        "evidence": verdict.evidence,
        "next_step": verdict.next_step,
        "step": verdict.step,
        "target": label,
        "gpu_source": ev.gpu_source,
        "gpu_error": ev.gpu_error,
        "gpus": [_gpu_json(g) for g in ev.gpus],
        "in_pid_namespace": ev.in_pid_namespace,
        "processes": [_process_json(p) for p in ev.processes],
        "process_error": ev.process_error,
        "window_s": ev.window_s,
        "log": {
            "path": ev.log_path,
            "exists": ev.log_exists,
            "size": ev.log_size,
            "growth_bytes": ev.log_growth,
            "seconds_since_growth": ev.log_silent_s,
            "problem_kinds": _problem_kinds(ev),
            "problems": [{"kind": p.kind.value, "text": p.text} for p in ev.problems],
        },
        "throughput": _throughput(ev),
        "stacks": stacks,
        "stack_error": ev.stack_error,
        "dead_threads": [{"name": t.name, "exception": t.exception} for t in ev.dead_threads],
        "nccl": nccl_lines(list(ev.nccl), list(ev.flight)),
    }


# -- text --------------------------------------------------------------------------------------


def _value(value: float | None, unit: str = "", fmt: str = "g") -> str:
    return "?" if value is None else f"{value:{fmt}}{unit}"


def write_report(label: str, ev: Evidence, verdict: Verdict, out: TextIO) -> None:
    """The readable report: GPUs, processes, log, throughput, then the verdict, its evidence and next step."""
    say = lambda text="": print(text, file=out)  # noqa: E731
    say(f"target {label}  (GPUs via {ev.gpu_source}, sampled over {ev.window_s:g} s)")
    say("GPUs:")
    if not ev.gpus:
        say(f"  none read{': ' + ev.gpu_error if ev.gpu_error else ''}")
    for g in ev.gpus:
        pids = ", ".join(str(p.pid) for p in g.processes) or "none"
        say(
            f"  {g.index} {g.name}  util {_value(g.utilization_pct, '%')}  "
            f"mem {_value(g.memory_used_mib)}/{_value(g.memory_total_mib)} MiB  "
            f"{_value(g.temperature_c, ' °C')}  {_value(g.power_w, ' W', '.0f')}/{_value(g.power_limit_w, ' W', '.0f')}  "
            f"pids {pids}" + (f"  FAULT {g.error}" if g.error else "")
        )
    say("processes:")
    if not ev.processes:
        say(f"  none found{': ' + ev.process_error if ev.process_error else ''}")
    for p in fold_helpers(ev.processes, StallConfig().cpu_idle_pct):
        buffering = {True: "unbuffered", False: "buffered", None: "buffering ?"}[p.unbuffered]
        say(
            f"  {p.pid} {p.state}  {p.label or '-'}  cpu {_value(p.cpu_pct, '%')}  {p.threads} thr  "
            f"rss {p.rss_mib:.0f} MiB  up {p.elapsed_s:.0f} s  {p.cmdline}"
        )
        if p.stdout:
            say(f"      stdout → {p.stdout} ({buffering})")
    if ev.log_path is None:
        say("log: none configured")
    elif not ev.log_exists:
        say(f"log: {ev.log_path} (missing)")
    else:
        since = "growing" if ev.log_growth else f"last growth {_value(ev.log_silent_s, ' s', '.0f')} ago"
        kinds = ", ".join(_problem_kinds(ev)) or "none"
        say(f"log: {ev.log_path}  {ev.log_size} bytes, {since}; problems: {kinds}")
    rate = _throughput(ev)
    if rate is not None:
        unit = RATE_UNITS.get(rate["metric"], rate["metric"])
        base = f" (baseline {rate['baseline']:,.0f}, {rate['ratio']:.0%})" if rate["ratio"] is not None else ""
        say(f"throughput: {rate['current']:,.0f} {unit}{base}")
    say()
    say(f"verdict: {verdict.name.upper()} — {verdict.summary}")
    for line in verdict.evidence:
        say(f"  - {line}")
    say(f"next: {verdict.next_step}")
