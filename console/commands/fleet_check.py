"""`pulse check --slurm-job ID` / `--hosts a,b`: one-shot fleet diagnosis for scripts and cron.

Exit 0 when every node is healthy, 1 when any node has a problem, 2 when the fleet cannot be
formed (Slurm does not know the job, it is not running, bad config) or no node answered.

JSON (`--json`), one object:
    verdict        the worst node verdict;  summary: "3/4 nodes healthy: hung on gpu07"
    job            Slurm's view {job_id, name, state, reason, elapsed_s, nodes, num_nodes,
                   num_tasks, user, stdout, work_dir, restarts, exit_code} or null (--hosts)
    nodes_total, nodes_healthy
    nodes          [{node, error, ...the `pulse check --json` object of that node}] worst first;
                   error: why the node could not be looked at (then its verdict is unknown)
    stack_groups   [{count, ranks: ["node:pid"], wait, where}] when ranks were dumped, else []
    stack_lines    the groups as sentences
    nccl           [{node, rank, op, seq, timeout_ms, flight_recorder, text}]
    node_rates     [{node, rate, score}] slowest first: each node's current rate and its score against
                   the fastest node's (0-1, 1.0 the fastest), when two nodes or more give one
    slowest_node   {node, rate, score, verdict, summary} when a node is below metrics.slow_fraction of
                   the fastest (the summary names its cause when it is slow), else null
    rate_lines     the rates and the slowest node as sentences
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from console.commands.check import EXIT_HEALTHY, EXIT_PROBLEM, EXIT_UNREACHABLE, report_json, write_report
from console.config import Config
from console.verdicts import is_problem, severity
from console.fleet.fleet import Fleet, FleetError
from console.fleet.fleet_diagnose import FleetDiagnosis, diagnose_fleet
from console.observe.nccl import nccl_lines


def run_fleet_check(config: Config, args: argparse.Namespace) -> int:
    """Form the fleet, diagnose every node, report; the exit status by the worst verdict."""
    if not (config.run.match or config.run.pidfile or config.target.slurm_job):
        print(
            f"pulse check: {config.source}: nothing names the run's processes: give --match REGEX (or [run] match)",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    try:
        diagnosis = asyncio.run(_look(config))
    except FleetError as exc:
        print(f"pulse check: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if getattr(args, "json", False):
        print(json.dumps(fleet_json(diagnosis), indent=2))
    else:
        write_fleet_report(diagnosis)
    if all(n.error for n in diagnosis.nodes):
        return EXIT_UNREACHABLE
    return EXIT_PROBLEM if is_problem(diagnosis.worst.name) else EXIT_HEALTHY


async def _look(config: Config) -> FleetDiagnosis:
    fleet = await Fleet.open(config)
    try:
        return await diagnose_fleet(fleet.nodes, job=fleet.job)
    finally:
        await fleet.close()


def _worst_first(diagnosis: FleetDiagnosis):
    return sorted(diagnosis.nodes, key=lambda n: (-severity(n.verdict.name), n.name))


def fleet_json(diagnosis: FleetDiagnosis) -> dict:
    """The documented fleet JSON object (module docstring)."""
    scores, slow = diagnosis.rate_scores(), diagnosis.slowest()
    nodes = []
    for report in _worst_first(diagnosis):
        if report.evidence is None:
            nodes.append({"node": report.name, "error": report.error, "verdict": report.verdict.name,
                          "summary": report.verdict.summary, "target": report.label})
        else:
            nodes.append({"node": report.name, "error": None, **report_json(report.label, report.evidence, report.verdict)})
    return {
        "verdict": diagnosis.worst.name,
        "summary": diagnosis.headline(),
        "job": diagnosis.job.as_json() if diagnosis.job else None,
        "nodes_total": len(diagnosis.nodes),
        "nodes_healthy": diagnosis.healthy,
        "nodes": nodes,
        "stack_groups": [
            {"count": g.count, "ranks": list(g.ranks), "wait": g.wait, "where": g.where} for g in diagnosis.groups
        ],
        "stack_lines": diagnosis.stack_lines() if diagnosis.ranks else [],
        "nccl": [
            {"node": f.node, "rank": f.rank, "op": f.op, "seq": f.seq, "timeout_ms": f.timeout_ms,
             "flight_recorder": f.flight_recorder, "text": f.text}
            for f in diagnosis.nccl
        ],
        "node_rates": [{"node": node, "rate": rate, "score": score} for node, rate, score in scores],
        "slowest_node": None if slow is None else {
            "node": slow.name, "rate": scores[0][1], "score": scores[0][2], "verdict": slow.verdict.name, "summary": slow.verdict.summary,
        },
        "rate_lines": diagnosis.rate_lines(),
    }


def write_fleet_report(diagnosis: FleetDiagnosis, out=None) -> None:
    """The readable fleet report: the job, the headline, stacks and NCCL, then each node worst first."""
    out = out or sys.stdout
    job = diagnosis.job
    if job is not None:
        print(f"Slurm job {job.job_id} ({job.name}) {job.state}, {job.elapsed_s:.0f} s, nodes {job.nodes}", file=out)
    print(f"fleet: {diagnosis.headline()}", file=out)
    for line in diagnosis.rate_lines() + (diagnosis.stack_lines() if diagnosis.ranks else []) + nccl_lines(diagnosis.nccl):
        print(f"  * {line}", file=out)
    for report in _worst_first(diagnosis):
        print(f"\n== {report.name}", file=out)
        if report.evidence is None:
            print(f"verdict: UNKNOWN — {report.verdict.summary}", file=out)
        else:
            write_report(report.label, report.evidence, report.verdict, out)
