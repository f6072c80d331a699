"""`pulse restart | warmup | dump` on a fleet (`--slurm-job ID`, `--hosts a,b`), without the UI.

restart (Slurm only): exit 0 when the job runs again with the run alive on every node.
warmup: every node at once, each node's steps one at a time; exit 0 when every step passed.
dump: the run's main process on every node; exit 0 when every node was dumped.
Exit 1 when a step (or a node) failed, 2 when refused, not confirmed, or the fleet cannot be
formed (as the same commands on one host).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from console.actions.audit import ActionRefused, AuditLog, RecordListener, StepEvent, StepStatus, audit_refusal
from console.commands.actions import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    ActionReport,
    NoRunProcess,
    confirm,
    dump_json,
    dump_run,
    format_event,
    print_dumps,
    question_for,
    unconfirmed_escaped,
)
from console.actions.shown import HiddenControls
from console.actions.warmup import WarmupPlan, plan_warmup
from console.config import Config
from console.fleet.fleet import Fleet, FleetError, FleetNode, control_target
from console.fleet.fleet_actions import execute_fleet_restart, execute_fleet_warmup, plan_fleet_restart
from console.fleet.slurm import SlurmClient
from console.observe.pyspy import ProcessDump
from console.observe.pyspy_run import DumpError
from console.remote.target import TargetError


def restart(config: Config, args: argparse.Namespace) -> int:
    """Plan the restart of `config.target.slurm_job`, confirm, run each step, report."""
    return asyncio.run(restart_job(config, args))


async def restart_job(config: Config, args: argparse.Namespace, *, judged_restarts: int | None = None,
                      report: ActionReport | None = None, on_record: RecordListener | None = None) -> int:
    """`pulse restart --slurm-job ID` to its exit code, its steps and any refusal also in `report` (as
    console.commands.actions.restart_run on one machine). `judged_restarts`: Slurm's restart count of
    the job when a verdict was earned on it; a job restarted since (by another watch, or by hand) is
    refused, nothing done. `on_record` is told of each audit record (the watch's journal)."""

    def refuse(text: str) -> int:
        print(text, file=sys.stderr)
        if report is not None:
            report.said = text
        return EXIT_REFUSED

    if getattr(args, "read_only", False):
        return refuse("read-only: restart disabled (started with --read-only)")
    job_id = config.target.slurm_job
    if not job_id:
        return refuse("restart: a fleet restart goes through Slurm: give --slurm-job ID")
    target = control_target(config)
    slurm = SlurmClient(target)
    try:
        try:
            plan = await plan_fleet_restart(slurm, config, job_id)
        except ActionRefused as exc:
            return refuse(f"restart: {exc}")
        if judged_restarts is not None and plan.restarts != judged_restarts:
            return refuse(f"restart: job {job_id} was restarted since it was judged (Slurm counts {plan.restarts}"
                          f" restarts, {judged_restarts} then); nothing done")
        print(f"restart through Slurm on {target.label}:")
        for line in plan.describe():
            print(f"  {line}")
        if not _confirmed("restart", args, plan.hidden):
            if report is not None:
                report.said = unconfirmed_escaped(args, plan.hidden) or "restart: not confirmed"
            return EXIT_REFUSED
        verified = False
        try:
            async for event in execute_fleet_restart(slurm, config, plan, audit=not getattr(args, "no_audit", False),
                                                     on_record=on_record):
                print(format_event(event), flush=True)
                if isinstance(event, StepEvent):
                    if report is not None:
                        report.steps.append(event)
                    verified |= event.step == "verify" and event.status is StepStatus.OK
        except ActionRefused as exc:  # its audit log cannot be written: nothing was done
            return refuse(f"restart: {exc}")
        return EXIT_OK if verified else EXIT_FAILED
    finally:
        await target.close()


def _confirmed(action: str, args: argparse.Namespace, hidden: Sequence[HiddenControls] = ()) -> bool:
    """Ask on the terminal (or take --yes, which a command holding control characters also needs
    --accept-escaped for); say why not on stderr."""
    if refused := unconfirmed_escaped(args, hidden):
        print(f"{action}: {refused}", file=sys.stderr)
        return False
    answer = confirm(question_for(hidden), assume_yes=bool(getattr(args, "yes", False)), stdin=sys.stdin, out=sys.stdout)
    if not answer:
        why = "no terminal to ask on; pass --yes" if answer is None else "nothing done"
        print(f"{action}: not confirmed: {why}", file=sys.stderr)
    return bool(answer)


def warmup(config: Config, args: argparse.Namespace) -> int:
    """The warmup on every node of the fleet; 0 only when every node passed every step."""
    if getattr(args, "read_only", False):
        print("read-only: warmup disabled (started with --read-only)", file=sys.stderr)
        return EXIT_REFUSED
    audit = not getattr(args, "no_audit", False)
    try:
        plan = plan_warmup(config)
    except ActionRefused as exc:
        print(f"warmup: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if audit and (unwritable := audit_refusal("warmup", AuditLog(config.audit_log))):
        print(f"warmup: {unwritable}", file=sys.stderr)
        return EXIT_REFUSED
    return asyncio.run(_warmup(config, args, plan, audit=audit))


async def _open_fleet(action: str, config: Config) -> Fleet | None:
    """The fleet the config names, or None after saying in one line why it cannot be formed."""
    try:
        return await Fleet.open(config)
    except FleetError as exc:
        print(f"{action}: {exc}", file=sys.stderr)
        return None


async def _warmup(config: Config, args: argparse.Namespace, plan: WarmupPlan, *, audit: bool) -> int:
    if (fleet := await _open_fleet("warmup", config)) is None:
        return EXIT_REFUSED
    try:
        print(f"warmup on {len(fleet.nodes)} node(s): {', '.join(n.name for n in fleet.nodes)}:")
        for line in plan.describe():
            print(f"  {line}")
        if not _confirmed("warmup", args, plan.hidden):
            return EXIT_REFUSED
        passed = {n.name: 0 for n in fleet.nodes}
        failed = False
        confirmed = [hidden.escaped for hidden in plan.hidden]  # _confirmed had each confirmed
        async for event in execute_fleet_warmup(fleet.nodes, plan, audit=audit, confirmed=confirmed):
            print(format_event(event), flush=True)
            if isinstance(event, StepEvent) and "node" in event.data:
                failed |= event.status is StepStatus.FAILED
                passed[event.data["node"]] += event.status is StepStatus.OK and ": step " in event.step
        return EXIT_OK if not failed and all(n == len(plan.steps) for n in passed.values()) else EXIT_FAILED
    finally:
        await fleet.close()


def dump(config: Config, args: argparse.Namespace) -> int:
    """py-spy stacks of the run's main process on every node; a node that fails says why and the rest go on."""
    return asyncio.run(_dump(config, args))


@dataclass
class _NodeDump:
    name: str
    dumps: list[ProcessDump] = field(default_factory=list)
    error: str | None = None
    found: bool = True
    """False when the node has no process of the run (nothing to dump, rather than a failure)."""


async def _dump_node(node: FleetNode, args: argparse.Namespace) -> _NodeDump:
    try:
        return _NodeDump(node.name, await dump_run(node.target, node.config, args))
    except NoRunProcess as exc:
        return _NodeDump(node.name, error=f"no run process found ({exc})", found=False)
    except (DumpError, TargetError) as exc:
        return _NodeDump(node.name, error=str(exc))


async def _dump(config: Config, args: argparse.Namespace) -> int:
    if (fleet := await _open_fleet("dump", config)) is None:
        return EXIT_REFUSED
    try:
        results = await asyncio.gather(*(_dump_node(node, args) for node in fleet.nodes))
    finally:
        await fleet.close()
    if args.json:
        print(json.dumps([{"node": r.name, "error": r.error, "processes": [dump_json(d) for d in r.dumps]}
                          for r in results], indent=2))
    for result in results:
        if result.error is not None:
            print(f"dump: {result.name}: {result.error}", file=sys.stderr)
        elif not args.json:
            print(f"== {result.name} ==")
            print_dumps(result.dumps, sys.stdout)
    if not any(r.found for r in results):
        return EXIT_REFUSED
    return EXIT_FAILED if any(r.error is not None for r in results) else EXIT_OK
