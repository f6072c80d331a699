"""Config loading: valid files, every problem reported as file:line: key: message, flags over files."""

import argparse
import json

import pytest

from console.cli import build_command_parser
from console.config import Config, ConfigError, load_config, load_from_args, parse_config
from console.model import Container

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
