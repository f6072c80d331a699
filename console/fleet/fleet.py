"""A fleet: the run's nodes, each a Target with its own Monitor and RunState.

The nodes come from a Slurm job (`[target] slurm_job`: the job's node list through
`scontrol show hostnames`) or from a plain list (`[target] hosts`). Each node is reached the
way a single host is (`make_target`: one SSH connection per node, with the user's
~/.ssh/config and its ProxyJump), or with `srun --jobid ID --overlap` through the login
node when SSH to compute nodes is not allowed. Per node there is one long-lived sampling
agent and one log follower, so the cost per node stays flat and polls never overlap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from console.config import Config
from console.diagnose import Evidence, Verdict, baseline_of, diagnose
from console.verdicts import kind, severity
from console.evidence import state_evidence
from console.fleet.slurm import SlurmClient
from console.fleet.slurm_text import SlurmError, SlurmJob, expand_filename
from console.model import ConnectionStatus
from console.monitor import LogPacing, Monitor
from console.observe.roles import RUN_ROLES
from console.remote.connect import make_target
from console.remote.srun import SrunTarget
from console.remote.target import Target, split_user
from console.slowness import Baseline, against_fastest, slowest_of
from console.state import RATE_UNITS, RunState
from console.units import format_duration

CLOSE_TIMEOUT_S = 10.0
#: Samples a second the console takes from all nodes together at most. A fleet of up to this many
#: nodes is sampled at [gpus] poll_s; a larger one less often per node (256 nodes: every 4 s), so
#: the console's cost stops growing with the fleet (README "Performance": a sample costs it about
#: 1 ms, most of it SSH and JSON).
FLEET_SAMPLES_PER_S = 64.0
#: A node's log is read at most once a second (each read dated by its own writes: the run's rhythm,
#: which sets how soon silence is a stall, is kept) and sent as often as the node is sampled, what
#: was read meanwhile in one SSH message: the messages stop growing with the fleet as its samples do.
NODE_LOG_READ_S: float | None = 1.0
"""None: each write sent as it comes, as in a run's console (scripts/bench_fleet.py --unpaced)."""


def paced(config: Config, nodes: int) -> Config:
    """`config` with each node's sampling interval stretched so that `nodes` stay within FLEET_SAMPLES_PER_S."""
    poll_s = max(config.gpus.poll_s, nodes / FLEET_SAMPLES_PER_S)
    return config if poll_s == config.gpus.poll_s else replace(config, gpus=replace(config.gpus, poll_s=poll_s))


def node_log_pacing(config: Config) -> LogPacing | None:
    """How a node of `config` (paced) reads and sends its log."""
    if NODE_LOG_READ_S is None:
        return None
    return LogPacing(read_s=NODE_LOG_READ_S, send_s=max(NODE_LOG_READ_S, config.gpus.poll_s))


class FleetError(Exception):
    """The fleet cannot be formed (no nodes, the job is not running, Slurm failed): one line."""


#: The GPU readings a node holds for its graphs: a fleet of 256 nodes holding a console's 600 each would
#: keep ~0.5 GB; 150 are 2.5 min at 1 Hz, 10 min in a fleet paced to a sample every 4 s.
NODE_GPU_READINGS = 150


@dataclass
class FleetNode:
    """One node of the run: where it is, what is known of it, and what it looks like now."""

    name: str
    config: Config
    """The run's config as this node sees it: its host, its log file."""
    target: Target
    state: RunState
    monitor: Monitor | None = None
    verdict: Verdict | None = None
    judged_on: tuple[float | None, int] | None = None
    """What the verdict was formed from: the state's last sample time and lines received."""
    judged_at: float = float("-inf")
    baseline: Baseline | None = None
    """What the verdict measured the node's rate against (baseline_of), for the node's run screen."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One line of the fleet screen."""

    name: str
    gpus: int
    gpu_memory_used_mib: float | None
    gpu_memory_total_mib: float | None
    gpu_util_pct: float | None
    """Mean utilisation over the node's GPUs."""
    ranks: int
    """Live ranks (or main programs) of the run on the node: not its launchers, shells or workers."""
    log_silent_s: float | None
    rate: float | None
    """The latest throughput the node's log gave."""
    rate_unit: str | None
    verdict: str | None
    summary: str
    connection: str
    rate_score: float | None = None
    """Its rate against the fastest node's (1.0 the fastest), when two nodes or more give one."""


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The whole job in one line: tokens/s across nodes, nodes healthy / total."""

    nodes: int
    healthy: int
    rate: float | None
    rate_unit: str | None
    worst: str | None
    job: SlurmJob | None
    slowest: tuple[str, float] | None = None
    """The node below metrics.slow_fraction of the fastest node's rate, and its score (console.slowness.slowest_of)."""


def control_target(config: Config) -> Target:
    """Where Slurm's commands run: the configured host (a login node), or this machine."""
    return make_target(replace(config.target, slurm_job=None, hosts=()))


async def _bounded(work: list) -> None:
    """Run `work` at once and wait at most CLOSE_TIMEOUT_S: a quit must not hang on one node's link.

    (Seen with 64 nodes on two loaded cores: a cancelled monitor task can stay in its channel
    read for minutes.) What is left keeps running in the background until the process ends.
    """
    if not work:
        return
    tasks = [asyncio.ensure_future(w) for w in work]
    await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a failure to close is not the operator's problem here


def node_host(node: str, login_host: str | None) -> str:
    """How to reach `node` by SSH: its name, with the login host's user when one was given."""
    user, _ = split_user(login_host or "")
    return f"{user}@{node}" if user and "@" not in node else node


def node_config(config: Config, node: str, index: int, job: SlurmJob | None, *, log: str | None) -> Config:
    """The run's config as seen on `node`: the host is the node; the log's Slurm patterns filled in."""
    if log and job is not None:
        log = expand_filename(log, job, node=node, node_index=index)
    target = replace(config.target, host=node_host(node, config.target.host), port=None, slurm_job=None, hosts=())
    slurm_job = job.job_id if job is not None else None
    return replace(config, target=target, run=replace(config.run, log=log, slurm_job=slurm_job))


def node_logs(config: Config, job: SlurmJob | None, nodes: list[str]) -> list[str | None]:
    """The log each node follows: `[run] log` on every node, else the job's batch output on its first node.

    Slurm writes the batch script's output on the batch host only (node 0): other nodes have
    a log only when the config names one (per rank, with %t / %N).
    """
    if config.run.log:
        return [config.run.log] * len(nodes)
    if job is not None and job.stdout:
        return [job.stdout] + [None] * (len(nodes) - 1)
    return [None] * len(nodes)


def node_verdict(state: RunState, config: Config) -> tuple[Verdict, Baseline | None] | None:
    """The cheap verdict from what a node's monitor already holds, and what it measured the rate against."""
    evidence = state_evidence(state, config)
    return None if evidence is None else (diagnose(evidence, config), baseline_of(evidence))


#: Said when SSH to a Slurm job's node fails: many clusters allow SSH to the login node only.
TRY_SRUN = "if compute nodes take no SSH, reach them through the job: --reach srun (or [target] reach = \"srun\")"


def unreachable(why: str, config: Config | None = None) -> Verdict:
    """The verdict of a node that cannot be looked at; for a Slurm node over SSH, with the way round it."""
    if config is not None and config.run.slurm_job is not None and config.target.reach == "ssh":
        return Verdict("unknown", f"node unreachable: {why}; {TRY_SRUN}", [why], TRY_SRUN)
    return Verdict("unknown", f"node unreachable: {why}", [why], "check the node and the way to it (SSH or srun)")


def lost(why: str) -> Verdict:
    """The verdict of a node whose sampling agent ended: what it showed before is no longer live."""
    return Verdict("unknown", f"node lost: its agent ended ({why})", [why], "the job may have ended: diagnose again")


def job_headline(verdicts: Sequence[tuple[str, Verdict]]) -> str:
    """One line for a job from its nodes' (name, verdict): nodes healthy / total and the worst verdict, where."""
    healthy = sum(1 for _, v in verdicts if v.name == "healthy")
    worst = max((v for _, v in verdicts), key=lambda v: severity(v.name))
    sick = [name for name, v in verdicts if v.name == worst.name]
    where = "" if worst.name == "healthy" else f": {worst.name} on {', '.join(sick[:4])}" + (
        f" and {len(sick) - 4} more" if len(sick) > 4 else ""
    )
    return f"{healthy}/{len(verdicts)} nodes healthy{where}"


def job_verdict(verdicts: Sequence[tuple[str, Verdict]]) -> Verdict:
    """A job's verdict from its nodes' (name, verdict): the worst node's, said of the job (the headline,
    then that node's summary), with the evidence of every node that has it, each line by its node."""
    worst_node, worst = max(verdicts, key=lambda nv: severity(nv[1].name))
    headline = job_headline(verdicts)
    summary = headline if worst.name == "healthy" else f"{headline}: {worst_node}: {worst.summary}"
    evidence = [f"{name}: {line}" for name, v in verdicts if v.name == worst.name for line in v.evidence]
    return Verdict(worst.name, summary, evidence, worst.next_step, worst.step)


def _rank(verdict: Verdict | None) -> int:
    return severity(verdict.name) if verdict is not None else -1


def live_rate(node: FleetNode) -> tuple[float | None, str | None]:
    """The node's latest throughput and its unit; none while it is stuck, dead or lost."""
    metric = node.state.rate_metric
    stuck = node.verdict is not None and kind(node.verdict.name).rate_is_history
    if metric is None or stuck or node.state.agent_lost is not None:
        return None, None
    value = node.state.latest_value(metric)
    return (value, RATE_UNITS.get(metric)) if value is not None else (None, None)


def row_of(node: FleetNode, now: float) -> NodeRow:
    """A node's line for the fleet screen, from its RunState."""
    state = node.state
    sample = state.latest if state.agent_lost is None else None  # a lost node's last sample is history
    gpus = sample.gpus if sample else ()
    used = [g.memory_used_mib for g in gpus if g.memory_used_mib is not None]
    total = [g.memory_total_mib for g in gpus if g.memory_total_mib is not None]
    util = [g.utilization_pct for g in gpus if g.utilization_pct is not None]
    rate, unit = live_rate(node)
    return NodeRow(
        name=node.name,
        gpus=len(gpus),
        gpu_memory_used_mib=sum(used) if used else None,
        gpu_memory_total_mib=sum(total) if total else None,
        gpu_util_pct=sum(util) / len(util) if util else None,
        ranks=sum(p.state not in ("Z", "X") and p.role in RUN_ROLES for p in sample.processes) if sample else 0,
        log_silent_s=state.log_silent_s(now) if sample is not None else None,
        rate=rate,
        rate_unit=unit,
        verdict=node.verdict.name if node.verdict else None,
        summary=node.verdict.summary if node.verdict else "",
        connection="lost" if state.agent_lost is not None else state.connection.describe(now),
    )


class Fleet:
    """The run's nodes; `start()` runs a Monitor per node, `refresh()` names each node's state."""

    def __init__(
        self,
        config: Config,
        nodes: list[FleetNode],
        *,
        job: SlurmJob | None = None,
        control: Target | None = None,
        slurm: SlurmClient | None = None,
    ) -> None:
        self.config = config
        self.nodes = nodes
        self.job = job
        self.control = control
        self.slurm = slurm
        self.job_seen_at = time.monotonic()
        """When Slurm last described the job: its elapsed time runs on from there between asks."""
        self.ended: str | None = None
        """The job's end as Slurm tells it ('CANCELLED, exit 0:15'), once it has ended."""
        self.history: tuple[str, ...] = ()
        """The IDs this console followed before the job's current one (a resubmit makes a new ID)."""

    @classmethod
    async def open(cls, config: Config) -> Fleet:
        """The fleet `config` names: a Slurm job's nodes, or `[target] hosts`. FleetError says why not."""
        t = config.target
        if t.slurm_job is None:
            if not t.hosts:
                raise FleetError(f"{config.source}: no fleet configured: give --slurm-job ID or --hosts a,b,c")
            names = list(t.hosts)
            config = paced(config, len(names))
            nodes = [cls._node(config, name, i, None, config.run.log) for i, name in enumerate(names)]
            return cls(config, nodes)
        control = control_target(config)
        slurm = SlurmClient(control)
        try:
            job = await slurm.job(t.slurm_job)
            if not job.active:
                why = f" ({job.reason})" if job.reason else ""
                raise FleetError(f"Slurm job {job.job_id} is {job.state}{why}: nothing runs on its nodes now")
            names = await slurm.hostnames(job.nodes)
        except SlurmError as exc:
            await control.close()
            raise FleetError(str(exc)) from None
        except FleetError:
            await control.close()
            raise
        config = paced(config, len(names))
        logs = node_logs(config, job, names)
        nodes = []
        for i, name in enumerate(names):
            if t.reach == "srun":
                node_cfg = node_config(config, name, i, job, log=logs[i])
                step = partial(slurm.srun_script, job.job_id, name)
                target: Target = SrunTarget(control, step, f"{name} (srun {job.job_id})", node_cfg.target.container)
                nodes.append(FleetNode(name, node_cfg, target, RunState(max_gpu_readings=NODE_GPU_READINGS)))
            else:
                nodes.append(cls._node(config, name, i, job, logs[i]))
        return cls(config, nodes, job=job, control=control, slurm=slurm)

    @staticmethod
    def _node(config: Config, name: str, index: int, job: SlurmJob | None, log: str | None) -> FleetNode:
        node_cfg = node_config(config, name, index, job, log=log)
        return FleetNode(name, node_cfg, make_target(node_cfg.target), RunState(max_gpu_readings=NODE_GPU_READINGS))

    async def start(self, on_change: Callable[[], None] | None = None) -> None:
        """A Monitor per node: one agent and one log follower each, restarted with backoff when lost."""
        for node in self.nodes:
            if node.monitor is None:
                node.monitor = Monitor(
                    node.config, node.target, node.state, on_change, log_pacing=node_log_pacing(node.config)
                )
            await node.monitor.start()

    async def stop(self) -> None:
        """Stop every node's monitor (their remote helpers exit), waiting at most CLOSE_TIMEOUT_S."""
        await _bounded([n.monitor.stop() for n in self.nodes if n.monitor is not None])

    async def close(self) -> None:
        """Stop the monitors and release every connection, each part bounded by CLOSE_TIMEOUT_S."""
        await self.stop()
        targets = [n.target for n in self.nodes] + ([self.control] if self.control is not None else [])
        await _bounded([target.close() for target in targets])

    async def refresh_job(self) -> SlurmJob | None:
        """Ask Slurm for the job's state again (None without Slurm); FleetError when it cannot say.

        An ended job sets `ended`: its final state and exit code from `scontrol`, or from `sacct`
        once Slurm has forgotten it (when accounting is kept).
        """
        if self.slurm is None or self.job is None:
            return None
        try:
            self.job = await self.slurm.job(self.job.job_id)
        except SlurmError as exc:
            if "does not know job" not in str(exc):
                raise FleetError(str(exc)) from None
            try:
                state, code = await self.slurm.final_state(self.job.job_id)
                self.ended = f"{state}, exit {code}"
            except SlurmError:
                self.ended = "Slurm no longer knows it, and keeps no accounting to ask"
            return self.job
        self.job_seen_at = time.monotonic()
        if not self.job.active and not self.job.waiting:
            self.ended = f"{self.job.state}, exit {self.job.exit_code}" if self.job.exit_code else self.job.state
        return self.job

    def job_line(self) -> str | None:
        """The job in the header: 'job 6 train · RUNNING · 3m 12s (was 5)', or how it ended."""
        job = self.job
        if job is None:
            return None
        was = f" (was {', '.join(self.history)})" if self.history else ""
        if self.ended is not None:
            return f"job {job.job_id} {job.name} · ended: {self.ended}{was}"
        elapsed = job.elapsed_s + (time.monotonic() - self.job_seen_at if job.state == "RUNNING" else 0.0)
        return f"job {job.job_id} {job.name} · {job.state} · {format_duration(elapsed)}{was}"

    def refresh(self) -> None:
        """Name each node's state from its held samples (pure; cheap enough for every repaint).

        A node whose link is down, or whose agent ended (its srun step ended with the job), is
        `unknown` (lost) at once, whatever it looked like before. A node is judged again when a sample
        or lines came, else once its sampling interval has passed (time alone turns a quiet log into a
        stall): a paced fleet's nodes are not all re-judged every second for nothing new.
        """
        for node in self.nodes:
            state = node.state
            connection = state.connection
            if connection.status in (ConnectionStatus.FAILED, ConnectionStatus.RECONNECTING):
                node.verdict, node.judged_on = unreachable(connection.detail or connection.status.value, node.config), None
            elif state.agent_lost is not None:
                node.verdict, node.judged_on = lost(state.agent_lost), None
            else:
                now, seen = state.clock(), (state.last_sample_at, state.lines_received)
                if seen != node.judged_on or now - node.judged_at >= node.config.gpus.poll_s:
                    judged = node_verdict(state, node.config)
                    if judged is not None:
                        node.verdict, node.baseline = judged
                    node.judged_on, node.judged_at = seen, now

    def verdict(self) -> Verdict | None:
        """The job's verdict from its nodes' as `refresh()` named them (job_verdict); None until every node has one."""
        named = [(node.name, node.verdict) for node in self.nodes if node.verdict is not None]
        return job_verdict(named) if named and len(named) == len(self.nodes) else None

    def rows(self, now: float) -> list[NodeRow]:
        """One row per node, worst verdict first, then by name."""
        ordered = sorted(self.nodes, key=lambda n: (-_rank(n.verdict), n.name))
        _, rates = self.live_rates()
        scores = dict(against_fastest(rates)) if len(rates) > 1 else {}
        return [replace(row_of(node, now), rate_score=scores.get(node.name)) for node in ordered]

    def live_rates(self) -> tuple[str | None, dict[str, float]]:
        """The unit the first node with a rate gives, and each node's latest rate in it (live_rate)."""
        unit, rates = None, {}
        for node in self.nodes:
            rate, its_unit = live_rate(node)
            if rate is not None and its_unit is not None and unit in (None, its_unit):
                unit, rates[node.name] = its_unit, rate
        return unit, rates

    def summary(self) -> FleetSummary:
        """Throughput summed over nodes (each node's latest), nodes healthy / total, the worst verdict, the slowest node."""
        unit, rates = self.live_rates()
        worst = max((n.verdict for n in self.nodes if n.verdict), key=lambda v: severity(v.name), default=None)
        return FleetSummary(
            nodes=len(self.nodes),
            healthy=sum(1 for n in self.nodes if n.verdict is not None and n.verdict.name == "healthy"),
            rate=sum(rates.values()) if rates else None,
            rate_unit=unit,
            worst=worst.name if worst else None,
            job=self.job,
            slowest=slowest_of(rates, self.config.metrics.slow_fraction),
        )
