"""Issue 30 row U6: what is shown is what runs.

U6 was a shared config whose launch was `python3 train.py & touch hidden; wait\\r\\x1b[2Kpython3 train.py`:
the terminal drew only `python3 train.py` (the carriage return and `ESC [2K` erased the rest),
the console's `R` dialog passed the controls through, and `--yes` created `hidden`. Now every
plan shows the command with its control characters escaped, says it is refused unless that
escaped form is confirmed, and `--yes` alone never runs it: only `--accept-escaped FORM` with
that exact form, or an answer on a terminal to the question that names it. Each CLI case runs
as PID 1 of its own PID namespace beside a real run; the console's case drives the real dialog.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from console.actions.audit import AuditLog
from console.config import parse_config
from console.monitor import Monitor
from console.observe.textsafe import hidden_characters, visible
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.app import PulseApp
from console.ui.dialogs.confirm_screen import ConfirmScreen
from tests.safety.namespace import HEALTHY, Scene, alive, in_namespace, pids_with
from tests.sshd import TESTS_BIN

#: What the terminal drew of the hostile launch: the part after the erase.
SHOWN_RAW = "python3 train.py"
WAIT_S = 60.0


@pytest.mark.parametrize(("raw", "shown", "named"), [
    ("a\rb\x1b[2Kc", "a\\rb\\x1b[2Kc", ["\\r", "\\x1b"]),
    ("tab\there\nnext", "tab\\there\\nnext", ["\\t", "\\n"]),
    ("line\u2028sep\u2029par", "line\\u2028sep\\u2029par", ["\\u2028", "\\u2029"]),
    ("rtl\u202eoverride\u200bzero", "rtl\\u202eoverride\\u200bzero", ["\\u202e", "\\u200b"]),
    ("c1\x9b\x85del\x7f", "c1\\x9b\\x85del\\x7f", ["\\x9b", "\\x85", "\\x7f"]),
    ("ünï ✓ printf 'a\\rb'", "ünï ✓ printf 'a\\rb'", []),  # a backslash and r, not a carriage return
])
def test_visible_writes_what_a_terminal_would_not_print_as_its_escape(raw, shown, named):
    assert visible(raw) == shown and visible(shown) == shown
    assert hidden_characters(raw) == named


def hostile(command: str, hidden: Path) -> str:
    """`command`, and `touch hidden` before it that a terminal erases when it prints the line raw."""
    return f"{command} & touch {hidden}; wait\r\x1b[2K{command}"


def write_config(scene: Scene, **sections: dict) -> Path:
    """A TOML config of `sections` (values as JSON strings, which TOML reads the same way)."""
    lines = [f"audit_log = {json.dumps(str(scene.audit_path))}"]
    for name, keys in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    path = scene.folder / "shared.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def restart_config(scene: Scene) -> tuple[Path, str]:
    run = f"{sys.executable} -u {HEALTHY} --tag {scene.tag} --interval 0.05"
    launch = hostile(run, scene.folder / "hidden")
    config = write_config(scene, run={"launch": launch, "match": scene.tag, "pidfile": str(scene.pidfile),
                                      "log": str(scene.folder / f"{scene.tag}_{{started}}.log")})
    return config, launch


def answered_on_a_terminal(scene: Scene, answer: str, *argv: str) -> dict:
    """`pulse ARGV` with a terminal as its standard input, `answer` typed into it."""
    controller, terminal = pty.openpty()
    os.write(controller, answer.encode() + b"\n")
    try:
        return scene.pulse(*argv, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)


def scene_hidden_launch(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    config, launch = restart_config(scene)
    seen = {"launch": launch, "escaped": visible(launch), "run": run.pid}
    seen["answered_no"] = answered_on_a_terminal(scene, "n", "restart", str(config))
    seen["yes"] = scene.pulse("restart", str(config), "--yes")
    seen["yes_accepting_what_was_drawn"] = scene.pulse("restart", str(config), "--yes", "--accept-escaped", SHOWN_RAW)
    seen["hidden_before_accepting"] = (scene.folder / "hidden").exists()
    seen["run_alive_before_accepting"] = alive(run.pid)
    seen["audit_before_accepting"] = scene.audit()
    seen["accepted"] = scene.pulse("restart", str(config), "--yes", "--accept-escaped", visible(launch))
    seen["hidden_after_accepting"] = (scene.folder / "hidden").exists()
    seen["run_alive_after_accepting"] = alive(run.pid)
    seen["runs"] = pids_with(scene.tag)
    seen["audit"] = scene.audit()
    return seen


def test_a_hidden_launch_is_shown_escaped_and_runs_only_once_its_escaped_form_is_confirmed(tmp_path):
    seen = in_namespace(scene_hidden_launch, folder=str(tmp_path))
    escaped = seen["escaped"]
    assert "\\r\\x1b[2K" in escaped and "touch" in escaped
    refused_line = ("REFUSED unless you confirm it escaped: [run] launch holds control characters (\\r \\x1b);"
                    " it runs exactly as shown above, not as a terminal would draw it")
    # on a terminal, answering no: the plan shows the escaped launch and asks about it by name
    no = seen["answered_no"]
    assert no["rc"] == 2 and no["err"] == "restart: not confirmed; nothing done\n"
    assert f"  launch: {escaped}" in no["out"].splitlines()
    assert f"  {refused_line}" in no["out"].splitlines()
    assert "[run] launch holds control characters: run it exactly as shown escaped? [y/N]" in no["out"]
    for case in ("answered_no", "yes", "yes_accepting_what_was_drawn"):
        assert "\r" not in seen[case]["out"] and "\x1b" not in seen[case]["out"], case  # nothing raw reaches the terminal
    # --yes alone, or accepting what the terminal drew: refused in one line that names the escaped form
    for case in ("yes", "yes_accepting_what_was_drawn"):
        refused = seen[case]
        assert refused["rc"] == 2, refused
        assert f"  launch: {escaped}" in refused["out"].splitlines()
        [line] = refused["err"].splitlines()
        assert line.startswith("restart: refused: [run] launch holds control characters (\\r \\x1b) and --yes alone"
                               " never runs it; read its escaped form in the plan, then confirm it on a terminal"
                               " or with --accept-escaped '")
        assert escaped in line
    assert not seen["hidden_before_accepting"] and seen["run_alive_before_accepting"]
    assert seen["audit_before_accepting"] == []  # refused before the "started" record: nothing was done
    # the operator confirmed exactly that escaped form: it runs as shown, and the audit keeps it whole
    assert seen["accepted"]["rc"] == 0, seen["accepted"]
    assert seen["hidden_after_accepting"] and not seen["run_alive_after_accepting"]
    started = seen["audit"][0]
    assert started["record"] == "started" and started["plan"]["launch"] == seen["launch"]
    assert "\r" not in seen["accepted"]["out"] and "\x1b" not in seen["accepted"]["out"]


def scene_hidden_warmup(folder: str) -> dict:
    scene = Scene(folder)
    marker = scene.folder / "warmed"
    command = hostile(f"echo {{gpu}} >> {marker}", scene.folder / "hidden")
    config = write_config(scene, warmup={"command": command, "gpus": [0], "seq_lens": [8]})
    yes = scene.pulse("warmup", str(config), "--yes")
    return {"yes": yes, "escaped": visible(command.replace("{gpu}", "0")), "hidden": (scene.folder / "hidden").exists(),
            "warmed": marker.exists(), "audit": scene.audit()}


def test_a_hidden_warmup_command_is_refused_with_yes(tmp_path):
    seen = in_namespace(scene_hidden_warmup, folder=str(tmp_path))
    yes = seen["yes"]
    assert yes["rc"] == 2 and "\r" not in yes["out"] and "\x1b" not in yes["out"]
    assert f"      1. $ {seen['escaped']}" in yes["out"].splitlines()
    [line] = yes["err"].splitlines()
    assert line.startswith("warmup: refused: [warmup] command holds control characters (\\r \\x1b) and --yes alone")
    assert not seen["hidden"] and not seen["warmed"] and seen["audit"] == []


# -- the console's R dialog, and a custom action that does not ask ------------------------------------


@pytest.fixture
def namespaced_run(pid_namespace, monkeypatch):
    """A run inside the test's own PID namespace; `pct` (the stand-in) on the PATH."""
    monkeypatch.setenv("PATH", f"{TESTS_BIN}:{os.environ['PATH']}")
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = subprocess.Popen(
        ["pct", "exec", pid_namespace.id, "--", sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    yield tag, run
    run.kill()
    run.wait()


async def until(pilot, condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"waited {WAIT_S:g} s for {what}")
        await pilot.pause(0.05)


def dialog_text(dialog) -> str:
    return "\n".join(static.content.plain for static in dialog.query("Static") if hasattr(static.content, "plain"))


async def test_the_r_dialog_shows_the_escaped_launch_and_asks_about_it(pid_namespace, namespaced_run, tmp_path):
    tag, run = namespaced_run
    hidden = tmp_path / "hidden"
    launch = hostile(f"{sys.executable} {HEALTHY} --tag {tag}", hidden)
    viewer = hostile("echo viewed", hidden)
    config = parse_config(
        f"audit_log = {json.dumps(str(tmp_path / 'audit.jsonl'))}\n[run]\nlaunch = {json.dumps(launch)}\n"
        f"match = {json.dumps(tag)}\nlog = {json.dumps(str(tmp_path / 'train_{started}.log'))}\n[gpus]\npoll_s = 0.2\n"
        f'[[actions]]\nname = "look"\nkey = "L"\ncommand = {json.dumps(viewer)}\nconfirm = false\nmutating = false\n',
        "shared.toml",
    )
    target = LocalTarget(pid_namespace.container)
    state = RunState()
    app = PulseApp(config, state, target=target, monitor_factory=lambda changed: Monitor(config, target, state, changed))
    async with app.run_test(size=(160, 45)) as pilot:
        await until(pilot, lambda: bool(state.latest and state.latest.processes), "the console to see the run")
        await pilot.press("R")
        # Pushed, then composed: its plan is on it a frame or two later (later still on a loaded box).
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "launch: " in dialog_text(app.screen),
                    "the restart's dialog with its plan")
        dialog = app.screen
        shown = dialog_text(dialog)
        assert f"launch: {visible(launch)}" in shown
        assert "REFUSED unless you confirm it escaped: [run] launch holds control characters (\\r \\x1b)" in shown
        assert "\r" not in shown and "\x1b" not in shown
        assert "[run] launch holds control characters: run it exactly as shown escaped?" in dialog.question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the dialog to close")
        # `confirm = false` does not skip the question for a command that holds control characters
        await pilot.press("L")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the custom action's dialog")
        assert any(visible(viewer) in line for line in app.screen.lines)
        await pilot.press("n")
        await pilot.pause()
    assert run.poll() is None and not hidden.exists()
    assert AuditLog(tmp_path / "audit.jsonl").records() == []
