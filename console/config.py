"""The run's configuration: where it lives, how it is launched, what is normal for it.

Loaded from TOML (see README) or built from command-line flags. Validation errors
name file, line and key; loading does no I/O beyond reading the one file (and checking,
unread, the ssh_config and known_hosts files it names: read_regular_file).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import posixpath
import re
import shutil
import stat
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from console.paths import audit_log_path
from console.model import CONTAINER_KINDS, Container, MetricPattern
from console.placeholders import CUSTOM_PLACEHOLDERS, WARMUP_PLACEHOLDERS, placeholder_refusal
from console.units import parse_duration
from console.user_patterns import compile_metric_pattern


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
    slurm_job: str | None = None
    """A Slurm job ID: the run is that job, on every node Slurm gave it (see console/fleet)."""
    hosts: tuple[str, ...] = ()
    """The run's nodes when there is no scheduler: each reached like `host`."""
    reach: str = "ssh"
    """How a Slurm job's nodes are reached: 'ssh' (~/.ssh/config, ProxyJump) or 'srun' (--overlap in the job)."""


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
    slurm_job: str | None = None
    """The Slurm job whose processes are the run's, on one node of a fleet (`match` narrows within it)."""
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
    log_silent_s: float | None = None
    """Silence that makes a stall, set explicitly; None learns it from the run's rhythm (console.diagnose)."""
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
    mutating: bool = True
    """Changes something unless the config says `mutating = false`: refused under --read-only."""
    key_source: str = ""
    """Where the config sets `key`, as an error about it starts: 'pulse.toml:3: actions[0].key'."""


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """Where alerts go when the verdict gets worse or recovers (see console/alerts.py)."""

    terminal: bool = True
    """Ring the bell and send an OSC 9 / OSC 777 desktop notification to the terminal."""
    command: str | None = None
    """A shell command that gets the alert as JSON on stdin and PULSE_ALERT_* variables."""
    webhook: str | None = None
    """An http(s) URL the alert is POSTed to as JSON."""
    webhook_format: str = "json"
    """'json' (the alert object), 'slack' ({"text": …}) or 'discord' ({"content": …})."""
    hold_s: float = 30.0
    """A worse verdict must last this long before it is announced."""
    recover_s: float = 60.0
    """A recovery must last this long before it is announced."""
    min_interval_s: float = 300.0
    """At most one alert this often; one held back is sent when the interval ends, if still true."""
    timeout_s: float = 10.0
    """Each delivery attempt's limit."""
    retries: int = 2
    """Further attempts of a webhook after a failed one."""


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What `pulse watch` does beyond the journal and the alerts: its restart policy and its metrics
    endpoint (console/journal/policy.py, console/journal/metrics.py). Flags of the same names win."""

    restart_on: tuple[str, ...] = ()
    """Verdicts that restart the run once they have lasted `restart_after_s` (none: never restarts)."""
    restart_on_source: str = ""
    """Where the config sets `restart_on`, as an error about it starts: 'run.toml:12: watch.restart_on'."""
    max_restarts: int | None = None
    """The most automatic restarts within `restart_window_s`; required with `restart_on`."""
    restart_window_s: float = 6 * 3600.0
    restart_after_s: float = 600.0
    metrics: tuple[str, int] | None = None
    """(host, port) of the Prometheus endpoint; None serves none."""


DEFAULT_AUDIT_LOG = str(audit_log_path())  # ~/.local/state/pulse/audit.jsonl on Linux


@dataclass(frozen=True, slots=True)
class Config:
    target: TargetConfig = field(default_factory=TargetConfig)
    run: RunConfig = field(default_factory=RunConfig)
    gpus: GpuConfig = field(default_factory=GpuConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    stall: StallConfig = field(default_factory=StallConfig)
    actions: tuple[CustomAction, ...] = ()
    audit_log: str = DEFAULT_AUDIT_LOG
    source: str = "<flags>"
    """The file this came from, for messages."""
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)


class ConfigError(Exception):
    """One or more problems, one line each: `file:line: key: what is wrong`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# -- loading ------------------------------------------------------------------

_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\s*(#.*)?$")
_ARRAY_TABLE = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"']+(?:\s*\.\s*[A-Za-z0-9_\-\"']+)*)\s*=")


def _key_lines(text: str) -> dict[str, int]:
    """Map 'table.key' paths to the line that sets them (tomllib gives no positions)."""
    lines: dict[str, int] = {}
    table = ""
    counts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if m := _ARRAY_TABLE.match(line):
            name = m.group(1).replace('"', "").replace("'", "")
            index = counts.get(name, 0)
            counts[name] = index + 1
            table = f"{name}[{index}]"
            lines.setdefault(table, number)
        elif m := _TABLE.match(line):
            table = m.group(1).replace('"', "").replace("'", "").replace(" ", "")
            lines.setdefault(table, number)
        elif m := _KEY.match(line):
            key = re.sub(r"\s*\.\s*", ".", m.group(1)).replace('"', "").replace("'", "")
            lines.setdefault(f"{table}.{key}" if table else key, number)
    return lines


_TYPE_NAMES = {str: "a string", int: "a number", float: "a number", bool: "true or false",
               dict: "a table", list: "an array"}


class _Reader:
    """Typed access to one table, collecting problems as `file:line: key: message`."""

    def __init__(self, source: str, lines: dict[str, int], problems: list[str]) -> None:
        self.source, self.lines, self.problems = source, lines, problems

    def where(self, path: str) -> str:
        """'file:line: path', the line of `path` or of the nearest table above it that has one."""
        parts = path.split(".")
        line = None
        while parts and line is None:
            line = self.lines.get(".".join(parts))
            parts.pop()
        return f"{self.source}:{line}: {path}" if line else f"{self.source}: {path}"

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{self.where(path)}: {message}")

    def table(self, data: dict, path: str, allowed: tuple[str, ...]) -> dict:
        value = data.get(path.rsplit(".", 1)[-1], {}) if "." not in path else data
        if not isinstance(value, dict):
            self.problem(path, "must be a table")
            return {}
        for key in value:
            if key not in allowed:
                self.problem(f"{path}.{key}", f"unknown key (known: {', '.join(allowed)})")
        return value

    def get(self, table: dict, path: str, kind: type | tuple, default: Any = None, check: Callable | None = None):
        key = path.rsplit(".", 1)[-1]
        if key not in table:
            return default
        value = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(dict.fromkeys(_TYPE_NAMES[k] for k in kinds))
            self.problem(path, f"must be {names}, not {json.dumps(value, default=str)}")
            return default
        if check is not None and (message := check(value)):
            self.problem(path, message)
            return default
        return value


def _positive(value: float) -> str | None:
    return None if math.isfinite(value) and value > 0 else "must be a finite number greater than 0"


def _not_negative(value: float) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "must be a finite number, 0 or more"


def _percent(value: float) -> str | None:
    return None if math.isfinite(value) and 0 <= value <= 100 else "must be a percentage, 0 to 100"


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _regex(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


_SLURM_JOB_ID = re.compile(r"\d+(_\d+)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def value_problem(value: str, kind: str = "name") -> str | None:
    """What is wrong with `value` for a flag or key that names a target (`kind` "name": a host, a
    container, a namespace, a job) or a path (`kind` "path": a file, a folder, a program), or that is
    text where only emptiness is wrong (`kind` "text": a command, a regex); None when nothing is.
    The words follow the flag or key: `--host: is empty …`, `file:3: run.log: starts with …`.

    The one check behind every such flag and key, run before anything acts. An empty or blank value
    is an unset variable (`--host "$GPU_BOX"`): taken as absent it would be this machine, or the
    config's target. A leading '-' would be read as an option by pct, docker, kubectl, an ssh_config
    ProxyCommand, py-spy or Pulse's agents; a control character would change what the line shows or
    cut the argument short.
    """
    if not value:
        return "is empty (an unset variable?); give a value or leave it out"
    if not value.strip():
        return "is only whitespace (an unset variable?); give a value or leave it out"
    if kind == "text":
        return None
    if value.startswith("-"):
        fix = f"for a file or folder of that name write ./{value}" if kind == "path" else "give the name without it"
        return f"starts with '-' ({value[:60]!r}), which a program would read as an option; {fix}"
    if _CONTROL.search(value):
        return f"holds a control character ({value[:60]!r}); give the value without it"
    if kind == "name" and any(c.isspace() for c in value):
        # asyncssh puts the host into an ssh_config ProxyCommand for %h, then splits that line into words.
        return f"holds whitespace ({value[:60]!r}), which no host, container or job name has; give the name alone"
    return None


def _path_value(value: str) -> str | None:
    return value_problem(value, "path")


def _name_value(value: str | int) -> str | None:
    return value_problem(str(value), "name")


def _host_list(value: list) -> str | None:
    if not value or not all(isinstance(v, str) for v in value):
        return "must be a non-empty list of host names, e.g. [\"node1\", \"node2\"]"
    return _entries_problem(value)


def _entries_problem(hosts: list[str]) -> str | None:
    """The first entry of a host list that cannot name a host, as `entry N …`."""
    for number, host in enumerate(hosts, 1):
        if message := value_problem(host):
            return f"entry {number} {message}"
    return None


def _job_id(value: str | int | None) -> str | None:
    return None if value is None else str(value).strip()


def _int_list(name: str):
    def check(value: list) -> str | None:
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return f"{name} must be a list of non-negative integers"
        return None

    return check


#: A config is a few kilobytes; anything near this is not one (a log, /dev/zero, a mistake).
MAX_CONFIG_BYTES = 1 << 20
#: Arrays and inline tables nest a level or two in a real config; past this a nesting error names the line.
MAX_NESTING = 32


def _too_deep_line(text: str) -> int:
    """The line where nesting first passes MAX_NESTING, counted outside strings and comments
    (brackets in a regex do not count); 1 when it never does."""
    depth, quote, line = 0, "", 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif quote:
            if c == "\\" and quote[0] == '"':
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote) - 1
        elif c == "#":
            end = text.find("\n", i)
            i = (n if end < 0 else end) - 1
        elif c in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return 1


def _problem_at(text: str, source: str, line: int, message: str) -> str:
    """`file:line: key: message`, naming the key set on or before `line`."""
    key = max(((n, k) for k, n in _key_lines(text).items() if n <= line), default=(0, "text"))[1]
    return f"{source}:{line}: {key}: {message}"


def parse_config(text: str, source: str = "<config>") -> Config:
    """Build a Config from TOML text; ConfigError lists every problem, one line each."""
    if (nul := text.find("\x00")) >= 0:
        raise ConfigError([_problem_at(text, source, text.count("\n", 0, nul) + 1, "a NUL byte: not a text config")])
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per level: a 100k-deep array would end in a traceback
        line = _too_deep_line(text)
        raise ConfigError([_problem_at(text, source, line, f"nested too deeply (more than {MAX_NESTING} levels)")]) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        if m := re.search(r"\(at line (\d+), column (\d+)\)", message):
            message = message[: m.start()].strip()
            raise ConfigError([f"{source}:{m.group(1)}: invalid TOML: {message}"]) from None
        raise ConfigError([f"{source}: invalid TOML: {message}"]) from None
    problems: list[str] = []
    r = _Reader(source, _key_lines(text), problems)
    for key in data:
        if key not in ("target", "run", "gpus", "metrics", "warmup", "stall", "actions", "audit_log", "alerts", "watch"):
            r.problem(key, "unknown section (known: target, run, gpus, metrics, warmup, stall, actions, audit_log, alerts,"
                           " watch)")

    t = r.table(data, "target", ("host", "port", "container", "accept_new_host_key", "known_hosts",
                                 "ssh_config", "python", "py_spy", "nvidia_smi", "slurm_job", "hosts", "reach"))
    container = None
    if "container" in t:
        c = t["container"]
        if not isinstance(c, dict):
            r.problem("target.container", 'must be a table like { kind = "pct", id = "200" }')
        else:
            for key in c:
                if key not in ("kind", "id", "namespace"):
                    r.problem(f"target.container.{key}", "unknown key (known: kind, id, namespace)")
            kind = r.get(c, "target.container.kind", str, "none")
            if kind != "none" and kind not in CONTAINER_KINDS:
                r.problem("target.container.kind", f"must be {', '.join(CONTAINER_KINDS)} or none, not {kind!r}")
            elif kind != "none":
                if "id" not in c:
                    r.problem("target.container.id", f"is required for a {kind} container")
                elif (cid := r.get(c, "target.container.id", (str, int), None, _name_value)) is not None:
                    container = Container(kind, str(cid), r.get(c, "target.container.namespace", str, None, _name_value))
    target = TargetConfig(
        host=r.get(t, "target.host", str, None, _name_value),
        port=r.get(t, "target.port", int, None, lambda v: None if 0 < v < 65536 else "must be 1-65535"),
        container=container,
        accept_new_host_key=r.get(t, "target.accept_new_host_key", bool, False),
        known_hosts=r.get(t, "target.known_hosts", str, None, _path_value),
        ssh_config=r.get(t, "target.ssh_config", str, None, _path_value),
        python=r.get(t, "target.python", str, "python3", _path_value),
        py_spy=r.get(t, "target.py_spy", str, "py-spy", _path_value),
        nvidia_smi=r.get(t, "target.nvidia_smi", str, "nvidia-smi", _path_value),
        slurm_job=_job_id(r.get(t, "target.slurm_job", (str, int), None, _name_value)),
        hosts=tuple(r.get(t, "target.hosts", list, [], _host_list)),
        reach=r.get(t, "target.reach", str, "ssh", lambda v: None if v in ("ssh", "srun") else "must be ssh or srun"),
    )
    if target.slurm_job is not None and not _SLURM_JOB_ID.fullmatch(target.slurm_job):
        r.problem("target.slurm_job", f"must be a Slurm job ID (digits), not {target.slurm_job!r}")
    if target.slurm_job is not None and target.hosts:
        r.problem("target.hosts", "give either slurm_job or hosts, not both")

    u = r.table(data, "run", ("name", "launch", "cwd", "log", "match", "pidfile", "env", "grace_s"))
    env = r.get(u, "run.env", dict, {})
    for key, value in env.items():
        if not isinstance(value, str):
            r.problem(f"run.env.{key}", f"must be a string, not {type(value).__name__}")
    cwd = r.get(u, "run.cwd", str, None, _path_value)
    run = RunConfig(
        name=r.get(u, "run.name", str, "run"),
        launch=r.get(u, "run.launch", str),
        cwd=cwd,
        log=under_cwd(r.get(u, "run.log", str, None, _path_value), cwd),
        match=r.get(u, "run.match", str, None, _regex),
        pidfile=under_cwd(r.get(u, "run.pidfile", str, None, _path_value), cwd),
        env={k: v for k, v in env.items() if isinstance(v, str)},
        grace_s=float(r.get(u, "run.grace_s", (int, float), 30.0, _not_negative)),
    )

    g = r.table(data, "gpus", ("roles", "source", "poll_s"))
    roles: dict[int, str] = {}
    for role, indices in r.get(g, "gpus.roles", dict, {}).items():
        if not isinstance(indices, list) or _int_list("")(indices):
            r.problem(f"gpus.roles.{role}", "must be a list of GPU indices, e.g. [0, 1, 2]")
            continue
        for index in indices:
            if index in roles:
                r.problem(f"gpus.roles.{role}", f"GPU {index} already has role {roles[index]!r}")
            roles[index] = role
    gpus = GpuConfig(
        roles=roles,
        source=r.get(g, "gpus.source", str, "auto",
                     lambda v: None if v in ("auto", "nvml", "nvidia-smi") else "must be auto, nvml or nvidia-smi"),
        poll_s=float(r.get(g, "gpus.poll_s", (int, float), 1.0, _positive)),
    )

    mt = r.table(data, "metrics", ("baseline_tokens_per_s", "baseline_samples_per_s", "baseline_it_per_s",
                                  "slow_fraction", "patterns"))
    patterns: list[MetricPattern] = []
    for name, regex in r.get(mt, "metrics.patterns", dict, {}).items():
        if not isinstance(regex, str):
            r.problem(f"metrics.patterns.{name}", "must be a string")
            continue
        try:
            compile_metric_pattern(regex, name)
        except ValueError as exc:
            r.problem(f"metrics.patterns.{name}", str(exc))
        else:
            patterns.append(MetricPattern(name, regex))
    number = (int, float)
    metrics = MetricsConfig(
        baseline_tokens_per_s=r.get(mt, "metrics.baseline_tokens_per_s", number, None, _positive),
        baseline_samples_per_s=r.get(mt, "metrics.baseline_samples_per_s", number, None, _positive),
        baseline_it_per_s=r.get(mt, "metrics.baseline_it_per_s", number, None, _positive),
        slow_fraction=float(r.get(mt, "metrics.slow_fraction", number, 0.8,
                                  lambda v: None if 0 < v <= 1 else "must be in (0, 1]")),
        patterns=tuple(patterns),
    )

    w = r.table(data, "warmup", ("command", "gpus", "seq_lens", "triton_cache_dir", "step_timeout_s"))
    warmup = WarmupConfig(
        command=r.get(w, "warmup.command", str),
        gpus=tuple(r.get(w, "warmup.gpus", list, [], _int_list("warmup.gpus"))),
        seq_lens=tuple(r.get(w, "warmup.seq_lens", list, [], _int_list("warmup.seq_lens"))),
        triton_cache_dir=r.get(w, "warmup.triton_cache_dir", str, "~/.triton/cache"),
        step_timeout_s=float(r.get(w, "warmup.step_timeout_s", number, 1800.0, _positive)),
    )
    if warmup.command and not (warmup.gpus and warmup.seq_lens):
        r.problem("warmup.command", "needs warmup.gpus and warmup.seq_lens")
    if warmup.command and (why := placeholder_refusal(warmup.command, WARMUP_PLACEHOLDERS)):
        r.problem("warmup.command", why)

    s = r.table(data, "stall", ("log_silent_s", "cpu_idle_pct", "gpu_idle_pct", "sample_window_s"))
    stall = StallConfig(
        log_silent_s=_optional_float(r.get(s, "stall.log_silent_s", number, None, _positive)),
        cpu_idle_pct=float(r.get(s, "stall.cpu_idle_pct", number, 5.0, _percent)),
        gpu_idle_pct=float(r.get(s, "stall.gpu_idle_pct", number, 5.0, _percent)),
        sample_window_s=float(r.get(s, "stall.sample_window_s", number, 1.5, _positive)),
    )

    actions: list[CustomAction] = []
    raw_actions = data.get("actions", [])
    if not isinstance(raw_actions, list):
        r.problem("actions", "must be an array of tables: [[actions]]")
        raw_actions = []
    for i, a in enumerate(raw_actions):
        path = f"actions[{i}]"
        if not isinstance(a, dict):
            r.problem(path, "must be a table")
            continue
        a = r.table({path: a}, path, ("name", "key", "command", "confirm", "dangerous", "description", "mutating"))
        name, key, command = (r.get(a, f"{path}.{k}", str) for k in ("name", "key", "command"))
        for field_name, value in (("name", name), ("key", key), ("command", command)):
            if not value:
                r.problem(f"{path}.{field_name}", "is required")
        if key and len(key) != 1:
            r.problem(f"{path}.key", "must be a single character")
        if command and (why := placeholder_refusal(command, CUSTOM_PLACEHOLDERS)):
            r.problem(f"{path}.command", why)
        dangerous, mutating = r.get(a, f"{path}.dangerous", bool, False), r.get(a, f"{path}.mutating", bool, True)
        if dangerous and not mutating:
            r.problem(f"{path}.mutating", "a dangerous action changes something: drop mutating = false or dangerous")
        if name and key and command and len(key) == 1:
            actions.append(CustomAction(name, key, command, r.get(a, f"{path}.confirm", bool, True), dangerous,
                                        r.get(a, f"{path}.description", str, ""), mutating, r.where(f"{path}.key")))

    audit_log = r.get(data, "audit_log", str, DEFAULT_AUDIT_LOG)
    alerts = _alerts(r, data)
    watch = _watch(r, data)
    if problems:
        raise ConfigError(problems)
    return Config(target, run, gpus, metrics, warmup, stall, tuple(actions), audit_log, source, alerts, watch)


def _webhook_url(value: str) -> str | None:
    return None if re.match(r"https?://[^\s/]+", value) else "must be an http:// or https:// URL"


def _alerts(r: _Reader, data: dict) -> AlertsConfig:
    a = r.table(data, "alerts", ("terminal", "command", "webhook", "webhook_format", "hold_s", "recover_s",
                                 "min_interval_s", "timeout_s", "retries"))
    number = (int, float)
    return AlertsConfig(
        terminal=r.get(a, "alerts.terminal", bool, True),
        command=r.get(a, "alerts.command", str),
        webhook=r.get(a, "alerts.webhook", str, None, _webhook_url),
        webhook_format=r.get(a, "alerts.webhook_format", str, "json",
                             lambda v: None if v in ("json", "slack", "discord") else "must be json, slack or discord"),
        hold_s=float(r.get(a, "alerts.hold_s", number, 30.0, _not_negative)),
        recover_s=float(r.get(a, "alerts.recover_s", number, 60.0, _not_negative)),
        min_interval_s=float(r.get(a, "alerts.min_interval_s", number, 300.0, _not_negative)),
        timeout_s=float(r.get(a, "alerts.timeout_s", number, 10.0, _positive)),
        retries=r.get(a, "alerts.retries", int, 2, lambda v: None if 0 <= v <= 10 else "must be 0-10"),
    )


def _duration(value: str | int | float) -> str | None:
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except ValueError as exc:
            return str(exc)
    return _positive(value)


def _seconds(value: str | int | float) -> float:
    """A checked duration key's value ('10m', or a number of seconds) in seconds."""
    return parse_duration(value) if isinstance(value, str) else float(value)


def listen_address(text: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or 'PORT' (on 127.0.0.1), '[::1]:PORT' → (host, port); port 0 takes a free one.
    ValueError saying what an address looks like otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or int(port) > 65535 or any(c.isspace() or c in "[]/" for c in host) or host.startswith("-"):
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9464, or :9464 for this machine only)")
    return host or "127.0.0.1", int(port)


def _listen(value: str) -> str | None:
    try:
        listen_address(value)
    except ValueError as exc:
        return str(exc)
    return None


def _verdict_names(value: list) -> str | None:
    # Which names are verdicts is console.diagnose's to say (a layer above): the watch checks them.
    return None if value and all(isinstance(v, str) and v for v in value) else 'must be a list of verdict names, e.g. ["hung"]'


def _watch(r: _Reader, data: dict) -> WatchConfig:
    w = r.table(data, "watch", ("restart_on", "max_restarts", "restart_window", "restart_after", "metrics"))
    duration = (str, int, float)
    restart_on = tuple(r.get(w, "watch.restart_on", list, [], _verdict_names))
    max_restarts = r.get(w, "watch.max_restarts", int, None, lambda v: None if v >= 1 else "must be 1 or more")
    window_s = _seconds(r.get(w, "watch.restart_window", duration, 6 * 3600.0, _duration))
    after_s = _seconds(r.get(w, "watch.restart_after", duration, 600.0, _duration))
    metrics = r.get(w, "watch.metrics", str, None, _listen)
    source = r.where("watch.restart_on") if restart_on else ""
    return WatchConfig(restart_on, source, max_restarts, window_s, after_s,
                       None if metrics is None else listen_address(metrics))


@dataclass(frozen=True, slots=True)
class FileRule:
    """What a local file Pulse reads must be: a regular file of at most `limit` bytes; the words name it in errors."""

    noun: str
    """'config', as in 'no such config file'."""
    called: str
    """'a config', as in 'not a config'."""
    form: str
    """'a TOML file', as in 'a config is a TOML file'."""
    limit: int


CONFIG_FILE = FileRule("config", "a config", "a TOML file", MAX_CONFIG_BYTES)
#: asyncssh reads these itself; an ssh_config is kilobytes, a known_hosts file a line (~100-700 bytes) per host.
SSH_CONFIG_FILE = FileRule("ssh_config", "an ssh_config", "a text file", MAX_CONFIG_BYTES)
KNOWN_HOSTS_FILE = FileRule("known_hosts", "a known_hosts file", "a text file", 16 << 20)


def read_regular_file(path: str | Path, rule: FileRule, *, read: bool = True, missing_ok: bool = False) -> bytes | None:
    """The bytes of `path` when it is a regular file within `rule.limit` (or /dev/null: empty);
    ConfigError (one line, `path: what is wrong`) otherwise. None when it does not exist and
    `missing_ok`; b"" unread when only checked (`read` False).

    Opened without blocking and checked before reading, so a FIFO, a device (a link to
    /dev/zero) or a directory is refused at once instead of hanging or filling memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ConfigError([f"{path}: no such {rule.noun} file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    too_large = ConfigError([f"{path}: larger than {rule.limit >> 20} MiB: not {rule.called}"])
    try:
        info = os.fstat(fd)
        if stat.S_ISCHR(info.st_mode) and os.path.samestat(info, os.stat(os.devnull)):
            return b""  # `-F /dev/null`, `UserKnownHostsFile /dev/null`: the idiom for an empty file
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError([f"{path}: not a regular file: {rule.called} is {rule.form}"])
        if info.st_size > rule.limit:
            raise too_large
        if not read:
            return b""
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(rule.limit + 1)  # one past the cap: a file that grew since, or a size stat() does not know
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    finally:
        os.close(fd)
    if len(data) > rule.limit:
        raise too_large
    return data


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file: a regular file of at most MAX_CONFIG_BYTES (read_regular_file)."""
    path = Path(path)
    data = read_regular_file(path, CONFIG_FILE)
    assert data is not None  # neither missing_ok nor read=False: it returns the bytes or raises
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([f"{path}:{line}: not UTF-8 text (byte {exc.start})"]) from None
    return parse_config(text, str(path))


#: The flags that name a target or a path, as value_problem's kind; launch and match are text, where
#: only empty counts (a regex or a command may start with '-'), and so is --hosts as a whole (its
#: entries are names, checked one by one).
_VALUE_FLAGS: dict[str, str] = {
    "host": "name", **dict.fromkeys(CONTAINER_KINDS, "name"), "namespace": "name", "slurm_job": "name",
    "hosts": "text", "log": "path", "pidfile": "path", "known_hosts": "path", "ssh_config": "path", "py_spy": "path",
    "match": "text", "launch": "text",
}


def _flag_problem(args: argparse.Namespace) -> str | None:
    """The first flag whose value cannot be used, as one line; None when every one can."""
    for name, kind in _VALUE_FLAGS.items():
        value = getattr(args, name, None)
        if value is not None and (message := value_problem(value, kind)):
            return f"--{name.replace('_', '-')}: {message}"
    if getattr(args, "hosts", None) is not None:
        if message := _entries_problem([h.strip() for h in args.hosts.split(",")]):
            return f"--hosts: {message}"
    for name in ("pid", "root"):
        if (pid := getattr(args, name, None)) is not None and pid < 1:
            return f"--{name}: must be a process ID (1 or more), not {pid}"
    return None


def load_from_args(args: argparse.Namespace) -> Config:
    """The config file named on the command line (if any) with the target flags laid over it.

    A flag given is used as given: an empty one is refused (value_problem), never taken as absent.
    """
    if message := _flag_problem(args):
        raise ConfigError([message])
    config = load_config(args.config) if getattr(args, "config", None) else Config()
    t, u, m = config.target, config.run, config.metrics
    def get(name: str) -> Any:  # a flag's value as argparse typed it; None when not given
        return getattr(args, name, None)

    given = lambda name: get(name) is not None  # noqa: E731
    container = t.container
    for kind in CONTAINER_KINDS:
        if given(kind):
            container = Container(kind, get(kind), get("namespace") if kind == "kubectl" else None)
    if given("namespace"):
        if container is None or container.kind != "kubectl":
            raise ConfigError(["--namespace: only a kubectl pod has a namespace; give --kubectl POD with it"])
        container = replace(container, namespace=get("namespace"))
    if given("match"):
        if message := _regex(get("match")):
            raise ConfigError([f"--match: {message}"])
    if given("port") and not 0 < get("port") < 65536:
        raise ConfigError(["--port: must be 1-65535"])
    for flag, check in (("baseline", _positive), ("grace", _not_negative), ("stall_after", _positive)):
        if get(flag) is not None and (message := check(get(flag))):
            raise ConfigError([f"--{flag.replace('_', '-')}: {message}, not {get(flag):g}"])
    slurm_job, hosts = t.slurm_job, t.hosts
    if given("slurm_job"):
        if not _SLURM_JOB_ID.fullmatch(get("slurm_job")):
            raise ConfigError([f"--slurm-job: {get('slurm_job')!r} is not a Slurm job ID (digits)"])
        slurm_job, hosts = get("slurm_job"), ()
    if given("hosts"):
        hosts, slurm_job = tuple(h.strip() for h in get("hosts").split(",")), None
    flag_or = lambda name, value: get(name) if given(name) else value  # noqa: E731
    target = replace(
        t,
        host=flag_or("host", t.host),
        port=flag_or("port", t.port),
        container=container,
        known_hosts=flag_or("known_hosts", t.known_hosts),
        ssh_config=flag_or("ssh_config", t.ssh_config),
        py_spy=flag_or("py_spy", t.py_spy),
        accept_new_host_key=bool(get("accept_new_host_key")) or t.accept_new_host_key,
        slurm_job=slurm_job,
        hosts=hosts,
        reach=get("reach") or t.reach,
    )
    _check_ssh_files(target, args, config.source)
    run = replace(
        u,
        log=under_cwd(get("log"), u.cwd) if given("log") else u.log,
        match=flag_or("match", u.match),
        pidfile=under_cwd(get("pidfile"), u.cwd) if given("pidfile") else u.pidfile,
        launch=flag_or("launch", u.launch),
        grace_s=flag_or("grace", u.grace_s),
    )
    metrics = replace(m, baseline_tokens_per_s=get("baseline") or m.baseline_tokens_per_s)
    stall = config.stall
    if get("stall_after") is not None:
        stall = replace(stall, log_silent_s=get("stall_after"))
    return replace(config, target=_with_local_py_spy(target), run=run, metrics=metrics, stall=stall,
                   watch=_watch_flags(config.watch, args))


def _watch_flags(watch: WatchConfig, args) -> WatchConfig:
    """`pulse watch`'s policy and metrics flags laid over the config's [watch]: ConfigError naming the flag."""
    changes: dict[str, Any] = {}
    if (names := getattr(args, "restart_on", None)) is not None:
        names = tuple(name.strip() for name in names.split(","))
        if not all(names):
            raise ConfigError(["--restart-on: give verdict names separated by commas, e.g. --restart-on hung,dead"])
        changes.update(restart_on=names, restart_on_source="--restart-on")
    if (count := getattr(args, "max_restarts", None)) is not None:
        if count < 1:
            raise ConfigError([f"--max-restarts: must be 1 or more, not {count}"])
        changes["max_restarts"] = count
    for flag, key in (("restart_window", "restart_window_s"), ("restart_after", "restart_after_s")):
        if (text := getattr(args, flag, None)) is not None:
            if message := _duration(text):
                raise ConfigError([f"--{flag.replace('_', '-')}: {message}, not {text!r}"])
            changes[key] = _seconds(text)
    if (address := getattr(args, "metrics", None)) is not None:
        try:
            changes["metrics"] = listen_address(address)
        except ValueError as exc:
            raise ConfigError([f"--metrics: {exc}"]) from None
    return replace(watch, **changes) if changes else watch


def _check_ssh_files(target: TargetConfig, args, source: str) -> None:
    """--ssh-config and --known-hosts (or the config's keys) are regular files within their caps, before
    asyncssh reads them (console/remote/ssh.py checks again at each connection): ConfigError naming the flag or key."""
    for key, rule in (("ssh_config", SSH_CONFIG_FILE), ("known_hosts", KNOWN_HOSTS_FILE)):
        if path := getattr(target, key):
            where = f"--{key.replace('_', '-')}" if getattr(args, key, None) else f"{source}: target.{key}"
            try:
                read_regular_file(Path(path).expanduser(), rule, read=False, missing_ok=key == "known_hosts")
            except ConfigError as exc:
                raise ConfigError([f"{where}: {problem}" for problem in exc.problems]) from None


def under_cwd(path: str | None, cwd: str | None) -> str | None:
    """A relative `[run] log` or `pidfile` is where the run, started in `[run] cwd`, writes it: under
    cwd for every reader (the follower, the agents, the restart), which all start in the home."""
    if not path or not cwd or path.startswith(("/", "~")):
        return path
    return posixpath.join(cwd, path)


def _with_local_py_spy(target: TargetConfig) -> TargetConfig:
    """On this machine, outside a container, the default `py-spy` falls back to the one installed with
    Pulse when none is on PATH (pipx puts only `pulse` there)."""
    local = target.host is None and target.container is None and not (target.slurm_job or target.hosts)
    if not local or target.py_spy != "py-spy" or shutil.which("py-spy"):
        return target
    installed = Path(sys.executable).with_name("py-spy")
    return replace(target, py_spy=str(installed)) if installed.is_file() else target
