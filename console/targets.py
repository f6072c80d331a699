"""Which machines a command acts on: the one it names, or every node it names; never this machine instead.

A config (or `--hosts` / `--slurm-job`) that names a fleet sends every command to its fleet
version; a command that has none refuses in one line. A Slurm job has a journal of its own (`pulse
watch --slurm-job` keeps it, with its restart policy); a host list has neither. `make_target` refuses a fleet outright,
so no single-host code path can quietly act on the local machine in the fleet's place.
"""

from __future__ import annotations

from console.config import Config, TargetConfig

def fleet_size(target: TargetConfig) -> str | None:
    """How the target names a fleet ('Slurm job 123', '2 hosts (--hosts)'), None for one machine."""
    if target.slurm_job:
        return f"Slurm job {target.slurm_job}"
    if target.hosts:
        return f"{len(target.hosts)} host{'s' * (len(target.hosts) != 1)} ({', '.join(target.hosts)})"
    return None


def fleet_refusal(command: str, config: Config, pid: int | None = None) -> str | None:
    """One line saying why `command` cannot act on the fleet `config` names; None when it can or there is none."""
    fleet = fleet_size(config.target)
    if fleet is None:
        return None
    if command == "restart" and not config.target.slurm_job:
        return (f"restart: the target is {fleet}: Pulse restarts several nodes only through Slurm (--slurm-job ID); "
                "restart one node with --host NODE")
    if command == "watch" and config.watch.restart_on and not config.target.slurm_job:
        return (f"watch: the target is {fleet}: the restart policy restarts a fleet only through Slurm (its requeue"
                " or resubmit): give --slurm-job ID, or --host NODE, or drop --restart-on")
    if command == "watch" and not config.watch.metrics and not config.target.slurm_job:
        return (f"watch: the target is {fleet}: the run journal and alerts are kept for one machine or a Slurm job;"
                " a host list's watch serves each node's metrics: give --metrics HOST:PORT, or --host NODE")
    if command in ("journal", "report") and not config.target.slurm_job:
        return (f"{command}: the target is {fleet}: the run journal is kept for one machine or a Slurm job;"
                " give --host NODE, or --slurm-job ID")
    if command == "dump" and pid is not None:
        return f"dump: --pid names a process on one machine, but the target is {fleet}: give --host NODE with --pid"
    return None
