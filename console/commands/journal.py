"""`pulse watch`, `pulse journal` and `pulse report`: the journal without the console.

    pulse watch CONFIG            monitor + diagnosis with no UI: journal and alerts; prints
                                  each verdict change; SIGTERM or SIGINT stop it cleanly
        [--restart-on V,… --max-restarts N …]   the restart policy (console/commands/auto_restart.py)
        [--metrics HOST:PORT]                     Prometheus metrics (console/journal/metrics.py)
    pulse journal CONFIG [--since 6h] [--json]
    pulse report CONFIG [--since 24h]   Markdown post-mortem of the window
    (a Slurm job's, `--slurm-job ID`: its watch is console/commands/fleet_watch.py; these read its journal)

Exit status: 0 done (watch: stopped by SIGTERM/SIGINT after committing the journal);
2 a bad config, no journal to read, or a journal that cannot be opened, a restart policy that
cannot run (with --read-only, without [run] launch, an audit log that cannot be written), or a
metrics address that cannot be listened on (one line on stderr).
`pulse watch` does not exit on its own: a lost connection is retried and journaled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from console.config import Config
from console.journal.report import Window, journal_json, journal_lines, parse_since, report_markdown
from console.journal.store import JournalError, journal_path, last_demo_pointer, open_for_reading, read_window

EXIT_OK = 0
EXIT_BAD = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _error(command: str, text: str) -> int:
    print(f"pulse {command}: {text}", file=sys.stderr)
    return EXIT_BAD


def run_watch(config: Config, args: argparse.Namespace) -> int:
    if not (config.run.match or config.run.pidfile or config.run.log):
        return _error("watch", f"{config.source}: nothing names the run: give [run] match, pidfile or log (or --match/--log)")
    if refused := policy_refusal(config, args):
        return _error("watch", refused)
    try:
        return asyncio.run(_watch(config))
    except JournalError as exc:
        return _error("watch", str(exc))


def policy_refusal(config: Config, args: argparse.Namespace) -> str | None:
    """Why the restart policy cannot run as given (one line), before the watch starts; None when it can or there is none."""
    from console.actions.audit import AuditLog, audit_refusal
    from console.journal.policy import policy_problem

    if problem := policy_problem(config.watch):
        return problem
    if not config.watch.restart_on:
        return None
    if getattr(args, "read_only", False):
        return "--read-only: the restart policy (--restart-on, [watch] restart_on) restarts the run; drop one of them"
    if not config.run.launch and not config.target.slurm_job:  # a Slurm job without one is requeued
        return f"{config.source}: the restart policy needs [run] launch (or --launch): the command that starts the run"
    return audit_refusal("restart", AuditLog(config.audit_log))


async def _watch(config: Config) -> int:
    from console.alerts import tty_writer
    from console.commands.auto_restart import AutoRestart
    from console.evidence import RunLook
    from console.journal.metrics import MetricsError, SnapshotCollector, serve_metrics, snapshot_of
    from console.journal.watch import CHEAP_DIAGNOSIS_S, RunWatch
    from console.monitor import Monitor
    from console.remote.connect import make_target
    from console.remote.target import TargetError
    from console.state import RunState

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stopped_by: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped_by.append(sig.name)
        stop.set()

    collector, endpoint, url = SnapshotCollector(), None, None
    if config.watch.metrics:  # first: an address it cannot listen on is refused before anything is opened
        try:
            endpoint, url = serve_metrics(collector, config.watch.metrics)
        except MetricsError as exc:
            return _error("watch", str(exc))
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    state = RunState()
    try:
        watch = RunWatch.open(config, state, terminal_write=tty_writer(sys.stdout))
    except JournalError:
        if endpoint is not None:
            endpoint.stop()
        raise
    watch.journal.add("watch", f"pulse watch started (pid {os.getpid()})")
    target = make_target(config.target)
    monitor = Monitor(config, target, state)
    look = RunLook(target, config, state)
    auto = AutoRestart(config, watch, look)
    labels = (("run", config.run.name), ("host", config.target.host or socket.gethostname()))
    print(f"pulse watch: {target.label}: journal {watch.journal.path}", file=sys.stderr, flush=True)
    if url is not None:
        print(f"pulse watch: metrics on {url}", file=sys.stderr, flush=True)
    await monitor.start()
    next_diagnosis = loop.time() + CHEAP_DIAGNOSIS_S
    shown, shown_since = None, None
    try:
        while not stop.is_set():
            try:
                async with asyncio.timeout(1.0):
                    await stop.wait()
            except TimeoutError:
                pass
            watch.observe()
            # Each second until the first verdict and while a quiet log nears the floor, and when the
            # restart policy's wait is over.
            if loop.time() >= next_diagnosis or shown is None or look.quiet or auto.due:
                next_diagnosis = loop.time() + CHEAP_DIAGNOSIS_S
                try:
                    verdict = await watch.judge(look)
                except TargetError as exc:
                    watch.journal.add("watch", f"a look at the run failed: {exc}")
                    verdict = None
                if verdict is not None and verdict.name != shown:
                    shown, shown_since = verdict.name, time.time()
                    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {verdict.name}: {verdict.summary}", flush=True)
                if verdict is not None:
                    auto.consider(verdict)
            collector.publish([snapshot_of(state, labels, verdict=shown, verdict_since=shown_since,
                                           restarts=auto.restarts, alerts=len(watch.alerter.sent))])
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        await auto.stop()
        if endpoint is not None:
            endpoint.stop()
        await monitor.stop()
        await target.close()
        watch.observe()
        watch.journal.add("watch", f"pulse watch stopped ({', '.join(stopped_by) or 'ended'})")
        await watch.close()
    return EXIT_OK


def read_path(config: Config, args: argparse.Namespace) -> Path:
    """The journal a read command reads: the config's run's, or with --demo the last `pulse demo`'s."""
    if not getattr(args, "demo", False):
        return journal_path(config)
    pointer = last_demo_pointer()
    try:
        return Path(pointer.read_text().strip())
    except OSError:
        raise JournalError(f"{pointer}: no demo has run yet here: `pulse demo` first") from None


def _window(path: Path, since: str):
    """(journal path, Window) for a read command; JournalError / ValueError say what is wrong."""
    seconds = parse_since(since)
    conn = open_for_reading(path)
    try:
        end = time.time()
        return path, Window(end - seconds, end, *read_window(conn, end - seconds))
    finally:
        conn.close()


def run_journal(config: Config, args: argparse.Namespace) -> int:
    try:
        path, window = _window(read_path(config, args), args.since)
    except (JournalError, ValueError) as exc:
        return _error("journal", str(exc))
    if args.json:
        print(json.dumps(journal_json(window, str(path)), indent=2))
    else:
        print(f"journal {path}", file=sys.stderr)  # which run's: a journal is one run's, keyed by its target, log and match
        print("\n".join(journal_lines(window)))
    return EXIT_OK


def run_report(config: Config, args: argparse.Namespace) -> int:
    try:
        path, window = _window(read_path(config, args), args.since)
    except (JournalError, ValueError) as exc:
        return _error("report", str(exc))
    print(f"journal {path}", file=sys.stderr)
    container = f" ({config.target.container.describe()})" if config.target.container else ""
    job = f"Slurm job {config.target.slurm_job} on " if config.target.slurm_job else ""
    sys.stdout.write(report_markdown(window, host=job + (config.target.host or "this machine") + container, run=config.run.name))
    return EXIT_OK

