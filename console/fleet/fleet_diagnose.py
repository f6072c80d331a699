"""Fleet diagnosis: the single-host evidence gathered on every node at once, and every rank's stack.

Each node gets the same look as `pulse check` (two samples, the log's tail) in parallel, each
bounded in time so one dead node cannot hold the verdict back; a node the console already
monitors is judged from the samples and lines it holds, so nothing new starts on it. When any node looks stuck
(or when asked), every live process of the run on every node is dumped with py-spy, and the
ranks are grouped by their main thread's stack: "63 ranks wait in an all-reduce, rank 17 is
still in the data loader" becomes two groups. NCCL watchdog and flight-recorder lines
among the nodes' problem lines are read for the collective, its sequence number and rank.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from console.config import MetricsConfig

from console.diagnose import (
    Evidence,
    StackGroup,
    Verdict,
    diagnose,
    group_sentence,
    group_stacks,
    in_collective,
    stragglers,
    wants_stacks,
)
from console.evidence import StacksTaken, gather, state_evidence, summarise, take_stacks, with_dumps
from console.fleet.fleet import FleetNode, job_headline, job_verdict, unreachable
from console.fleet.slurm_text import SlurmJob
from console.journal.policy import clipped, saved_evidence
from console.model import LineKind, ProcessReading
from console.observe.nccl import FLIGHT, NcclFact, nccl_fact, nccl_lines
from console.observe.pyspy import ProcessDump
from console.observe.pyspy_run import DumpError
from console.observe.roles import local_rank_of
from console.remote.target import TargetError
from console.slowness import against_fastest, slowest_of
from console.state import RATE_UNITS
from console.units import si
from console.verdicts import kind, severity

#: The longest one node may take to be sampled before it counts as unreachable.
NODE_TIMEOUT_S = 10.0
#: py-spy dumps running at once on one node (each is a channel on its connection).
DUMPS_PER_NODE = 4
#: A monitored node's held samples stand for a fresh look when the newest is at most this old
#: (or two of its sampling intervals, in a fleet large enough to be sampled less often).
HELD_FRESH_S = 5.0


@dataclass(frozen=True, slots=True)
class RankStack:
    """One rank (a process of the run on a node) and its dump, or why there is none."""

    node: str
    pid: int
    dump: ProcessDump | None = None
    error: str | None = None
    rank: int | None = None
    """Its rank in the job (SLURM_PROCID / RANK), None when its environment names none."""
    local_rank: int | None = None

    @property
    def label(self) -> str:
        """'rank 1 (gpu07, local 1)' when the rank is known, else 'gpu07:4242' (node and PID)."""
        if self.rank is None:
            return f"{self.node}:{self.pid}"
        local = f", local {self.local_rank}" if self.local_rank is not None else ""
        return f"rank {self.rank} ({self.node}{local})"


@dataclass
class NodeReport:
    """One node's evidence and verdict, or why it could not be looked at."""

    name: str
    label: str
    evidence: Evidence | None
    verdict: Verdict
    error: str | None = None


@dataclass
class FleetDiagnosis:
    """The whole job: every node's verdict, the worst one, the slowest node, ranks grouped by stack, NCCL facts."""

    nodes: list[NodeReport]
    groups: list[StackGroup] = field(default_factory=list)
    ranks: list[RankStack] = field(default_factory=list)
    nccl: list[NcclFact] = field(default_factory=list)
    job: SlurmJob | None = None
    slow_fraction: float = MetricsConfig().slow_fraction
    """A node below this share of the fastest node's rate is named the slowest (the config's metrics.slow_fraction)."""

    def rates(self) -> dict[str, float]:
        """Each node's current rate, of the metric most nodes' logs give; none from a node whose rate is
        history (stuck, dead: its last line's rate is not its rate now) or that could not be looked at."""
        metrics = Counter(n.evidence.rate_metric for n in self.nodes if n.evidence is not None and n.evidence.rate_metric)
        if not metrics:
            return {}
        metric = metrics.most_common(1)[0][0]
        return {n.name: n.evidence.rate_now for n in self.nodes
                if n.evidence is not None and n.evidence.rate_metric == metric and n.evidence.rate_now is not None
                and not kind(n.verdict.name).rate_is_history}

    def rate_scores(self) -> list[tuple[str, float, float]]:
        """(node, rate, score against the fastest node) of the nodes with a rate, slowest first."""
        rates = self.rates()
        return sorted(((name, rates[name], score) for name, score in against_fastest(rates)), key=lambda row: (row[2], row[0]))

    def slowest(self) -> NodeReport | None:
        """The node slower than the fastest by more than the slow fraction (console.slowness.slowest_of), if one."""
        found = slowest_of(self.rates(), self.slow_fraction)
        return next(n for n in self.nodes if n.name == found[0]) if found else None

    def rate_lines(self) -> list[str]:
        """Each node's rate against the fastest's, and the slowest node with its own verdict (its cause)."""
        scores = self.rate_scores()
        if len(scores) < 2:
            return []
        lines = ["rate against the fastest node: " + ", ".join(f"{name} {score:.2f}" for name, _, score in scores)]
        slow = self.slowest()
        if slow is not None:
            name, rate, score = scores[0]
            fastest, top, _ = scores[-1]
            unit = RATE_UNITS.get(slow.evidence.rate_metric or "", "") if slow.evidence else ""
            lines.append(f"{name} is the slowest node: {si(rate)} {unit}, {score:.0%} of {fastest}'s {si(top)}; "
                         f"{slow.verdict.name}: {slow.verdict.summary}")
        return lines

    @property
    def worst(self) -> Verdict:
        return max((n.verdict for n in self.nodes), key=lambda v: severity(v.name))

    @property
    def healthy(self) -> int:
        return sum(1 for n in self.nodes if n.verdict.name == "healthy")

    def headline(self) -> str:
        """One line for the whole job: nodes healthy / total and the worst verdict."""
        slow = self.slowest()
        slowest = f"; slowest node {slow.name}" if slow is not None else ""
        return job_headline([(n.name, n.verdict) for n in self.nodes]) + slowest

    def verdict(self) -> Verdict:
        """The job's verdict (console.fleet.fleet.job_verdict): the worst node's, said of the job."""
        return job_verdict([(n.name, n.verdict) for n in self.nodes])

    def saved_evidence(self, log_tails: Mapping[str, Iterable[str]]) -> dict:
        """What an automatic restart of the job saves in its journal before it acts (console.journal.policy
        .saved_evidence, for a job): the job's verdict, its ranks grouped by stack and its NCCL facts,
        then every node's own look under `nodes`: its processes, every stack, its log's last lines
        (`log_tails`, by node), its GPUs; a node that could not be looked at, why."""
        verdict = self.verdict()
        nodes = [
            {"node": n.name, **saved_evidence(n.verdict, n.evidence, log_tails.get(n.name, ()))} if n.evidence is not None
            else {"node": n.name, "verdict": n.verdict.name, "summary": n.verdict.summary, "evidence": clipped([n.error or ""])}
            for n in self.nodes
        ]
        return {"verdict": verdict.name, "summary": verdict.summary, "evidence": clipped(verdict.evidence),
                "stacks": clipped(self.stack_lines() + nccl_lines(self.nccl)), "nodes": nodes}

    def stack_lines(self) -> list[str]:
        """The groups as sentences: the biggest first, lone ranks named."""
        lines = []
        for g in self.groups:
            many = g.count > 1
            who = f"{g.count} ranks" if many else g.ranks[0]
            verb = ("wait" if many else "waits") if g.wait else ("run" if many else "runs")
            doing = f"{verb} on {g.wait}" if g.wait else verb
            lines.append(f"{who} {doing} in {g.where}")
        behind = stragglers(self.groups)
        if behind:
            names = [rank for g in behind for rank in g.ranks]
            lines.append(f"{', '.join(names)} {'is the straggler' if len(names) == 1 else 'are the stragglers'}")
        failed = [r for r in self.ranks if r.dump is None]
        if failed:
            lines.append(f"{len(failed)} rank(s) not dumped: {failed[0].label}: {failed[0].error}")
        return lines


# -- pure ------------------------------------------------------------------------------------


def group_ranks(ranks: list[RankStack]) -> list[StackGroup]:
    """Ranks grouped by identical main-thread stack (the single-host grouping, console.diagnose.group_stacks)."""
    members = []
    for rank in ranks:
        if rank.dump is None:
            continue
        main = next((s for s in summarise(rank.dump) if s.main), None)
        if main is not None:
            members.append((rank.label, main))
    return group_stacks(members)


# -- gathering -------------------------------------------------------------------------------


async def _look(node: FleetNode, window_s: float | None, timeout: float) -> NodeReport:
    monitored = node.monitor is not None and node.monitor.running
    if monitored:
        # The console streams this node's samples and log already: judge from those, start nothing.
        held = state_evidence(node.state, node.config, fresh_s=max(HELD_FRESH_S, 2 * node.config.gpus.poll_s))
        if held is not None:
            return NodeReport(node.name, node.target.label, held, diagnose(held, node.config))
    following = node.state if monitored and node.config.run.log else None
    try:
        async with asyncio.timeout(timeout):
            evidence = await gather(
                node.target, node.config, window_s=window_s, follower_state=following, dump_stacks="never"
            )
    except (TargetError, asyncio.TimeoutError) as exc:
        why = str(exc) or f"no answer within {timeout:g} s"
        return NodeReport(node.name, node.target.label, None, unreachable(why, node.config), error=why)
    return NodeReport(node.name, node.target.label, evidence, diagnose(evidence, node.config))


async def _dump_node(node: FleetNode, report: NodeReport) -> StacksTaken:
    """Every process of the run a single-host diagnosis would dump (ranks first, then their workers), and how each moved."""
    if report.evidence is None:
        return StacksTaken([], {}, {})
    return await take_stacks(node.target, node.config, report.evidence.processes, at_once=DUMPS_PER_NODE)


def rank_stacks(node: str, dumps: list[tuple[ProcessReading, ProcessDump | DumpError]]) -> list[RankStack]:
    """The ranks (or the node's main program) among a node's dumps: workers and children are not ranks."""
    return [
        RankStack(
            node,
            process.pid,
            dump=result if isinstance(result, ProcessDump) else None,
            error=str(result) if isinstance(result, DumpError) else None,
            rank=process.rank,
            local_rank=local_rank_of(process),
        )
        for process, result in dumps
        if process.role not in ("worker", "child")
    ]


async def diagnose_fleet(
    nodes: list[FleetNode],
    *,
    job: SlurmJob | None = None,
    window_s: float | None = None,
    dump_ranks: str = "auto",
    node_timeout_s: float = NODE_TIMEOUT_S,
) -> FleetDiagnosis:
    """Look at every node in parallel, then (when a node looks stuck, or `dump_ranks='always'`)
    dump every rank on every node and group them by stack. Never raises for one node's failure."""
    reports = list(await asyncio.gather(*(_look(n, window_s, node_timeout_s) for n in nodes)))
    facts = [
        fact
        for report in reports
        if report.evidence is not None
        for line in report.evidence.problems
        if line.kind in (LineKind.NCCL_TIMEOUT, LineKind.TRACEBACK, LineKind.KILLED) or FLIGHT.search(line.text)
        if (fact := nccl_fact(report.name, line.text)) is not None
    ]
    fraction = nodes[0].config.metrics.slow_fraction if nodes else MetricsConfig().slow_fraction
    diagnosis = FleetDiagnosis(reports, nccl=facts, job=job, slow_fraction=fraction)
    stuck = any(r.evidence is not None and wants_stacks(r.evidence, n.config) for n, r in zip(nodes, reports))
    if dump_ranks == "never" or (dump_ranks == "auto" and not stuck):
        return diagnosis
    per_node = await asyncio.gather(*(_dump_node(n, r) for n, r in zip(nodes, reports)))
    for node, report, taken in zip(nodes, reports, per_node):
        if report.evidence is not None and taken.dumps:
            # The node judged again with its stacks, as `pulse check` judges one host: a rank
            # stopped on its own data while another spins is hung, and named.
            report.evidence = with_dumps(report.evidence, taken.dumps, recorded=taken.recorded, woke=taken.woke,
                                         busy_pct=node.config.stall.cpu_idle_pct)
            report.verdict = diagnose(report.evidence, node.config)
    diagnosis.ranks = [rank for node, taken in zip(nodes, per_node) for rank in rank_stacks(node.name, taken.dumps)]
    diagnosis.groups = group_ranks(diagnosis.ranks)
    name_straggler_nodes(diagnosis)
    return diagnosis


def name_straggler_nodes(diagnosis: FleetDiagnosis) -> None:
    """Ranks on other nodes wait in a collective while a rank is not in it: that rank's node is hung.

    What one node's diagnosis cannot see when each node holds one rank; the groups are the
    single-host grouping (group_stacks, stragglers), so the sentence is the one `pulse check` writes.
    Only a node judged unknown (busy but silent) is changed: any other verdict is its own diagnosis and stands.
    """
    behind = stragglers(diagnosis.groups)
    waiting = [g for g in diagnosis.groups if in_collective(g)]
    if not behind or not waiting:
        return
    node_of = {rank.label: rank.node for rank in diagnosis.ranks}
    for group in behind:
        for who in group.ranks:
            report = next((r for r in diagnosis.nodes if r.name == node_of.get(who)), None)
            if report is None or report.verdict.name != "unknown":
                continue
            summary = f"{who} is the straggler: {group_sentence(waiting[0])}; {group_sentence(group)}"
            report.verdict = Verdict(
                "hung", summary, [group_sentence(g) for g in diagnosis.groups] + report.verdict.evidence,
                "the straggler's stack says what it waits on (dump it on its node); restart the job once understood", "dump",
            )
