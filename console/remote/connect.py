"""Build the Target a config names: this machine, or a host over SSH."""

from __future__ import annotations

from console.config import TargetConfig
from console.remote.target import LocalTarget, Target


def make_target(cfg: TargetConfig) -> Target:
    """LocalTarget when `cfg.host` is None, else an SshTarget (sharing one connection per host)."""
    if cfg.host is None:
        return LocalTarget(cfg.container)
    from console.remote.ssh import SshTarget  # asyncssh loads only when a remote host is named

    return SshTarget(cfg)
