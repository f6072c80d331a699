"""Signals Pulse sent are facts: a process stopped by Pulse's own SIGSTOP is "stopped by you", with SIGCONT as
its next step; one stopped by someone else is "stopped (state T)"; neither is ever "hung" (issue 33, item 3).

Real processes (t.sh runs the suite in its own PID namespace), a real audit log, the `k` action's executor.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

from console.actions.audit import StepStatus
from console.actions.signal import execute_signal, plan_signal
from console.diagnose import diagnose
from console.evidence import gather
from console.remote.target import LocalTarget
from tests.test_evidence import start
from tests.test_restart import Processes, procs, wait_for  # noqa: F401  (procs is a fixture)


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def healthy_run(procs: Processes, tmp_path: Path):
    config, pid = start(procs, tmp_path, "healthy.py", "--interval", "0.05")
    wait_for(lambda: "step 2" in Path(config.run.log).read_text(), "steps")
    return replace(config, audit_log=str(tmp_path / "audit.jsonl")), pid


async def signal_by_pulse(config, pid: int, name: str) -> None:
    plan = await plan_signal(LocalTarget(), pid, name, "healthy.py")
    events = [event async for event in execute_signal(LocalTarget(), config, plan)]
    assert events[-1].status is StepStatus.OK, events


async def test_a_process_pulse_stopped_is_stopped_by_you_with_sigcont_next(procs, tmp_path):
    config, pid = healthy_run(procs, tmp_path)
    before = time.time()
    await signal_by_pulse(config, pid, "STOP")
    after = time.time()
    wait_for(lambda: state_of(pid) == "T", "the stop")
    verdict = diagnose(await gather(LocalTarget(), config, dump_stacks="never"), config)
    assert verdict.name == "stopped" and verdict.step == "continue"
    assert verdict.summary.startswith(f"pid {pid} stopped by you at ")
    at = verdict.summary.split(" at ", 1)[1].split()[0]
    sent_within = range(int(before), int(after) + 1)  # the signal went between the two, however loaded the box
    assert at in {time.strftime("%H:%M:%S", time.localtime(t)) for t in sent_within}
    assert "SIGCONT" in verdict.next_step and f"Pulse sent SIGSTOP to pid {pid} at {at} (audited)" in verdict.evidence
    await signal_by_pulse(config, pid, "CONT")
    wait_for(lambda: state_of(pid) != "T", "the resume")
    wait_for(lambda: time.time() - Path(config.run.log).stat().st_mtime < 0.2, "the log to grow again")
    assert diagnose(await gather(LocalTarget(), config, dump_stacks="never"), config).name == "healthy"


async def test_a_process_stopped_by_someone_else_is_stopped_not_hung(procs, tmp_path):
    config, pid = healthy_run(procs, tmp_path)
    await signal_by_pulse(config, pid, "STOP")
    await signal_by_pulse(config, pid, "CONT")  # Pulse's last word to it was SIGCONT: the next stop is not Pulse's
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: state_of(pid) == "T", "the stop")
    wait_for(lambda: time.time() - Path(config.run.log).stat().st_mtime > 1.3, "the log to go silent past its limit")
    verdict = diagnose(await gather(LocalTarget(), config, dump_stacks="never"), config)
    assert verdict.name == "stopped" and "by you" not in verdict.summary
    assert verdict.summary.startswith(f"pid {pid} stopped (state T), not by Pulse")
    os.kill(pid, signal.SIGCONT)


async def test_an_older_sigstop_to_the_same_pid_names_another_process(procs, tmp_path):
    """The audit log outlives processes: a SIGSTOP recorded before this process started was sent to another one."""
    import json

    config, pid = healthy_run(procs, tmp_path)
    record = {"record": "finished", "time": time.time() - 3600, "host": "local", "action": "signal",
              "plan": {"signal": "STOP", "pid": pid}, "steps": [{"step": "SIGSTOP", "status": "ok"}], "outcome": "ok"}
    Path(config.audit_log).write_text(json.dumps(record) + "\n")
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: state_of(pid) == "T", "the stop")
    verdict = diagnose(await gather(LocalTarget(), config, dump_stacks="never"), config)
    assert verdict.name == "stopped" and "not by Pulse" in verdict.summary
    os.kill(pid, signal.SIGCONT)
