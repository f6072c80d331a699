"""Build the Target a config names: this machine, or a host over SSH."""

from __future__ import annotations

from console.config import TargetConfig
from console.remote.target import LocalTarget, Target, TargetError


def make_target(cfg: TargetConfig) -> Target:
    """LocalTarget when `cfg.host` is None, else an SshTarget (sharing one connection per host).

    A config naming a fleet (hosts, a Slurm job) is refused: one machine in place of the
    fleet would be the wrong machine (console/fleet opens each node itself).
    """
    if cfg.hosts or cfg.slurm_job:
        raise TargetError("this names a fleet (--hosts / --slurm-job), not one machine: use the fleet version")
    if cfg.host is None:
        return LocalTarget(cfg.container, cfg.python)
    from console.remote.ssh import SshTarget  # asyncssh loads only when a remote host is named

    return SshTarget(cfg)
