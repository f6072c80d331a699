"""The CLI behaves as command-line tools do: --version, help with commands and examples, help on every
flag, "did you mean", named runs from the config folder, shell completion, a quiet end on a closed pipe,
and the platform's folders for config and state."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from console import paths
from console.cli import COMMANDS, build_command_parser, build_parser, completion_parser, main, parse
from console.config import load_from_args
from console.ui.themes import BUILTIN_THEME_DIR, load_themes

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def xdg(tmp_path, monkeypatch) -> Path:
    """Config and state folders of this test's own (platformdirs reads XDG_* on Linux)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


def write_named_run(name: str, log: str) -> Path:
    paths.runs_dir().mkdir(parents=True, exist_ok=True)
    path = paths.runs_dir() / f"{name}.toml"
    path.write_text(f'[run]\nlog = "{log}"\nmatch = \'train\\.py\'\n')
    return path


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"pulse {version('pulse-console')}\n"


def test_unknown_command_names_the_commands_and_suggests_the_closest(xdg, capsys):
    assert main(["chek"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pulse: 'chek' is not a command")
    assert all(command in err for command in COMMANDS)
    assert err.rstrip().endswith("did you mean check?")
    assert "no such config file" not in err


def test_a_misspelt_named_run_is_suggested(xdg, capsys):
    write_named_run("train-7b", "/tmp/train.log")
    assert main(["trian-7b"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("did you mean train-7b?")
    assert main(["check", "train-7"]) == 2
    err = capsys.readouterr().err
    assert "named runs in " in err and err.rstrip().endswith("did you mean train-7b?")


def test_a_named_run_is_read_from_the_config_folder(xdg):
    path = write_named_run("train-7b", "/workspace/train.log")
    assert path == xdg / "config" / "pulse" / "runs" / "train-7b.toml"
    for argv in (["train-7b"], ["check", "train-7b", "--json"], ["dump", "train-7b"]):
        _, args = parse(argv)
        assert args.config == str(path)
        assert load_from_args(args).run.log == "/workspace/train.log"


def test_a_missing_config_file_is_still_named_as_one(xdg, capsys):
    missing = xdg / "nope.toml"
    assert main(["check", str(missing)]) == 2
    assert capsys.readouterr().err == f"{missing}: no such config file\n"


def test_help_lists_the_commands_with_examples():
    text = build_parser().format_help()
    assert "examples:" in text and "pulse check run.toml --json" in text
    for command, line in COMMANDS.items():
        assert f"  {command:<10} {line}" in text
        command_help = build_command_parser(command).format_help()
        assert "examples:" in command_help and f"pulse {command}" in command_help.split("examples:")[1]


def all_parsers() -> list[argparse.ArgumentParser]:
    return [build_parser(), *(build_command_parser(command) for command in COMMANDS)]


@pytest.mark.parametrize("parser", all_parsers(), ids=lambda p: p.prog)
def test_every_flag_has_help(parser):
    missing = [action.dest for action in parser._actions if not action.help or action.help == argparse.SUPPRESS]
    assert not missing


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_offers_commands_and_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--print-completion", "bash"])
    assert exited.value.code == 0
    script = tmp_path / "pulse.bash"
    script.write_text(capsys.readouterr().out)

    def complete(*words: str) -> list[str]:
        line = " ".join(["pulse", *words])
        program = (
            f"source {script}; COMP_WORDS=(pulse {' '.join(words)}); COMP_CWORD={len(words)}; "
            f"COMP_LINE='{line}'; COMP_POINT={len(line)}; _shtab_pulse; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        )
        result = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert complete("ch") == ["check"]
    assert complete("check", "--stall") == ["--stall-after"]
    assert complete("demo", "--scenario", "h") == ["healthy", "hang"]
    assert "--slurm-job" in complete("--sl")


def test_completion_covers_every_command():
    commands = next(a for a in completion_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(commands.choices) == list(COMMANDS)


@pytest.mark.parametrize(
    "argv", [["check", "--log", "train.log", "--match", "no-such-run-[0-9a-f]{12}"], ["classify", "train.log"]], ids=lambda a: a[0]
)
def test_a_closed_pipe_ends_quietly(tmp_path, argv):
    """`pulse check … | head` once head has gone: no BrokenPipeError traceback, SIGPIPE's status."""
    (tmp_path / "train.log").write_text("step 1 tokens/s: 1000.0\n")
    reader, writer = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path / "state")}
    process = subprocess.Popen(
        [sys.executable, "-m", "console.cli", *argv], stdout=writer, stderr=subprocess.PIPE, env=env, cwd=tmp_path
    )
    os.close(writer)
    os.close(reader)  # the reader leaves before pulse writes a line
    _, err = process.communicate(timeout=60)
    assert err.decode() == ""
    assert process.returncode == 128 + 13
    assert not (tmp_path / "state" / "pulse" / "crashes").exists()


def test_folders_follow_the_platform_conventions(xdg):
    assert paths.config_dir() == xdg / "config" / "pulse"
    assert paths.runs_dir() == xdg / "config" / "pulse" / "runs"
    assert paths.user_themes_dir() == xdg / "config" / "pulse" / "themes"
    assert paths.audit_log_path() == xdg / "state" / "pulse" / "audit.jsonl"
    assert paths.dumps_dir() == xdg / "state" / "pulse" / "dumps"
    assert paths.crashes_dir() == xdg / "state" / "pulse" / "crashes"


def test_the_default_audit_log_is_in_the_state_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_STATE_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", "from console.config import Config; print(Config().audit_log)"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.stdout == f"{tmp_path}/pulse/audit.jsonl\n", result.stderr


def test_an_operators_theme_in_the_config_folder_is_loaded(xdg):
    paths.user_themes_dir().mkdir(parents=True)
    mine = (BUILTIN_THEME_DIR / "pulse-dark.toml").read_text().replace('name = "pulse-dark"', 'name = "mine"')
    assert 'name = "mine"' in mine
    (paths.user_themes_dir() / "mine.toml").write_text(mine)
    themes = load_themes()
    assert themes["mine"].path == paths.user_themes_dir() / "mine.toml"
    assert "pulse-dark" in themes


def test_a_local_run_uses_the_py_spy_installed_with_pulse_when_none_is_on_path(tmp_path, monkeypatch):
    installed = Path(sys.executable).with_name("py-spy")
    if not installed.is_file():
        pytest.skip("py-spy is not installed next to this Python (scripts/setup)")
    monkeypatch.setenv("PATH", str(tmp_path))  # as under pipx: only `pulse` on PATH
    assert load_from_args(argparse.Namespace(config=None)).target.py_spy == str(installed)
    remote = argparse.Namespace(config=None, host="gpu-box")
    assert load_from_args(remote).target.py_spy == "py-spy"  # the target's own, looked up there


def test_each_commands_description_keeps_the_case_of_its_names():
    """Issue 33: `str.capitalize` wrote "no gpu", "one json object", "Py-spy dump"."""
    described = {command: build_command_parser(command).description for command in COMMANDS}
    assert described["demo"] == "The whole console on a simulated run (no GPU, no remote host needed)."
    assert "one JSON object" in described["classify"]
    assert described["dump"].startswith("py-spy dump")
    assert "SIGTERM" in described["watch"] and "no UI" in described["watch"]


def test_dump_with_a_py_spy_path_that_is_not_there_names_the_path(tmp_path):
    missing = tmp_path / "no-py-spy"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        result = subprocess.run(
            [str(Path(sys.executable).with_name("pulse")), "dump", "--py-spy", str(missing), "--pid", str(sleeper.pid)],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 1
    assert f"{missing} was not found on the target" in result.stderr, result.stderr
    assert "pip install" not in result.stderr
