"""`pulse restart --slurm-job ID`: the fleet restart without the UI (plan, ask, steps, exit code).

Exit 0 when the job runs again with the run alive on every node, 1 when a step failed,
2 when refused or not confirmed (as `pulse restart` on one host).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from console.actions.audit import ActionRefused, StepEvent, StepStatus
from console.actions.headless import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, confirm, format_event
from console.config import Config
from console.fleet.fleet import control_target
from console.fleet.fleet_actions import execute_fleet_restart, plan_fleet_restart
from console.fleet.slurm import SlurmClient


def restart(config: Config, args: argparse.Namespace) -> int:
    """Plan the restart of `config.target.slurm_job`, confirm, run each step, report."""
    if getattr(args, "read_only", False):
        print("read-only: restart disabled (started with --read-only)", file=sys.stderr)
        return EXIT_REFUSED
    if not config.target.slurm_job:
        print("restart: a fleet restart goes through Slurm: give --slurm-job ID", file=sys.stderr)
        return EXIT_REFUSED
    return asyncio.run(_restart(config, args))


async def _restart(config: Config, args: argparse.Namespace) -> int:
    target = control_target(config)
    slurm = SlurmClient(target)
    try:
        try:
            plan = await plan_fleet_restart(slurm, config, config.target.slurm_job)
        except ActionRefused as exc:
            print(f"restart: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        print(f"restart through Slurm on {target.label}:")
        for line in plan.describe():
            print(f"  {line}")
        answer = confirm("Proceed?", assume_yes=bool(getattr(args, "yes", False)), stdin=sys.stdin, out=sys.stdout)
        if not answer:
            why = "no terminal to ask on; pass --yes" if answer is None else "nothing done"
            print(f"restart: not confirmed: {why}", file=sys.stderr)
            return EXIT_REFUSED
        verified = False
        try:
            async for event in execute_fleet_restart(slurm, config, plan, audit=not getattr(args, "no_audit", False)):
                print(format_event(event), flush=True)
                if isinstance(event, StepEvent) and event.step == "verify" and event.status is StepStatus.OK:
                    verified = True
        except ActionRefused as exc:  # its audit log cannot be written: nothing was done
            print(f"restart: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        return EXIT_OK if verified else EXIT_FAILED
    finally:
        await target.close()
