"""The run's configuration: where it lives, how it is launched, what is normal for it.

Loaded from TOML (see README) or built from command-line flags. Validation errors
name file, line and key; loading does no I/O beyond reading the one file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.remote.shell import Container


@dataclass(frozen=True, slots=True)
class TargetConfig:
    host: str | None = None
    """`user@host` or a ~/.ssh/config alias; None means this machine."""
    port: int | None = None
    container: Container | None = None
    accept_new_host_key: bool = False
    """Trust an unknown host key on first connection (never a changed one)."""
    known_hosts: str | None = None
    """A known_hosts file to check against instead of ~/.ssh/known_hosts."""
    ssh_config: str | None = None
    """An ssh_config file to read instead of ~/.ssh/config."""
    python: str = "python3"
    """The interpreter on the target that runs Pulse's agent (any Python 3.8+)."""
    py_spy: str = "py-spy"
    nvidia_smi: str = "nvidia-smi"


@dataclass(frozen=True, slots=True)
class RunConfig:
    name: str = "run"
    launch: str | None = None
    """The exact command that starts the run (used by restart)."""
    cwd: str | None = None
    log: str | None = None
    """The log path; may contain `{started}` (restart fills it with a timestamp) or a glob."""
    match: str | None = None
    """A regex over /proc/PID/cmdline that finds the run's processes."""
    pidfile: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    grace_s: float = 30.0
    """SIGTERM → SIGKILL grace period for restart."""


@dataclass(frozen=True, slots=True)
class GpuConfig:
    roles: dict[int, str] = field(default_factory=dict)
    """GPU index → role name (e.g. 'target', 'drafter')."""
    source: str = "auto"
    """'auto' (NVML, then nvidia-smi), 'nvml' or 'nvidia-smi'."""
    poll_s: float = 1.0


@dataclass(frozen=True, slots=True)
class MetricPattern:
    """An extra regex from the config: a named group gives the metric's value."""

    name: str
    """tokens_per_s, samples_per_s, it_per_s, loss, step or total_steps."""
    regex: str


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    baseline_tokens_per_s: float | None = None
    baseline_samples_per_s: float | None = None
    baseline_it_per_s: float | None = None
    slow_fraction: float = 0.8
    """Throughput below this fraction of baseline is `slow`."""
    patterns: tuple[MetricPattern, ...] = ()

    def baseline(self, metric: str) -> float | None:
        return getattr(self, f"baseline_{metric}", None)


@dataclass(frozen=True, slots=True)
class WarmupConfig:
    command: str | None = None
    """Template with {gpu} and {seq_len}."""
    gpus: tuple[int, ...] = ()
    seq_lens: tuple[int, ...] = ()
    triton_cache_dir: str = "~/.triton/cache"
    step_timeout_s: float = 1800.0


@dataclass(frozen=True, slots=True)
class StallConfig:
    log_silent_s: float = 300.0
    cpu_idle_pct: float = 5.0
    """A process under this CPU% (by delta) counts as idle."""
    gpu_idle_pct: float = 5.0
    sample_window_s: float = 1.5


@dataclass(frozen=True, slots=True)
class CustomAction:
    name: str
    key: str
    command: str
    """Template with {pid}, {pids}, {log}, {gpu}, {host}."""
    confirm: bool = True
    dangerous: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class Config:
    target: TargetConfig = field(default_factory=TargetConfig)
    run: RunConfig = field(default_factory=RunConfig)
    gpus: GpuConfig = field(default_factory=GpuConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    stall: StallConfig = field(default_factory=StallConfig)
    actions: tuple[CustomAction, ...] = ()
    audit_log: str = "~/.local/state/pulse/audit.jsonl"
    source: str = "<flags>"
    """The file this came from, for messages."""


class ConfigError(Exception):
    """One or more problems, one line each: `file:line: key: what is wrong`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
