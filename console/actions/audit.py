"""What every mutating action reports while it runs, and the append-only record it leaves.

Actions are executed step by step; each step reports `StepEvent`s (a UI shows them live,
a terminal prints them) and commands' output arrives as `OutputLine`s. When the action
ends, its plan and every step's final result go to the audit log: one JSON object per
line in `config.audit_log`, on the machine where Pulse runs, readable only by its owner.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from console.model import LineKind
from console.remote.target import Target


class StepStatus(str, Enum):
    """Where one step of an action stands."""

    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    WARNING = "warning"
    SKIPPED = "skipped"


#: Statuses that end a step (RUNNING is the only one that does not).
FINAL_STATUSES = frozenset({StepStatus.OK, StepStatus.FAILED, StepStatus.WARNING, StepStatus.SKIPPED})


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One step of an action changed state: `step` names it, `detail` says what happened."""

    step: str
    status: StepStatus
    detail: str = ""
    data: dict = field(default_factory=dict)
    """Facts a caller may act on (a new PID, a log path, an ETA), JSON-serialisable."""
    time: float = field(default_factory=time.time)

    def as_json(self) -> dict:
        return {
            "step": self.step,
            "status": self.status.value,
            "detail": self.detail,
            "data": self.data,
            "time": self.time,
        }


@dataclass(frozen=True, slots=True)
class OutputLine:
    """One line a step's command printed, made safe for a terminal, with its kind for highlighting."""

    step: str
    text: str
    kind: LineKind = LineKind.NORMAL


class ActionRefused(Exception):
    """The action will not run at all (read-only, nothing configured, nothing to act on): one line."""


def refuse_if_read_only(action: str, read_only: bool) -> None:
    """Raise ActionRefused when the console was started read-only."""
    if read_only:
        raise ActionRefused(f"read-only: {action} disabled (started with --read-only)")


def final_steps(events: Iterable[StepEvent]) -> list[StepEvent]:
    """The events that ended a step, in order (what the audit log keeps)."""
    return [event for event in events if event.status in FINAL_STATUSES]


#: Called with every entry after it is written (the run journal copies actions from here).
AUDIT_LISTENERS: list[Callable[[dict], None]] = []


class AuditLog:
    """An append-only JSON-lines file of mutating actions (parents created, mode 0600)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))

    def record(
        self,
        action: str,
        target_label: str,
        plan: dict,
        steps: Iterable[StepEvent],
        outcome: str,
        *,
        container: str | None = None,
    ) -> dict:
        """Append one entry and return it. Raises OSError when the file cannot be written."""
        entry = {
            "time": time.time(),
            "operator_host": socket.gethostname(),
            "host": target_label,
            "container": container,
            "action": action,
            "plan": plan,
            "steps": [event.as_json() for event in final_steps(steps)],
            "outcome": outcome,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, default=str, ensure_ascii=False) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        for listener in AUDIT_LISTENERS:
            listener(entry)
        return entry

    def entries(self) -> list[dict]:
        """Every entry so far, oldest first (an absent file has none)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def outcome_of(events: list[StepEvent], finished: bool) -> str:
    """One line for the audit log: ok (with the last step's detail), failed at a step, or cancelled."""
    failed = [event for event in events if event.status is StepStatus.FAILED]
    if failed:
        return f"failed: {failed[0].step}: {failed[0].detail}"
    if not finished:
        last = events[-1].step if events else "start"
        return f"cancelled during {last}"
    warnings = sum(event.status is StepStatus.WARNING for event in events)
    done = final_steps(events)
    detail = done[-1].detail if done else ""
    note = f" ({warnings} warning{'s' * (warnings != 1)})" if warnings else ""
    return f"ok{note}: {detail}" if detail else f"ok{note}"


async def audited(
    events: AsyncGenerator[StepEvent | OutputLine, None],
    *,
    log: AuditLog,
    action: str,
    target: Target,
    plan: dict,
) -> AsyncIterator[StepEvent | OutputLine]:
    """Pass an executor's events through and record the action when it ends, however it ends.

    A cancelled or failed action is recorded too (as such); an audit log that cannot be
    written is reported as a final warning step when the action ran to its end.
    """
    seen: list[StepEvent] = []
    finished = False
    container = target.container.describe() if target.container is not None else None
    try:
        async for event in events:
            if isinstance(event, StepEvent):
                seen.append(event)
            yield event
        finished = True
    finally:
        if not finished:
            # Let the executor clean up (stop what it started) before the record is written.
            await events.aclose()
            try:
                log.record(action, target.label, plan, seen, outcome_of(seen, False), container=container)
            except OSError:
                pass  # the action's own error (or the cancellation) is what the caller must see
    try:
        log.record(action, target.label, plan, seen, outcome_of(seen, True), container=container)
    except OSError as exc:
        yield StepEvent("audit", StepStatus.WARNING, f"could not write the audit log {log.path}: {exc.strerror}")
