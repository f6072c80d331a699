"""The run's configuration: where it lives, how it is launched, what is normal for it.

Loaded from TOML (see README) or built from command-line flags. Validation errors
name file, line and key; loading does no I/O beyond reading the one file (and checking,
unread, the ssh_config and known_hosts files it names: read_regular_file).

Each table is a dataclass and each key one of its fields: the field's default is the key's, and its
type (or its TomlKey, where the type does not say it all) is how the key is read and checked.
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
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from console.paths import audit_log_path
from console.model import CONTAINER_KINDS, Container, MetricPattern
from console.placeholders import CUSTOM_PLACEHOLDERS, WARMUP_PLACEHOLDERS, placeholder_refusal
from console.units import parse_duration
from console.user_patterns import compile_metric_pattern

# -- what a value may be: each check says what is wrong with a value of the right type, or None --------


def _positive(value: float) -> str | None:
    return None if math.isfinite(value) and value > 0 else "must be a finite number greater than 0"


def _not_negative(value: float) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "must be a finite number, 0 or more"


def _percent(value: float) -> str | None:
    return None if math.isfinite(value) and 0 <= value <= 100 else "must be a percentage, 0 to 100"


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda value: None if value in choices else f"must be {', '.join(choices[:-1])} or {choices[-1]}"


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


def _int_list(name: str) -> Callable[[list], str | None]:
    def check(value: list) -> str | None:
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return f"{name} must be a list of non-negative integers"
        return None

    return check


def _webhook_url(value: str) -> str | None:
    return None if re.match(r"https?://[^\s/]+", value) else "must be an http:// or https:// URL"


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


# -- how a field is read from its key --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TomlKey:
    """How a config field is read from its key, where the field's name and type do not say it all."""

    check: Callable[[Any], str | None] | None = None
    """What is wrong with a value of the right type (one of the checks above)."""
    name: str = ""
    """The key, when it is not the field's name ('restart_window' sets restart_window_s)."""
    types: tuple[type, ...] = ()
    """The TOML types the key takes, when the field's type does not say them (a duration: '6h' or seconds)."""
    parse: Callable[[Any], Any] | None = None
    """The field's value from a checked value of one of `types`."""
    read: Callable[[_Reader, str, Any], Any] | None = None
    """The field's value from the key's whole value, which holds several settings: it checks the value
    itself and names each problem at its own key ('gpus.roles.b')."""


_DURATION = (str, int, float)


def _key(default: Any = MISSING, check: Callable[[Any], str | None] | None = None, *,
         factory: Callable[[], Any] | Any = MISSING, **how: Any) -> Any:
    """A field read from its key as `how` (TomlKey's fields) says, taking `default` when the key is absent."""
    return field(default=default, default_factory=factory, metadata={"toml": TomlKey(check, **how)})


#: The metadata of a field Pulse fills in (where a key was set, a fleet node's job): no key sets it.
_NOT_A_KEY = {"toml": None}


def _container(r: _Reader, path: str, value: Any) -> Container | None:
    """`{ kind = "pct", id = "200" }`; kind "none", or no kind, is no container."""
    if not isinstance(value, dict):
        r.problem(path, 'must be a table like { kind = "pct", id = "200" }')
        return None
    r.table(value, path, Container)
    kind = r.get(value, f"{path}.kind", (str,))
    if kind in (None, "none"):
        return None
    if kind not in CONTAINER_KINDS:
        r.problem(f"{path}.kind", f"must be {', '.join(CONTAINER_KINDS)} or none, not {kind!r}")
        return None
    if "id" not in value:
        r.problem(f"{path}.id", f"is required for a {kind} container")
        return None
    cid = r.get(value, f"{path}.id", (str, int), _name_value)
    return None if cid is None else Container(kind, str(cid), r.get(value, f"{path}.namespace", (str,), _name_value))


def _env(r: _Reader, path: str, value: Any) -> dict[str, str]:
    env = {}
    for key, text in r.entries(path, value):
        if isinstance(text, str):
            env[key] = text
        else:
            r.problem(f"{path}.{key}", f"must be a string, not {type(text).__name__}")
    return env


def _roles(r: _Reader, path: str, value: Any) -> dict[int, str]:
    """GPU index → role, from `role = [indices]`: one role per GPU."""
    roles: dict[int, str] = {}
    for role, indices in r.entries(path, value):
        if not isinstance(indices, list) or _int_list("")(indices):
            r.problem(f"{path}.{role}", "must be a list of GPU indices, e.g. [0, 1, 2]")
            continue
        for index in indices:
            if index in roles:
                r.problem(f"{path}.{role}", f"GPU {index} already has role {roles[index]!r}")
            roles[index] = role
    return roles


def _patterns(r: _Reader, path: str, value: Any) -> tuple[MetricPattern, ...]:
    patterns: list[MetricPattern] = []
    for name, regex in r.entries(path, value):
        if not isinstance(regex, str):
            r.problem(f"{path}.{name}", "must be a string")
            continue
        try:
            compile_metric_pattern(regex, name)
        except ValueError as exc:
            r.problem(f"{path}.{name}", str(exc))
        else:
            patterns.append(MetricPattern(name, regex))
    return tuple(patterns)


def _actions(r: _Reader, path: str, value: Any) -> tuple[CustomAction, ...]:
    """The [[actions]] that are whole: a name, a one-character key and a command."""
    if not isinstance(value, list):
        r.problem(path, "must be an array of tables: [[actions]]")
        return ()
    actions = []
    for i, table in enumerate(value):
        at = f"{path}[{i}]"
        if not isinstance(table, dict):
            r.problem(at, "must be a table")
            continue
        # A required key left out reads as empty, so that each is named below.
        action = r.fields(table, at, CustomAction, name="", key="", command="", key_source=r.where(f"{at}.key"))
        for name in ("name", "key", "command"):
            if not getattr(action, name):
                r.problem(f"{at}.{name}", "is required")
        if action.key and len(action.key) != 1:
            r.problem(f"{at}.key", "must be a single character")
        if action.command and (why := placeholder_refusal(action.command, CUSTOM_PLACEHOLDERS)):
            r.problem(f"{at}.command", why)
        if action.dangerous and not action.mutating:
            r.problem(f"{at}.mutating", "a dangerous action changes something: drop mutating = false or dangerous")
        if action.name and action.command and len(action.key) == 1:
            actions.append(action)
    return tuple(actions)


# -- the tables ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TargetConfig:
    host: str | None = _key(None, _name_value)
    """`user@host` or a ~/.ssh/config alias; None means this machine."""
    port: int | None = _key(None, lambda v: None if 0 < v < 65536 else "must be 1-65535")
    container: Container | None = _key(None, read=_container)
    accept_new_host_key: bool = False
    """Trust an unknown host key on first connection (never a changed one)."""
    known_hosts: str | None = _key(None, _path_value)
    """A known_hosts file to check against instead of ~/.ssh/known_hosts."""
    ssh_config: str | None = _key(None, _path_value)
    """An ssh_config file to read instead of ~/.ssh/config."""
    python: str = _key("python3", _path_value)
    """The interpreter on the target that runs Pulse's agent (any Python 3.8+)."""
    py_spy: str = _key("py-spy", _path_value)
    nvidia_smi: str = _key("nvidia-smi", _path_value)
    slurm_job: str | None = _key(None, _name_value, types=(str, int), parse=lambda v: str(v).strip())
    """A Slurm job ID: the run is that job, on every node Slurm gave it (see console/fleet)."""
    hosts: tuple[str, ...] = _key((), _host_list)
    """The run's nodes when there is no scheduler: each reached like `host`."""
    reach: str = _key("ssh", _one_of("ssh", "srun"))
    """How a Slurm job's nodes are reached: 'ssh' (~/.ssh/config, ProxyJump) or 'srun' (--overlap in the job)."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    name: str = "run"
    launch: str | None = None
    """The exact command that starts the run (used by restart)."""
    cwd: str | None = _key(None, _path_value)
    log: str | None = _key(None, _path_value)
    """The log path; may contain `{started}` (restart fills it with a timestamp) or a glob."""
    match: str | None = _key(None, _regex)
    """A regex over /proc/PID/cmdline that finds the run's processes."""
    pidfile: str | None = _key(None, _path_value)
    slurm_job: str | None = field(default=None, metadata=_NOT_A_KEY)
    """The Slurm job whose processes are the run's, on one node of a fleet (`match` narrows within it)."""
    env: dict[str, str] = _key(factory=dict, read=_env)
    grace_s: float = _key(30.0, _not_negative)
    """SIGTERM → SIGKILL grace period for restart."""


@dataclass(frozen=True, slots=True)
class GpuConfig:
    roles: dict[int, str] = _key(factory=dict, read=_roles)
    """GPU index → role name (e.g. 'target', 'drafter')."""
    source: str = _key("auto", _one_of("auto", "nvml", "nvidia-smi"))
    """'auto' (NVML, then nvidia-smi), 'nvml' or 'nvidia-smi'."""
    poll_s: float = _key(1.0, _positive)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    baseline_tokens_per_s: float | None = _key(None, _positive)
    baseline_samples_per_s: float | None = _key(None, _positive)
    baseline_it_per_s: float | None = _key(None, _positive)
    slow_fraction: float = _key(0.8, lambda v: None if 0 < v <= 1 else "must be in (0, 1]")
    """Throughput below this fraction of baseline is `slow`."""
    patterns: tuple[MetricPattern, ...] = _key((), read=_patterns)

    def baseline(self, metric: str) -> float | None:
        return getattr(self, f"baseline_{metric}", None)


@dataclass(frozen=True, slots=True)
class WarmupConfig:
    command: str | None = None
    """Template with {gpu} and {seq_len}."""
    gpus: tuple[int, ...] = _key((), _int_list("warmup.gpus"))
    seq_lens: tuple[int, ...] = _key((), _int_list("warmup.seq_lens"))
    triton_cache_dir: str = "~/.triton/cache"
    step_timeout_s: float = _key(1800.0, _positive)


@dataclass(frozen=True, slots=True)
class StallConfig:
    log_silent_s: float | None = _key(None, _positive)
    """Silence that makes a stall, set explicitly; None learns it from the run's rhythm (console.diagnose)."""
    cpu_idle_pct: float = _key(5.0, _percent)
    """A process under this CPU% (by delta) counts as idle."""
    gpu_idle_pct: float = _key(5.0, _percent)
    sample_window_s: float = _key(1.5, _positive)


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
    key_source: str = field(default="", metadata=_NOT_A_KEY)
    """Where the config sets `key`, as an error about it starts: 'pulse.toml:3: actions[0].key'."""


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """Where alerts go when the verdict gets worse or recovers (see console/alerts.py)."""

    terminal: bool = True
    """Ring the bell and send an OSC 9 / OSC 777 desktop notification to the terminal."""
    command: str | None = None
    """A shell command that gets the alert as JSON on stdin and PULSE_ALERT_* variables."""
    webhook: str | None = _key(None, _webhook_url)
    """An http(s) URL the alert is POSTed to as JSON."""
    webhook_format: str = _key("json", _one_of("json", "slack", "discord"))
    """'json' (the alert object), 'slack' ({"text": …}) or 'discord' ({"content": …})."""
    hold_s: float = _key(30.0, _not_negative)
    """A worse verdict must last this long before it is announced."""
    recover_s: float = _key(60.0, _not_negative)
    """A recovery must last this long before it is announced."""
    min_interval_s: float = _key(300.0, _not_negative)
    """At most one alert this often; one held back is sent when the interval ends, if still true."""
    timeout_s: float = _key(10.0, _positive)
    """Each delivery attempt's limit."""
    retries: int = _key(2, lambda v: None if 0 <= v <= 10 else "must be 0-10")
    """Further attempts of a webhook after a failed one."""


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What `pulse watch` does beyond the journal and the alerts: its restart policy and its metrics
    endpoint (console/journal/policy.py, console/journal/metrics.py). Flags of the same names win."""

    restart_on: tuple[str, ...] = _key((), _verdict_names)
    """Verdicts that restart the run once they have lasted `restart_after_s` (none: never restarts)."""
    restart_on_source: str = field(default="", metadata=_NOT_A_KEY)
    """Where the config sets `restart_on`, as an error about it starts: 'run.toml:12: watch.restart_on'."""
    max_restarts: int | None = _key(None, lambda v: None if v >= 1 else "must be 1 or more")
    """The most automatic restarts within `restart_window_s`; required with `restart_on`."""
    restart_window_s: float = _key(6 * 3600.0, _duration, name="restart_window", types=_DURATION, parse=_seconds)
    restart_after_s: float = _key(600.0, _duration, name="restart_after", types=_DURATION, parse=_seconds)
    metrics: tuple[str, int] | None = _key(None, _listen, types=(str,), parse=listen_address)
    """(host, port) of the Prometheus endpoint; None serves none."""


DEFAULT_AUDIT_LOG = str(audit_log_path())  # ~/.local/state/pulse/audit.jsonl on Linux


@dataclass(frozen=True, slots=True)
class Config:
    """The whole file: a table per field, and the keys `actions` and `audit_log`."""

    target: TargetConfig = field(default_factory=TargetConfig)
    run: RunConfig = field(default_factory=RunConfig)
    gpus: GpuConfig = field(default_factory=GpuConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    stall: StallConfig = field(default_factory=StallConfig)
    actions: tuple[CustomAction, ...] = _key((), read=_actions)
    audit_log: str = DEFAULT_AUDIT_LOG
    source: str = field(default="<flags>", metadata=_NOT_A_KEY)
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
#: A field's type (`X` of `X | None`) → the TOML types its key takes, and how its value is made from them.
_FROM_TOML: dict[type, tuple[tuple[type, ...], Callable[[Any], Any] | None]] = {
    str: ((str,), None), bool: ((bool,), None), int: ((int,), None), float: ((int, float), float), tuple: ((list,), tuple)}
_KEYS: dict[type, dict[str, tuple[Field, TomlKey, Any]]] = {}  # each class's, worked out on its first read


def _keys(cls: type) -> dict[str, tuple[Field, TomlKey, Any]]:
    """The fields of a config dataclass that keys set, by key, each with how it is read and its type."""
    if cls not in _KEYS:
        hints = get_type_hints(cls)
        _KEYS[cls] = {how.name or f.name: (f, how, hints[f.name]) for f in fields(cls)
                      if (how := f.metadata.get("toml", TomlKey())) is not None}
    return _KEYS[cls]


def _bare(hint: Any) -> Any:
    """`X` of `X | None`, and `tuple` of `tuple[int, ...]`."""
    if get_origin(hint) is UnionType:
        hint = next(arg for arg in get_args(hint) if arg is not NoneType)
    return get_origin(hint) or hint


Table = TypeVar("Table")


class _Reader:
    """Typed access to one file's tables, collecting problems as `file:line: key: message`."""

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

    def table(self, value: Any, path: str, cls: type) -> dict:
        """`value` when it is a table of `cls`'s keys ('' the file's); every other key named."""
        if not isinstance(value, dict):
            self.problem(path, "must be a table")
            return {}
        known = _keys(cls)
        for key in value:
            if key not in known:
                self.problem(f"{path}.{key}" if path else key,
                             f"unknown {'key' if path else 'section'} (known: {', '.join(known)})")
        return value

    def entries(self, path: str, value: Any) -> Iterable[tuple[str, Any]]:
        """The keys and values of a table that holds one setting per key (gpus.roles)."""
        return value.items() if self.is_a(path, value, (dict,)) else ()

    def is_a(self, path: str, value: Any, kinds: tuple[type, ...]) -> bool:
        """Whether `value` is one of the TOML types `kinds` (true is no number); the problem named when not."""
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(dict.fromkeys(_TYPE_NAMES[k] for k in kinds))
            self.problem(path, f"must be {names}, not {json.dumps(value, default=str)}")
            return False
        return True

    def get(self, table: dict, path: str, kinds: tuple[type, ...], check: Callable[[Any], str | None] | None = None) -> Any:
        """The value of `path`'s key in `table` when it is of `kinds` and `check` finds nothing wrong;
        None when the key is absent or has a problem (named). TOML has no null: None is never a value."""
        key = path.rsplit(".", 1)[-1]
        if key not in table or not self.is_a(path, value := table[key], kinds):
            return None
        if check is not None and (message := check(value)):
            self.problem(path, message)
            return None
        return value

    def fields(self, data: Any, path: str, cls: type[Table], **unset: Any) -> Table:
        """A `cls` from the table `data` at `path`, each field from its key; a field whose key is absent or has
        a problem (named) takes its value in `unset`, else its default."""
        table, values = self.table(data, path, cls), dict(unset)
        for key, (f, how, hint) in _keys(cls).items():
            if key not in table:
                continue
            at = f"{path}.{key}" if path else key
            if isinstance(hint, type) and is_dataclass(hint):
                values[f.name] = self.fields(table[key], at, hint)
            elif how.read is not None:
                values[f.name] = how.read(self, at, table[key])
            else:
                kinds, parse = (how.types, how.parse) if how.types else _FROM_TOML[_bare(hint)]
                if (value := self.get(table, at, kinds, how.check)) is not None:
                    values[f.name] = value if parse is None else parse(value)
        return cls(**values)


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
    config = r.fields(data, "", Config, source=source)
    target, run, warmup, watch = config.target, config.run, config.warmup, config.watch
    if target.slurm_job is not None and not _SLURM_JOB_ID.fullmatch(target.slurm_job):
        r.problem("target.slurm_job", f"must be a Slurm job ID (digits), not {target.slurm_job!r}")
    if target.slurm_job is not None and target.hosts:
        r.problem("target.hosts", "give either slurm_job or hosts, not both")
    if warmup.command and not (warmup.gpus and warmup.seq_lens):
        r.problem("warmup.command", "needs warmup.gpus and warmup.seq_lens")
    if warmup.command and (why := placeholder_refusal(warmup.command, WARMUP_PLACEHOLDERS)):
        r.problem("warmup.command", why)
    if problems:
        raise ConfigError(problems)
    if watch.restart_on:
        watch = replace(watch, restart_on_source=r.where("watch.restart_on"))
    return replace(config, run=replace(run, log=under_cwd(run.log, run.cwd), pidfile=under_cwd(run.pidfile, run.cwd)),
                   watch=watch)


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


#: The flags that set one key each, as given: flag → (table, field).
_FLAG_KEYS = {
    "host": ("target", "host"), "port": ("target", "port"), "known_hosts": ("target", "known_hosts"),
    "ssh_config": ("target", "ssh_config"), "py_spy": ("target", "py_spy"), "reach": ("target", "reach"),
    "match": ("run", "match"), "launch": ("run", "launch"), "grace": ("run", "grace_s"),
    "baseline": ("metrics", "baseline_tokens_per_s"), "stall_after": ("stall", "log_silent_s"),
}


def load_from_args(args: argparse.Namespace) -> Config:
    """The config file named on the command line (if any) with the target flags laid over it.

    A flag given is used as given: an empty one is refused (value_problem), never taken as absent.
    """
    if message := _flag_problem(args):
        raise ConfigError([message])
    config = load_config(args.config) if getattr(args, "config", None) else Config()
    def get(name: str) -> Any:  # a flag's value as argparse typed it; None when not given
        return getattr(args, name, None)

    given = lambda name: get(name) is not None  # noqa: E731
    container = config.target.container
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
    target: dict[str, Any] = {"container": container}
    if given("slurm_job"):
        if not _SLURM_JOB_ID.fullmatch(get("slurm_job")):
            raise ConfigError([f"--slurm-job: {get('slurm_job')!r} is not a Slurm job ID (digits)"])
        target.update(slurm_job=get("slurm_job"), hosts=())
    if given("hosts"):
        target.update(hosts=tuple(h.strip() for h in get("hosts").split(",")), slurm_job=None)
    if get("accept_new_host_key"):  # store_true: False is not given
        target["accept_new_host_key"] = True
    changes = {"target": target, "run": {flag: under_cwd(get(flag), config.run.cwd) for flag in ("log", "pidfile")
                                         if given(flag)}}
    for flag, (table, key) in _FLAG_KEYS.items():
        if given(flag):
            changes.setdefault(table, {})[key] = get(flag)
    config = replace(config, **{table: replace(getattr(config, table), **values) for table, values in changes.items()})
    _check_ssh_files(config.target, args, config.source)
    return replace(config, target=_with_local_py_spy(config.target), watch=_watch_flags(config.watch, args))


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
    if not local or target.py_spy != TargetConfig().py_spy or shutil.which(target.py_spy):
        return target
    installed = Path(sys.executable).with_name("py-spy")
    return replace(target, py_spy=str(installed)) if installed.is_file() else target
