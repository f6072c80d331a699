"""Send one chosen signal to one process of the run: planned, confirmed, audited, refused read-only.

The plan records the process's start time (field 22 of /proc/PID/stat); the signal goes
only if the PID still names that process when it is sent (remote_process.send_signal, as for
the restart), so a PID reused since the plan is never hit.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    OutputLine,
    RecordListener,
    StepEvent,
    StepStatus,
    audited,
    refuse_if_read_only,
)
from console.actions.guards import probe_target, protected_reason
from console.config import Config
from console.observe.remote_process import ProcessRef, SignalTarget, send_signal
from console.remote.target import Target

#: The signals offered, in the order of the chooser, with what each usually does to a training run.
SIGNALS: dict[str, str] = {
    "TERM": "ask it to stop (handlers run, checkpoints may be written)",
    "INT": "as Ctrl+C: KeyboardInterrupt in Python",
    "KILL": "stop it at once (no cleanup, GPU memory freed by the driver)",
    "HUP": "hang-up: many daemons reload, Python exits",
    "USR1": "user signal 1 (e.g. faulthandler stack dump when registered)",
    "USR2": "user signal 2",
    "STOP": "pause it (it holds its GPU memory)",
    "CONT": "resume a paused process",
}


@dataclass(frozen=True, slots=True)
class SignalPlan:
    """One signal to one process, as it was when planned."""

    signal: str
    pid: int
    start_ticks: int
    state: str
    command: str

    def as_json(self) -> dict:
        return {"signal": self.signal, "pid": self.pid, "start_ticks": self.start_ticks, "state": self.state, "command": self.command}

    def describe(self) -> list[str]:
        """The plan as lines for a confirmation screen."""
        return [
            f"send SIG{self.signal} to pid {self.pid} (state {self.state}): {SIGNALS[self.signal]}",
            f"  {self.command}",
            "  only if pid still has the start time planned (a reused PID is left alone)",
        ]


async def plan_signal(target: Target, pid: int, signal: str, command: str, *, read_only: bool = False) -> SignalPlan:
    """Read `pid`'s state and start time on the target; ActionRefused when it cannot be signalled."""
    refuse_if_read_only("signals", read_only)
    if signal not in SIGNALS:
        raise ActionRefused(f"signal {signal!r} is not offered (choose from {', '.join(SIGNALS)})")
    probe = await probe_target(target, [pid], None)
    facts = probe.procs.get(pid)
    if facts is None:
        raise ActionRefused(f"pid {pid} is gone: nothing to signal")
    # The restart's guard, so `k` cannot reach PID 1, Pulse's own chain, its agent, sshd or a login shell either.
    if (why := protected_reason(facts, {p.pid for p in probe.own})) is not None:
        raise ActionRefused(f"pid {pid} is {why}: Pulse never signals it")
    return SignalPlan(signal, pid, facts.start_ticks, facts.state, command)


async def _signal(target: Target, plan: SignalPlan) -> AsyncGenerator[StepEvent | OutputLine, None]:
    step = f"SIG{plan.signal}"
    yield StepEvent(step, StepStatus.RUNNING, f"pid {plan.pid}")
    said = (await send_signal(target, plan.signal, [SignalTarget(ProcessRef(plan.pid, plan.start_ticks))])).get(plan.pid, "")
    if said == "sent":
        yield StepEvent(step, StepStatus.OK, f"sent to pid {plan.pid}")
    else:
        yield StepEvent(step, StepStatus.FAILED, f"pid {plan.pid} {said or 'did not answer'}: not signalled")


def execute_signal(
    target: Target, config: Config, plan: SignalPlan, *, on_record: RecordListener | None = None
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Send the planned signal (checked against the start time): step events, audited (each record
    also told to `on_record`)."""
    log = AuditLog(config.audit_log, on_record=on_record)
    return audited(_signal(target, plan), log=log, action="signal", target=target, plan=plan.as_json())
