"""Issue 11 rows 13 and 15: numbers and config files are bounded before anything acts on them.

Row 13: `--grace nan` / `inf` left restart waiting forever for a SIGKILL that never came
(the CLI case: tests/safety/test_launch_guards.py; here every number, from flags and config).
Row 15: a config that is a FIFO hung; a link to /dev/zero grew memory without bound; a
100k-deep array ended in a 3,000-line RecursionError traceback. Each is now one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from console.config import MAX_CONFIG_BYTES, ConfigError, load_config, load_from_args, parse_config
from tests.safety.namespace import HEALTHY, in_namespace, pulse_beside_a_run

@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[run]\ngrace_s = nan\n", "c.toml:2: run.grace_s: must be a finite number, 0 or more"),
        ("[run]\ngrace_s = inf\n", "c.toml:2: run.grace_s: must be a finite number, 0 or more"),
        ("[run]\ngrace_s = -5\n", "c.toml:2: run.grace_s: must be a finite number, 0 or more"),
        ("[warmup]\nstep_timeout_s = inf\n", "c.toml:2: warmup.step_timeout_s: must be a finite number greater than 0"),
        ("[gpus]\npoll_s = nan\n", "c.toml:2: gpus.poll_s: must be a finite number greater than 0"),
        ("[stall]\nlog_silent_s = inf\n", "c.toml:2: stall.log_silent_s: must be a finite number greater than 0"),
        ("[stall]\nsample_window_s = -inf\n", "c.toml:2: stall.sample_window_s: must be a finite number greater than 0"),
        ("[stall]\ncpu_idle_pct = nan\n", "c.toml:2: stall.cpu_idle_pct: must be a percentage, 0 to 100"),
        ("[metrics]\nbaseline_tokens_per_s = inf\n",
         "c.toml:2: metrics.baseline_tokens_per_s: must be a finite number greater than 0"),
    ],
)
def test_config_times_and_numbers_are_finite(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "c.toml")
    assert caught.value.problems == [problem]


def flags(**values) -> argparse.Namespace:
    return argparse.Namespace(**{"config": None, **values})


@pytest.mark.parametrize(("flag", "value"), [("grace", float("nan")), ("grace", float("inf")), ("grace", -0.5),
                                             ("stall_after", float("inf")), ("stall_after", 0.0),
                                             ("baseline", float("nan"))])
def test_flags_are_bounded_like_the_config(flag: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"^--{flag.replace('_', '-')}: must be a finite number"):
        load_from_args(flags(**{flag: value}))


def test_grace_zero_means_sigkill_at_once_and_overrides_the_config(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[run]\ngrace_s = 30\n")
    assert load_from_args(flags(config=str(config), grace=0.0)).run.grace_s == 0.0
    assert load_from_args(flags(config=str(config))).run.grace_s == 30.0


# -- row 15: what a config path may be ---------------------------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as caught:
        load_config(fifo)
    assert caught.value.problems == [f"{fifo}: not a regular file: a config is a TOML file"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_link_to_a_device_is_refused_before_reading(tmp_path: Path, device: str) -> None:
    link = tmp_path / "run.toml"
    link.symlink_to(device)
    with pytest.raises(ConfigError) as caught:
        load_config(link)
    assert caught.value.problems == [f"{link}: not a regular file: a config is a TOML file"]


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r": not a regular file: a config is a TOML file$"):
        load_config(tmp_path)


def test_a_config_past_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    """A 3 GB file would be read whole; the cap reads one byte past 1 MiB and stops (sparse: no disk used)."""
    big = tmp_path / "run.toml"
    with big.open("wb") as out:
        out.truncate(3 << 30)
    with pytest.raises(ConfigError) as caught:
        load_config(big)
    assert caught.value.problems == [f"{big}: larger than 1 MiB: not a config"]
    under = tmp_path / "ok.toml"
    under.write_text("# padding\n" * ((MAX_CONFIG_BYTES - 100) // 10) + "[run]\nname = 'x'\n")
    assert load_config(under).run.name == "x"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[run]\nname = " + "[" * 100_000 + "]" * 100_000 + "\n", "c.toml:2: run.name: nested too deeply (more than 32 levels)"),
        ("[run]\nenv = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n", "c.toml:2: run.env: nested too deeply (more than 32 levels)"),
        ("[run]\nname = 'x'\nlog = \"a\x00b\"\n", "c.toml:3: run.log: a NUL byte: not a text config"),
        ("\x00", "c.toml:1: text: a NUL byte: not a text config"),
    ],
    ids=["100k-deep array", "5k-deep inline table", "NUL in a value", "NUL alone"],
)
def test_deep_nesting_and_nul_bytes_are_one_line(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "c.toml")
    assert caught.value.problems == [problem]


def test_brackets_in_strings_and_comments_do_not_count_as_nesting() -> None:
    deep = "[" * 40
    config = parse_config(f"# {deep}\n[run]\nname = '{deep}'\nlog = \"\"\"{deep}\"\"\"\n", "c.toml")
    assert config.run.name == deep and config.run.log == deep


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "deep", "nul"])
def test_the_command_line_says_one_line_and_exits_2(tmp_path: Path, kind: str) -> None:
    """Through `pulse check CONFIG`, in its own namespace: one line, exit 2, no traceback, no hang."""
    path = tmp_path / "run.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text("[run]\nname = " + "[" * 100_000 if kind == "deep" else "[run]\nname = 'a\x00'\n")
    result = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=["check", str(path)],
                          run=[sys.executable, str(HEALTHY)])
    assert result["rc"] == 2
    assert len(result["err"].splitlines()) == 1 and result["err"].startswith(str(path)), result["err"]
    assert "Traceback" not in result["err"]


def test_alert_waits_are_finite():
    with pytest.raises(ConfigError, match="alerts.min_interval_s: must be a finite number, 0 or more"):
        parse_config("[alerts]\ncommand = 'true'\nmin_interval_s = inf\n", "run.toml")
