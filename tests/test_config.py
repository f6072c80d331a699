"""Config loading: valid files, every problem reported as file:line: key: message, flags over files."""

import argparse
import json
from dataclasses import MISSING, Field, fields

import pytest

from console.cli import build_command_parser
from console.config import (AlertsConfig, Config, ConfigError, CustomAction, GpuConfig, MetricsConfig, RunConfig,
                            StallConfig, TargetConfig, WarmupConfig, WatchConfig, load_config, load_from_args,
                            parse_config)
from console.model import Container, MetricPattern

DESIGN_EXAMPLE = """
[target]
host = "root@10.1.2.6"
container = { kind = "pct", id = "200" }

[run]
launch = "python3 -u /root/train_dflash_pipeline.py --target-gpus 0,1,2,3,4 --drafter-gpus 5,6,7"
log = "/workspace/train_{started}.log"
match = 'python3.*train_dflash_pipeline\\.py'
env = { PYTHONUNBUFFERED = "1" }

[gpus]
roles = { target = [0, 1, 2, 3, 4], drafter = [5, 6, 7] }

[metrics]
baseline_tokens_per_s = 14200

[warmup]
command = "python3 /root/warmup.py --gpu {gpu} --seq-len {seq_len}"
gpus = [0, 1, 2, 3, 4]
seq_lens = [770, 1216, 1728, 2432, 3296, 8192]

[stall]
log_silent_s = 300

[[actions]]
name = "nvtop snapshot"
key = "g"
command = "nvidia-smi -i {gpu}"
dangerous = false
"""


def test_design_example_loads():
    config = parse_config(DESIGN_EXAMPLE, "run.toml")
    assert config.target.host == "root@10.1.2.6"
    assert config.target.container == Container("pct", "200")
    assert config.run.match == r"python3.*train_dflash_pipeline\.py"
    assert config.run.env == {"PYTHONUNBUFFERED": "1"}
    assert config.gpus.roles == {0: "target", 1: "target", 2: "target", 3: "target", 4: "target",
                                 5: "drafter", 6: "drafter", 7: "drafter"}
    assert config.metrics.baseline("tokens_per_s") == 14200
    assert config.warmup.seq_lens == (770, 1216, 1728, 2432, 3296, 8192)
    assert config.stall.log_silent_s == 300.0
    assert config.actions[0].key == "g" and not config.actions[0].dangerous
    assert config.source == "run.toml"


def test_empty_config_is_local_defaults():
    assert parse_config("", "empty.toml") == Config(source="empty.toml")


#: Each table ("" the file's own keys) and its dataclass.
TABLES = {"": Config, "target": TargetConfig, "run": RunConfig, "gpus": GpuConfig, "metrics": MetricsConfig,
          "warmup": WarmupConfig, "stall": StallConfig, "actions": CustomAction, "alerts": AlertsConfig,
          "watch": WatchConfig}
#: Fields Pulse fills in, that no key sets.
SET_BY_PULSE = {"": {"source"}, "run": {"slurm_job"}, "actions": {"key_source"}, "watch": {"restart_on_source"}}
#: Every key of every table, as TOML, with the field it sets and the value it gives there, none the default
#: (a table's keys in one or more files: target's slurm_job and hosts exclude each other). A field added to a
#: dataclass fails the test below until it is here or in SET_BY_PULSE.
EVERY_KEY: dict[str, list[dict[str, tuple[str, str, object]]]] = {
    "": [{"audit_log": ('"/var/pulse/audit.jsonl"', "audit_log", "/var/pulse/audit.jsonl")}],
    "target": [
        {"host": ('"gpu-box"', "host", "gpu-box"), "port": ("2222", "port", 2222),
         "container": ('{ kind = "kubectl", id = "pod-0", namespace = "ml" }', "container", Container("kubectl", "pod-0", "ml")),
         "accept_new_host_key": ("true", "accept_new_host_key", True), "known_hosts": ('"/k"', "known_hosts", "/k"),
         "ssh_config": ('"/s"', "ssh_config", "/s"), "python": ('"python3.12"', "python", "python3.12"),
         "py_spy": ('"/opt/py-spy"', "py_spy", "/opt/py-spy"), "nvidia_smi": ('"/opt/smi"', "nvidia_smi", "/opt/smi"),
         "slurm_job": ("4242", "slurm_job", "4242"), "reach": ('"srun"', "reach", "srun")},
        {"hosts": ('["n1", "n2"]', "hosts", ("n1", "n2"))},
    ],
    "run": [{"name": ('"train"', "name", "train"), "launch": ('"python3 train.py"', "launch", "python3 train.py"),
             "cwd": ('"~/proj"', "cwd", "~/proj"), "log": ('"out.log"', "log", "~/proj/out.log"),
             "match": ("'train\\.py'", "match", "train\\.py"), "pidfile": ('"/run.pid"', "pidfile", "/run.pid"),
             "env": ('{ A = "1" }', "env", {"A": "1"}), "grace_s": ("5", "grace_s", 5.0)}],
    "gpus": [{"roles": ("{ target = [0, 1] }", "roles", {0: "target", 1: "target"}),
              "source": ('"nvml"', "source", "nvml"), "poll_s": ("2", "poll_s", 2.0)}],
    "metrics": [{"baseline_tokens_per_s": ("14200", "baseline_tokens_per_s", 14200.0),
                 "baseline_samples_per_s": ("30", "baseline_samples_per_s", 30.0),
                 "baseline_it_per_s": ("2.5", "baseline_it_per_s", 2.5), "slow_fraction": ("0.5", "slow_fraction", 0.5),
                 "patterns": ("{ loss = 'loss (?P<value>[0-9.]+)' }", "patterns",
                              (MetricPattern("loss", "loss (?P<value>[0-9.]+)"),))}],
    "warmup": [{"command": ('"w --gpu {gpu} --seq-len {seq_len}"', "command", "w --gpu {gpu} --seq-len {seq_len}"),
                "gpus": ("[0]", "gpus", (0,)), "seq_lens": ("[8]", "seq_lens", (8,)),
                "triton_cache_dir": ('"/t"', "triton_cache_dir", "/t"), "step_timeout_s": ("60", "step_timeout_s", 60.0)}],
    "stall": [{"log_silent_s": ("300", "log_silent_s", 300.0), "cpu_idle_pct": ("10", "cpu_idle_pct", 10.0),
               "gpu_idle_pct": ("20", "gpu_idle_pct", 20.0), "sample_window_s": ("3", "sample_window_s", 3.0)}],
    "actions": [
        {"name": ('"n"', "name", "n"), "key": ('"g"', "key", "g"), "command": ('"c {gpu}"', "command", "c {gpu}"),
         "confirm": ("false", "confirm", False), "dangerous": ("true", "dangerous", True),
         "description": ('"d"', "description", "d")},
        {"name": ('"n"', "name", "n"), "key": ('"g"', "key", "g"), "command": ('"c"', "command", "c"),
         "mutating": ("false", "mutating", False)},
    ],
    "alerts": [{"terminal": ("false", "terminal", False), "command": ('"notify"', "command", "notify"),
                "webhook": ('"https://h/x"', "webhook", "https://h/x"), "webhook_format": ('"slack"', "webhook_format", "slack"),
                "hold_s": ("1", "hold_s", 1.0), "recover_s": ("2", "recover_s", 2.0),
                "min_interval_s": ("3", "min_interval_s", 3.0), "timeout_s": ("4", "timeout_s", 4.0),
                "retries": ("5", "retries", 5)}],
    "watch": [{"restart_on": ('["hung"]', "restart_on", ("hung",)), "max_restarts": ("3", "max_restarts", 3),
               "restart_window": ('"2h"', "restart_window_s", 7200.0), "restart_after": ("90", "restart_after_s", 90.0),
               "metrics": ('":9464"', "metrics", ("127.0.0.1", 9464))}],
}


def default_of(f: Field) -> object:
    return f.default_factory() if f.default_factory is not MISSING else f.default


@pytest.mark.parametrize("table", TABLES)
def test_every_field_is_one_key_read_with_the_fields_default_when_absent(table):
    """The reader reads each field from its key and refuses every other key; a field not set keeps its default."""
    cls, files = TABLES[table], EVERY_KEY[table]
    header = "[[actions]]\n" if table == "actions" else f"[{table}]\n" if table else ""
    with pytest.raises(ConfigError) as unknown:
        parse_config(f"{header}not_a_key = 1\n", "c.toml")
    known = unknown.value.problems[0].split("(known: ")[1].rstrip(")").split(", ")
    tables = {t for t in TABLES if t} if not table else set()  # the file's keys include its tables
    keys = {key for sample in files for key in sample} | tables
    assert set(known) == keys and len(known) == len(keys)
    set_by_keys = {name for sample in files for _, name, _ in sample.values()} | tables
    assert set_by_keys | SET_BY_PULSE.get(table, set()) == {f.name for f in fields(cls)}
    defaults = {f.name: default_of(f) for f in fields(cls) if f.name not in SET_BY_PULSE.get(table, set())}
    for sample in files:
        config = parse_config(header + "".join(f"{key} = {text}\n" for key, (text, _, _) in sample.items()), "c.toml")
        read = config.actions[0] if table == "actions" else getattr(config, table) if table else config
        expected = {name: value for _, name, value in sample.values()}
        assert all(value != defaults[name] for name, value in expected.items())
        assert {name: getattr(read, name) for name in defaults} == {**defaults, **expected}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[target]\nhots = 'x'\n", "bad.toml:2: target.hots: unknown key"),
        ("[runn]\nlog = 'x'\n", "bad.toml:1: runn: unknown section"),
        ("[run]\nmatch = 'train(.py'\n", "bad.toml:2: run.match: not a valid regular expression"),
        ("[metrics]\n\nbaseline_tokens_per_s = 'fast'\n", 'bad.toml:3: metrics.baseline_tokens_per_s: must be a number, not "fast"'),
        ("[stall]\nlog_silent_s = -1\n", "bad.toml:2: stall.log_silent_s: must be a finite number greater than 0"),
        ("[target]\ncontainer = { kind = 'lxc', id = '1' }\n", "bad.toml:2: target.container.kind: must be pct, docker, kubectl or none"),
        ("[target]\ncontainer = { kind = 'docker' }\n", "bad.toml:2: target.container.id: is required"),
        ("[gpus]\nroles = { a = [0], b = [0] }\n", "bad.toml:2: gpus.roles.b: GPU 0 already has role 'a'"),
        ("[warmup]\ncommand = 'w {gpu}'\n", "bad.toml:2: warmup.command: needs warmup.gpus and warmup.seq_lens"),
        ("[metrics]\npatterns = { loss = 'L=([0-9.]+)' }\n", "bad.toml:2: metrics.patterns.loss: metric pattern"),
        ("[run\n", "bad.toml:1: invalid TOML"),
    ],
)
def test_each_problem_names_file_line_and_key(text, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(text, "bad.toml")
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse_config("[target]\nport = 0\nfoo = 1\n[run]\ngrace_s = 'long'\n", "bad.toml")
    assert len(info.value.problems) == 3
    assert all(p.startswith("bad.toml:") and "\n" not in p for p in info.value.problems)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"no such config file"):
        load_config(tmp_path / "absent.toml")


def test_flags_lay_over_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(DESIGN_EXAMPLE)
    args = build_command_parser("check").parse_args(
        [str(path), "--host", "gpu-box", "--docker", "trainer", "--log", "/tmp/x.log", "--baseline", "9000",
         "--stall-after", "12"]
    )
    config = load_from_args(args)
    assert config.target.host == "gpu-box"
    assert config.target.container == Container("docker", "trainer")
    assert config.run.log == "/tmp/x.log"
    assert config.run.match == r"python3.*train_dflash_pipeline\.py"
    assert config.metrics.baseline_tokens_per_s == 9000
    assert config.stall.log_silent_s == 12


def test_a_relative_log_and_pidfile_are_under_the_runs_folder(tmp_path):
    """The run writes them from [run] cwd; the follower, the agents and the restart start in the home."""
    path = tmp_path / "run.toml"
    path.write_text('[run]\ncwd = "~/proj"\nlog = "logs/train.log"\npidfile = "run.pid"\n')
    run = load_config(str(path)).run
    assert (run.log, run.pidfile) == ("~/proj/logs/train.log", "~/proj/run.pid")
    path.write_text('[run]\ncwd = "proj"\nlog = "/var/log/train.log"\npidfile = "~/run.pid"\n')
    run = load_config(str(path)).run
    assert (run.log, run.pidfile) == ("/var/log/train.log", "~/run.pid")  # absolute, or the home's: as written
    args = build_command_parser("check").parse_args([str(path), "--log", "out/train.log"])
    assert load_from_args(args).run.log == "proj/out/train.log"
    path.write_text('[run]\nlog = "logs/train.log"\n')
    assert load_config(str(path)).run.log == "logs/train.log"  # no cwd: where the shell starts


def test_flags_alone_make_a_local_config():
    args = build_command_parser("check").parse_args(["--match", "train\\.py", "--log", "/tmp/t.log"])
    config = load_from_args(args)
    assert config.target.host is None and config.run.match == "train\\.py"


def test_bad_flag_regex_is_one_line():
    args = argparse.Namespace(config=None, match="(")
    with pytest.raises(ConfigError, match=r"^--match: not a valid regular expression"):
        load_from_args(args)


def test_a_custom_action_cannot_take_a_key_the_console_binds():
    """Every printable key the action table binds is refused, naming file, line and key; every other is free."""
    import string

    from textual.keys import _character_to_key

    from console.ui.keymap import ACTIONS, taken_keys

    bound = {key for spec in ACTIONS for key in spec.keys.split(",")}
    for c in string.printable.strip():
        toml = f"[[actions]]\nname = 'x'\n\nkey = {json.dumps(c)}\ncommand = 'y'\n"
        expected = [f"bad.toml:4: actions[0].key: {c!r} is taken by a built-in key"] if _character_to_key(c) in bound else []
        assert taken_keys(parse_config(toml, "bad.toml")) == expected, c
    assert {"?", "q", "R", "/", "\\", "#"} <= {c for c in string.printable if _character_to_key(c) in bound}


def test_the_console_refuses_a_custom_action_on_its_key_in_one_line(tmp_path, capsys):
    """`pulse CONFIG` stops before connecting anywhere: exit 2, one line naming the file, the line and the key."""
    from console.cli import main

    path = tmp_path / "run.toml"
    path.write_text("[run]\nmatch = 'train\\\\.py'\n\n[[actions]]\nname = 'x'\nkey = 'q'\ncommand = 'y'\n")
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == f"{path}:6: actions[0].key: 'q' is taken by a built-in key\n"
