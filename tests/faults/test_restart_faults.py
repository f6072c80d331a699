"""A safe restart whose link drops midway, over a real sshd: it says exactly what was and was not done,
and never launches twice.

Two cuts: between the stop and the launch (the run is stopped; the launch waits for the link and
happens once), and during the launch after the new run has started but before its PID came back
(the launch script then waits on a FIFO, so it blocks right after starting the run; then the
server's side of the connection is killed). Real runs, found and cleaned up by PID.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import uuid
from pathlib import Path

from console.actions.audit import AuditLog, StepStatus
from console.actions.restart import execute_restart, plan_restart
from console.remote.connect import make_target
from tests.faults.helpers import until
from tests.sshd import SshServer
from tests.test_restart import FAST, HEALTHY, _pids_with, alive, final, procs, run_config  # noqa: F401


def start_old_run(procs, tmp_path: Path, tag: str) -> int:
    old = procs.start([sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.05"], stdout=(tmp_path / "old.log").open("a"))
    return old.pid


def kill_server_side(server: SshServer) -> None:
    """Kill only the per-connection sshd processes, as a crash of the server side would: its sessions see a hang-up."""
    for pid in server.connection_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def test_a_drop_between_stop_and_launch_launches_once_after_the_reconnect(own_sshd: SshServer, procs, tmp_path: Path) -> None:
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    old_pid = start_old_run(procs, tmp_path, tag)
    config = dataclasses.replace(run_config(tmp_path, tag), target=own_sshd.target_config())
    target = make_target(config.target)
    events = []
    try:
        plan = await plan_restart(target, config)
        assert [p.pid for p in plan.processes] == [old_pid]
        async for event in execute_restart(target, config, plan, **FAST):
            events.append(event)
            if event.step == "stop" and event.status is StepStatus.OK:
                kill_server_side(own_sshd)
    finally:
        await target.close()
    runs = [pid for pid in _pids_with(tag) if pid != old_pid]
    for pid in runs:
        procs.adopt(pid)
    assert final(events, "stop").status is StepStatus.OK and not alive(old_pid)
    launch = final(events, "launch")
    assert launch.status is StepStatus.OK, events
    assert sum(e.step == "launch" and e.status is StepStatus.RUNNING for e in events) == 1
    assert runs == [launch.data["pid"]], "exactly one new run, the one the launch reported"
    assert final(events, "verify").status is StepStatus.OK
    assert AuditLog(config.audit_log).entries()[-1]["outcome"].startswith("ok")


async def test_a_drop_after_the_run_started_but_before_its_pid_came_back(own_sshd: SshServer, procs, tmp_path: Path) -> None:
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    old_pid = start_old_run(procs, tmp_path, tag)
    hold = tmp_path / "hold"
    os.mkfifo(hold)  # reading it blocks until someone opens it for writing
    config = dataclasses.replace(run_config(tmp_path, tag), target=own_sshd.target_config())
    target = make_target(config.target)
    events = []
    try:
        plan = await plan_restart(target, config)
        # The same launch, its report held on the FIFO: the process agent has started the run and
        # said so, but its words stay on the target until the link is cut.
        held_python = tmp_path / "held-python"
        held_python.write_text(
            "#!/bin/bash\n"
            f'[ "$6" = launch ] || exec {sys.executable} "$@"\n'
            f'said=$({sys.executable} "$@"); status=$?\n'
            f"read -r _ < {hold}\n"
            'printf "%s\\n" "$said"; exit $status\n'
        )
        held_python.chmod(0o755)
        target.python = str(held_python)

        async def cut_once_the_run_started() -> None:
            await until(lambda: [pid for pid in _pids_with(tag) if pid != old_pid], "the new run to start")
            kill_server_side(own_sshd)

        async for event in execute_restart(target, config, plan, **{**FAST, "launch_timeout_s": 60.0}):
            events.append(event)
            if event.step == "launch" and event.status is StepStatus.RUNNING:
                cutter = asyncio.create_task(cut_once_the_run_started())
        await cutter
    finally:
        await target.close()
        try:
            os.close(os.open(hold, os.O_WRONLY | os.O_NONBLOCK))  # let the held report finish
        except OSError:
            pass  # nobody waits on it any more
    runs = [pid for pid in _pids_with(tag) if pid != old_pid]
    for pid in runs:
        procs.adopt(pid)
    assert final(events, "stop").status is StepStatus.OK and not alive(old_pid)
    launch = final(events, "launch")
    assert launch.status is StepStatus.FAILED and "launch state unknown" in launch.detail and "not retrying" in launch.detail
    check = final(events, "check")
    assert check.status is StepStatus.WARNING and "the launch happened; do not launch again" in check.detail, check
    assert len(runs) == 1 and str(runs[0]) in check.detail, (runs, check.detail)
    assert sum(e.step == "launch" and e.status is StepStatus.RUNNING for e in events) == 1, "launched twice"
    outcome = AuditLog(config.audit_log).entries()[-1]["outcome"]
    assert outcome.startswith("failed: launch: launch state unknown"), outcome
