"""`k`: one chosen signal to the selected process, planned, confirmed, audited, refused read-only.

The signalled process is real and lives in its own PID namespace (the stand-in container).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from console.actions.audit import ActionRefused, AuditLog, StepStatus
from console.actions.signal import execute_signal, plan_signal
from console.model import ProcessReading
from console.remote.target import LocalTarget
from console.ui.dialogs.action_screen import ActionScreen
from console.ui.dialogs.confirm_screen import ConfirmScreen
from console.ui.dialogs.signal_screen import SignalScreen
from tests.snapshot_apps.scenarios import make_app, make_config, select_process

WAITS_FOR_USR1 = """
import signal, sys, time
def said(signum, frame):
    print("got USR1", flush=True)
signal.signal(signal.SIGUSR1, said)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def waiting_process(pid_namespace, tmp_path):
    """A Python process inside the namespace that prints "got USR1" on SIGUSR1: (host pid, its stdout)."""
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_USR1)
    enter = ["nsenter", "-t", str(pid_namespace.init_pid), "--pid", "--mount", "--"]
    popen = subprocess.Popen([*enter, sys.executable, "-u", str(script)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert popen.stdout.readline().strip() == "ready"
        (pid,) = (int(p) for p in Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split())
        yield pid, popen.stdout
    finally:
        popen.kill()  # nsenter; the namespace's close ends what runs inside
        popen.wait()


def config_with_audit(tmp_path):
    return dataclasses.replace(make_config(), audit_log=str(tmp_path / "audit.jsonl"))


async def test_a_planned_signal_reaches_the_process_and_is_audited(waiting_process, tmp_path):
    pid, output = waiting_process
    config = config_with_audit(tmp_path)
    plan = await plan_signal(LocalTarget(), pid, "USR1", "python3 waits.py")
    assert plan.state == "S" and f"send SIGUSR1 to pid {pid}" in plan.describe()[0]
    events = [event async for event in execute_signal(LocalTarget(), config, plan)]
    assert events[-1].status is StepStatus.OK, events
    assert output.readline().strip() == "got USR1"
    (entry,) = AuditLog(config.audit_log).entries()
    assert entry["action"] == "signal" and entry["plan"]["pid"] == pid and entry["outcome"].startswith("ok")


async def test_a_pid_whose_start_time_changed_is_not_signalled(waiting_process, tmp_path):
    pid, _ = waiting_process
    plan = await plan_signal(LocalTarget(), pid, "KILL", "python3 waits.py")
    reused = dataclasses.replace(plan, start_ticks=plan.start_ticks + 1)
    events = [event async for event in execute_signal(LocalTarget(), config_with_audit(tmp_path), reused)]
    assert events[-1].status is StepStatus.FAILED and "reused" in events[-1].detail
    assert Path(f"/proc/{pid}").exists()


async def test_read_only_and_unknown_signals_are_refused():
    with pytest.raises(ActionRefused, match="read-only: signals disabled"):
        await plan_signal(LocalTarget(), 1, "TERM", "init", read_only=True)
    with pytest.raises(ActionRefused, match="not offered"):
        await plan_signal(LocalTarget(), 1, "SEGV", "init")


async def test_k_on_the_selected_row_chooses_confirms_and_sends(waiting_process, tmp_path):
    pid, output = waiting_process
    app = make_app("healthy", target=LocalTarget(), config=config_with_audit(tmp_path))
    reading = ProcessReading(pid, 1, "S", 3.0, 1, 10.0, 0.0, f"{sys.executable} -u /tmp/waits.py --flag")
    async with app.run_test(size=(120, 40)) as pilot:
        table = await select_process(app, pilot, reading)
        assert table.cell_text(pid, "command") == "waits.py --flag"
        await pilot.press("k")
        assert isinstance(app.screen, SignalScreen)
        await pilot.press("down", "down", "down", "down", "enter")  # TERM INT KILL HUP USR1
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and f"send SIGUSR1 to pid {pid}" in app.screen.lines[0]
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen)
        await app.workers.wait_for_complete()
        assert output.readline().strip() == "got USR1"


async def test_the_signal_key_never_plans_for_init_pulse_itself_or_its_ancestors():
    """The restart's guard holds for `k` too: nothing is signalled, the plan is refused with the reason."""
    import os

    # In the tests' PID namespace pytest's parent is its init: PID 1, refused as such (the last key wins).
    reasons = {os.getpid(): "Pulse itself", os.getppid(): "Pulse itself", 1: "PID 1"}
    for pid, why in reasons.items():
        with pytest.raises(ActionRefused, match=why):
            await plan_signal(LocalTarget(), pid, "TERM", "protected")
