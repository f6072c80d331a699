"""`pulse watch --slurm-job ID` (or `--hosts A,B --metrics HOST:PORT`): a fleet's watch, without the UI.

The fleet console's Fleet (a Monitor per node) is judged once a second, as its screen is, and each
node's verdict change is printed. With `--metrics HOST:PORT` each node's snapshot is published with
a `node` label beside `run` and `host` (console/journal/metrics.py).

A Slurm job's watch is the job's as `pulse watch` is a run's. The job's verdict (its nodes' worst,
console.fleet.fleet.job_verdict), held steady as one run's (console.diagnose.steady), is printed,
journaled and alerted on, and every action on the job journaled, in the job's journal
(console.journal.store.journal_path: the job's ID and the host Slurm is asked on; `pulse journal
--slurm-job ID` and `pulse report --slurm-job ID` read it); the metrics
add the job's own series, its `node` label empty (absent, to Prometheus): its verdict, its automatic
restarts, its alerts.
Its restart policy (`--restart-on V[,V…] --max-restarts N`, or `[watch]`) acts as one run's does
(console/commands/auto_restart.py: RestartActor, the part both share):

1. a full look at every node with every rank's stacks (console.fleet.fleet_diagnose.diagnose_fleet
   with dump_ranks="always"); the job's verdict from it must still be one the policy restarts on;
2. that look saved in the job's journal: the job's verdict, its ranks grouped by stack, and every
   node's verdict, processes, stacks, last log lines and GPUs;
3. the restart is `pulse restart --slurm-job ID --yes` itself (console.commands.fleet_actions
   .restart_job): the same plan (requeue, or resubmit for `[run] launch = "sbatch …"`) and guards,
   the job's restart lock, the audit records, the verify on every node. A job Slurm restarted since the look (its restart
   count grew: another watch, a person) is left alone;
4. the outcome journaled and alerted; once Slurm runs the job again the watch follows it: its nodes
   formed again (under a resubmit's new ID; the journal stays the one of the ID the watch was given).

A host list (`--hosts`) has no Slurm to restart through and keeps no journal: its watch serves its
nodes' metrics and prints their verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from dataclasses import replace

from console.alerts import sinks_for, tty_writer
from console.commands.actions import ActionReport
from console.commands.auto_restart import RestartActor, restart_args
from console.commands.fleet_actions import restart_job
from console.commands.journal import policy_refusal
from console.config import Config
from console.diagnose import Verdict
from console.fleet.fleet import Fleet, FleetError
from console.fleet.fleet_actions import restarted_job
from console.fleet.fleet_diagnose import diagnose_fleet
from console.journal.metrics import MetricsError, RunSnapshot, SnapshotCollector, serve_metrics, snapshot_of
from console.journal.policy import Decision
from console.journal.recorder import VerdictRecorder
from console.journal.store import JournalError
from console.journal.watch import JournalWatch
from console.remote.target import TargetError
from console.targets import fleet_size

EXIT_OK = 0
EXIT_BAD = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_fleet_watch(config: Config, args: argparse.Namespace) -> int:
    """Watch the fleet until SIGTERM or SIGINT (exit 0); a policy that cannot run, a fleet, a journal or an
    address that cannot be had is one line, exit 2."""
    if refused := policy_refusal(config, args):
        return _error(refused)
    try:
        return asyncio.run(_fleet_watch(config))
    except JournalError as exc:
        return _error(str(exc))


def _error(text: str) -> int:
    print(f"pulse watch: {text}", file=sys.stderr)
    return EXIT_BAD


def _say(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", flush=True)


class Following:
    """The fleet a watch judges now: the job's nodes, formed again once a restart has Slurm run the job again."""

    def __init__(self, config: Config, fleet: Fleet) -> None:
        self.config = config
        self.fleet = fleet

    async def follow(self, job_id: str) -> None:
        """Judge the nodes of `job_id` from now on (the same ID after a requeue, a new one after a resubmit):
        the new fleet started first, then the old one closed; when it cannot be formed the old one stays, and says so."""
        try:
            fleet = await Fleet.open(replace(self.config, target=replace(self.config.target, slurm_job=job_id)))
        except FleetError as exc:
            _say(f"job {job_id}: its nodes cannot be watched: {exc}")
            return
        await fleet.start()
        old, self.fleet = self.fleet, fleet
        _say(f"following job {job_id} on {len(fleet.nodes)} node(s): {', '.join(n.name for n in fleet.nodes)}")
        await old.close()


class JobRestart(RestartActor):
    """The restart policy of a Slurm job's watch: its look is every node's, its restart the job's through Slurm."""

    def __init__(self, config: Config, watch: JournalWatch, following: Following) -> None:
        super().__init__(config, watch)
        self.following = following

    def job_id(self) -> str:
        job = self.following.fleet.job
        assert job is not None  # a Slurm job's fleet
        return job.job_id

    def restart_command(self) -> str:
        return f"pulse restart --slurm-job {self.job_id()} --yes"

    async def _restart(self, decision: Decision, verdict: Verdict) -> None:
        fleet = self.following.fleet
        assert fleet.job is not None  # a Slurm job's fleet
        self._say(f"{decision.text}: looking at every node first")
        try:
            diagnosis = await diagnose_fleet(fleet.nodes, job=fleet.job, dump_ranks="always")
        except TargetError as exc:  # a node's link lost while its stacks were taken (its first look is bounded)
            self._look_failed(decision, verdict, exc)
            return
        fresh = diagnosis.verdict()
        self.watch.verdict(fresh)
        if self._declined(decision, fresh):
            return
        saved = diagnosis.saved_evidence({n.name: [line.text for line in n.state.current_lines()] for n in fleet.nodes})
        stacks = sum(len(node.get("stacks", ())) for node in saved["nodes"])
        self._saved(decision, {"job_id": fleet.job.job_id, **saved},
                    f"{len(saved['nodes'])} node(s), {stacks} stack lines, {len(diagnosis.groups)} stack groups")
        job = replace(self.config, target=replace(self.config.target, slurm_job=fleet.job.job_id))
        report = ActionReport()
        await self._restarted(fresh, restart_job(job, restart_args(), judged_restarts=fleet.job.restarts, report=report,
                                                 on_record=self.watch.record_action), report)
        again = next((found for event in report.steps if (found := restarted_job(event)) is not None), None)
        if again is not None:
            await self.following.follow(again)


async def _fleet_watch(config: Config) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stopped_by: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        stopped_by.append(sig.name)
        stop.set()

    collector, endpoint, where = SnapshotCollector(), None, ""
    if config.watch.metrics:  # first: an address it cannot listen on is refused before anything is opened
        try:
            endpoint, url = serve_metrics(collector, config.watch.metrics)
        except MetricsError as exc:
            return _error(str(exc))
        where = f"; metrics on {url}"
    try:
        try:
            fleet = await Fleet.open(config)
        except FleetError as exc:
            return _error(str(exc))
        following = Following(config, fleet)
        watch: JournalWatch | None = None
        try:
            if config.target.slurm_job:
                journal = JournalWatch.open_journal(config)
                watch = JournalWatch(config, journal, VerdictRecorder(journal), sinks_for(config.alerts, tty_writer(sys.stdout)))
                watch.journal.add("watch", f"pulse watch started on {fleet_size(config.target)} (pid {os.getpid()})")
                where = f"; journal {journal.path}{where}"
            actor = JobRestart(config, watch, following) if watch is not None and config.watch.restart_on else None
            for sig in STOP_SIGNALS:
                loop.add_signal_handler(sig, on_signal, sig)
            print(f"pulse watch: {fleet_size(config.target)}: {len(fleet.nodes)} nodes{where}", file=sys.stderr, flush=True)
            try:
                await fleet.start()
                await _watch_until(stop, following, config, collector, watch, actor)
            finally:
                for sig in STOP_SIGNALS:
                    loop.remove_signal_handler(sig)
                if actor is not None:
                    await actor.stop()
        finally:
            await following.fleet.close()
            if watch is not None:
                watch.journal.add("watch", f"pulse watch stopped ({', '.join(stopped_by) or 'ended'})")
                await watch.close()
    finally:
        if endpoint is not None:
            endpoint.stop()
    return EXIT_OK


async def _watch_until(stop: asyncio.Event, following: Following, config: Config, collector: SnapshotCollector,
                       watch: JournalWatch | None, actor: RestartActor | None) -> None:
    """Once a second: each node named and printed when it changed; the job's verdict journaled, alerted on
    and given to the policy (a Slurm job's watch); the snapshots published."""
    shown: dict[str, tuple[str | None, float | None]] = {}
    job_shown: tuple[str | None, float | None] = (None, None)
    job_labels = (("run", config.run.name), ("host", config.target.host or socket.gethostname()))
    while not stop.is_set():
        fleet = following.fleet
        fleet.refresh()
        snapshots: list[RunSnapshot] = []
        for node in fleet.nodes:
            name = node.verdict.name if node.verdict is not None else None
            if name != shown.setdefault(node.name, (None, None))[0]:
                shown[node.name] = (name, time.time())
                if node.verdict is not None:
                    _say(f"{node.name}: {name}: {node.verdict.summary}")
            labels = (("run", config.run.name), ("host", node.config.target.host or node.name), ("node", node.name))
            snapshots.append(snapshot_of(node.state, labels, verdict=name, verdict_since=shown[node.name][1]))
        if watch is not None:
            fresh = fleet.verdict()
            if fresh is not None:
                verdict = watch.held(fresh)  # a recovery said once it holds, as one run's watch says it
                if verdict.name != job_shown[0]:
                    job_shown = (verdict.name, time.time())
                    _say(f"{fleet_size(fleet.config.target)}: {verdict.name}: {verdict.summary}")
                if actor is not None:
                    actor.consider(verdict)
            snapshots.append(RunSnapshot(job_labels, verdict=job_shown[0], verdict_since=job_shown[1],
                                         restarts=actor.restarts if actor is not None else 0, alerts=len(watch.alerter.sent)))
        collector.publish(snapshots)
        try:
            async with asyncio.timeout(1.0):
                await stop.wait()
        except TimeoutError:
            pass
