"""Issue 11 row 4: read-only is total, and every action a key or the palette runs is audited.

Row 4 was a `--read-only` console whose custom action `kill -9 {pids}` (confirm = false) killed
the run without a prompt and left no audit entry. Here the run lives in its own PID namespace
(the stand-in container `pct exec ID --`), so the action, refused or run, can reach nothing else.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from textual.command import CommandList
from textual.widgets import Input

from console.actions.audit import AuditLog
from console.config import ConfigError, parse_config
from console.monitor import Monitor
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.app import PulseApp
from tests.safety.namespace import HEALTHY, in_namespace, pulse_beside_a_run
from tests.snapshot_apps.scenarios import record_notices
from tests.sshd import TESTS_BIN

#: Upper bound on waiting for the console to see the run (never a speed assertion).
WAIT_S = 60.0
SIZE = (120, 40)


@pytest.fixture
def namespaced_run(pid_namespace, tmp_path: Path, monkeypatch):
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


def kill_config(tmp_path: Path, tag: str, declared: str = ""):
    return parse_config(
        f'audit_log = "{tmp_path}/audit.jsonl"\n[run]\nmatch = "{tag}"\n[gpus]\npoll_s = 0.2\n'
        f'[[actions]]\nname = "kill run"\nkey = "K"\ncommand = "kill -9 {{pids}}"\nconfirm = false\n'
        f'description = "kill the run now"\n{declared}',
        "row4.toml",
    )


async def until(pilot, condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"waited {WAIT_S:g} s for {what}")
        await pilot.pause(0.05)


def console(config, pid_namespace, *, read_only: bool) -> PulseApp:
    target = LocalTarget(pid_namespace.container)
    state = RunState()
    app = PulseApp(config, state, target=target, read_only=read_only,
                   monitor_factory=lambda changed: Monitor(config, target, state, changed))
    record_notices(app)
    return app


def sees_the_run(app: PulseApp) -> bool:
    return bool(app.state.latest and app.state.latest.processes)


@pytest.mark.parametrize("how", ["key", "palette"])
async def test_read_only_refuses_an_unconfirmed_custom_kill(pid_namespace, namespaced_run, tmp_path, how) -> None:
    """Row 4: refused with its line, by key and by palette; the run lives; nothing ran, so nothing to audit."""
    tag, run = namespaced_run
    app = console(kill_config(tmp_path, tag), pid_namespace, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: sees_the_run(app), "the console to see the run")
        if how == "key":
            await pilot.press("K")
        else:
            await pilot.press("ctrl+p")
            app.screen.query_one(Input).value = "kill run"
            await app.workers.wait_for_complete()
            await pilot.pause()
            commands = app.screen.query_one(CommandList)
            assert str(commands.get_option_at_index(0).prompt).startswith("kill run  (K)")
            await pilot.press("enter")
        await until(pilot, lambda: app.notices, "the refusal")
        await app.workers.wait_for_complete()
        messages = [n.message for n in app.notices]
        assert "read-only: action 'kill run' disabled (started with --read-only)" in messages
    assert run.poll() is None, "the read-only console killed the run"
    assert AuditLog(tmp_path / "audit.jsonl").entries() == []


async def test_a_declared_viewer_runs_read_only_and_is_audited(pid_namespace, namespaced_run, tmp_path) -> None:
    """`mutating = false` is the operator's word that the action changes nothing: it runs read-only, on the record."""
    tag, run = namespaced_run
    kill = kill_config(tmp_path, tag).actions[0]
    viewer = parse_config(
        f'audit_log = "{tmp_path}/audit.jsonl"\n[run]\nmatch = "{tag}"\n[gpus]\npoll_s = 0.2\n'
        '[[actions]]\nname = "list run"\nkey = "L"\ncommand = "ps -o pid= -p {pids}"\nconfirm = false\nmutating = false\n',
        "viewer.toml",
    )
    assert kill.mutating and not viewer.actions[0].mutating
    app = console(viewer, pid_namespace, read_only=True)
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: sees_the_run(app), "the console to see the run")
        await pilot.press("L")
        await until(pilot, lambda: audit.entries(), "the audit entry")
    [entry] = audit.entries()
    assert entry["action"] == "custom:list run" and entry["plan"]["mutating"] is False
    assert entry["outcome"] == "ok: exit 0" and entry["container"] == f"pct {pid_namespace.id}"
    assert run.poll() is None


async def test_without_read_only_the_kill_acts_on_the_run_and_is_audited(pid_namespace, namespaced_run, tmp_path) -> None:
    """The same key, not read-only: it acts (on the run inside the namespace only) and the audit log says so."""
    tag, run = namespaced_run
    app = console(kill_config(tmp_path, tag), pid_namespace, read_only=False)
    audit = AuditLog(tmp_path / "audit.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: sees_the_run(app), "the console to see the run")
        pids = [p.pid for p in app.state.latest.processes]
        await pilot.press("K")
        await until(pilot, lambda: audit.entries(), "the audit entry")
    [entry] = audit.entries()
    assert entry["action"] == "custom:kill run" and entry["plan"]["mutating"] is True
    assert entry["plan"]["command"] == "kill -9 " + " ".join(map(str, pids))
    assert entry["container"] == f"pct {pid_namespace.id}"
    assert run.wait(timeout=WAIT_S) is not None


def test_a_dangerous_viewer_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^x\.toml:6: actions\[0\]\.mutating: a dangerous action changes something"):
        parse_config('[[actions]]\nname = "k"\nkey = "K"\ncommand = "kill {pid}"\ndangerous = true\nmutating = false\n', "x.toml")


@pytest.mark.parametrize("command", ["restart", "warmup"])
@pytest.mark.parametrize("target", [[], ["--host", "node-a"], ["--hosts", "node-a,node-b"], ["--slurm-job", "4242"]])
def test_headless_read_only_refuses_every_mutating_command_on_every_target(tmp_path, command, target) -> None:
    """Refused in one line, exit 2, before any connection: the run beside it lives and no audit entry is written."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    config = tmp_path / "warm.toml"
    config.write_text(f'[warmup]\ncommand = "touch {tmp_path}/warmed-{{gpu}}"\ngpus = [0]\nseq_lens = [1]\n')
    run = [sys.executable, str(HEALTHY), "--tag", tag]
    argv = [command, str(config), *target, "--match", tag, "--launch", " ".join(run), "--yes", "--read-only"]
    result = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=argv, run=run)
    assert result["rc"] == 2
    assert len(result["err"].splitlines()) == 1, result["err"]
    assert result["run_alive"] and not (tmp_path / "warmed-0").exists()
    assert not (tmp_path / ".local/state/pulse/audit.jsonl").exists()
