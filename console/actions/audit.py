"""What every mutating action reports while it runs, and the append-only record it leaves.

Actions are executed step by step; each step reports `StepEvent`s (a UI shows them live,
a terminal prints them) and commands' output arrives as `OutputLine`s. Before the first
step, a "started" record with the plan goes to the audit log; when the action ends (or is
interrupted) a "finished" or "interrupted" record with every step's final result follows:
one JSON object per line in `config.audit_log`, on the machine where Pulse runs, readable
only by its owner. An action whose "started" record cannot be written does not run.

A record is written whole or not at all: one ASCII line (every other character, U+2028 and the
like included, JSON-escaped, so no reader splits it), one `write` on a file opened with
O_APPEND, under an exclusive lock. A short write (a full filesystem, a file size limit) is a
failure: the bytes it wrote are cut off again, and the action does not run. An unterminated
last line (a crash mid-write) is not a record: `records()` skips it and the next `record()`
cuts it off before appending.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import math
import os
import resource
import socket
import stat
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from console.model import LineKind
from console.remote.target import Target
from console.sent import read_records


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


def checked_seconds(what: str, value: float) -> float:
    """`value` when it is a finite number of seconds ≥ 0; ActionRefused naming `what` otherwise
    (a NaN or infinite grace would never end its wait)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ActionRefused(f"{what} must be a finite number of seconds ≥ 0, not {value!r}")
    return float(value)


def refuse_if_read_only(action: str, read_only: bool) -> None:
    """Raise ActionRefused when the console was started read-only."""
    if read_only:
        raise ActionRefused(f"read-only: {action} disabled (started with --read-only)")


def final_steps(events: Iterable[StepEvent]) -> list[StepEvent]:
    """The events that ended a step, in order (what the audit log keeps)."""
    return [event for event in events if event.status in FINAL_STATUSES]


#: What is told of each entry once it is written: the run journal copies actions (RunWatch.record_action).
RecordListener = Callable[[dict], None]


class AuditLog:
    """An append-only JSON-lines file of mutating actions (parents created, mode 0600).

    `on_record` is told of each entry after it is written; it cannot fail the action.
    """

    def __init__(self, path: str | os.PathLike[str], *, on_record: RecordListener | None = None) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self.on_record = on_record

    def record(
        self,
        action: str,
        target_label: str,
        plan: dict,
        steps: Iterable[StepEvent],
        outcome: str,
        *,
        container: str | None = None,
        record: str = "finished",
    ) -> dict:
        """Append one entry and return it. Raises OSError when the file cannot be written.

        `record` is "started" (written before the action acts), "finished" or "interrupted".
        """
        entry = {
            "record": record,
            "time": time.time(),
            "operator_host": socket.gethostname(),
            "host": target_label,
            "container": container,
            "action": action,
            "plan": plan,
            "steps": [event.as_json() for event in final_steps(steps)],
            "outcome": outcome,
        }
        line = (json.dumps(entry, default=str, ensure_ascii=True) + "\n").encode("ascii")
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another Pulse's record never lands between the write and its check
            end = _whole_lines_end(fd)
            written = os.write(fd, line)
            if written != len(line):
                os.ftruncate(fd, end)
                raise OSError(errno.ENOSPC, f"short write, {written} of {len(line)} bytes; the partial record was removed")
        finally:
            os.close(fd)
        if self.on_record is not None:
            try:
                self.on_record(entry)
            except Exception:  # noqa: BLE001 - the record is written; a copy elsewhere (the journal) never fails the action
                pass
        return entry

    def _open(self, create: bool = True) -> int:
        """The log opened for appending; OSError when it cannot be, or is not a regular file.

        Opened to create it, it is opened to be read too (a record reads where its last line ends).
        """
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO in the log's place fails (ENXIO) or is refused below instead of blocking.
        flags = (os.O_RDWR | os.O_CREAT if create else os.O_WRONLY) | os.O_APPEND | os.O_NONBLOCK
        fd = os.open(self.path, flags, 0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(0, "not a regular file")
        return fd

    def unwritable(self) -> str | None:
        """Why an entry cannot be appended now, in a few words; None when it can. Creates nothing.

        A filesystem with no block left, or a log already at the process's file size limit, cannot
        take a record either; one nearly full is found by the record's own write (see `record`).
        """
        try:
            if os.path.lexists(self.path):
                fd = self._open(create=False)
                try:
                    return _no_room(fd)
                finally:
                    os.close(fd)
            folder = self.path.parent
            while not os.path.lexists(folder):
                folder = folder.parent
            if not folder.is_dir():
                return f"{folder} is not a folder"
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                return "Read-only file system"
            if not os.access(folder, os.W_OK | os.X_OK):
                return "Permission denied"
            if _free_blocks(os.statvfs(folder)) == 0:
                return os.strerror(errno.ENOSPC)
        except OSError as exc:
            return exc.strerror or str(exc)
        return None

    def records(self) -> list[dict]:
        """Every record so far, "started" ones included, oldest first (console.sent.read_records)."""
        return read_records(self.path)

    def entries(self) -> list[dict]:
        """How each action ended (its "finished" or "interrupted" record), oldest first."""
        return [record for record in self.records() if record.get("record") != "started"]


def _free_blocks(fs: os.statvfs_result) -> int:
    # root may write into the blocks a filesystem reserves; anyone else may not
    return fs.f_bfree if os.geteuid() == 0 else fs.f_bavail


def _no_room(fd: int) -> str | None:
    """Why the open log `fd` cannot grow at all (no block left, at the file size limit); None when it can."""
    if _free_blocks(os.fstatvfs(fd)) == 0:
        return os.strerror(errno.ENOSPC)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and os.fstat(fd).st_size >= limit:
        return os.strerror(errno.EFBIG)
    return None


#: How much of a log's end is read at a time when looking for its last line end.
_TAIL_CHUNK = 1 << 16


def _whole_lines_end(fd: int) -> int:
    """The size of the log `fd` up to its last line end, after cutting off an unterminated last line
    (a record a crash left half written), so that what is appended next starts a line of its own."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        os.ftruncate(fd, end)
    return end


def outcome_of(events: list[StepEvent], finished: bool, why: str = "") -> str:
    """One line for the audit log: ok (with the last step's detail), failed at a step, or interrupted."""
    failed = [event for event in events if event.status is StepStatus.FAILED]
    if failed:
        return f"failed: {failed[0].step}: {failed[0].detail}"
    if not finished:
        last = events[-1].step if events else "start"
        at = last if last.startswith("step ") else f"step {last}"  # warmup's steps are named "step N/M"
        return f"interrupted at {at}" + (f" ({why})" if why else "")
    warnings = sum(event.status is StepStatus.WARNING for event in events)
    done = final_steps(events)
    detail = done[-1].detail if done else ""
    note = f" ({warnings} warning{'s' * (warnings != 1)})" if warnings else ""
    return f"ok{note}: {detail}" if detail else f"ok{note}"


def _unwritable_text(action: str, log: AuditLog, why: str) -> str:
    return f"audit log {log.path} cannot be written ({why}): {action} refused; --no-audit runs it without a record"


def audit_refusal(action: str, log: AuditLog) -> str | None:
    """The one-line refusal of a mutating action whose audit log cannot be written; None when it can."""
    why = log.unwritable()
    return None if why is None else _unwritable_text(action, log, why)


async def audited(
    events: AsyncGenerator[StepEvent | OutputLine, None],
    *,
    log: AuditLog | None,
    action: str,
    target: Target,
    plan: dict,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Record the plan, pass an executor's events through, and record how the action ended.

    The "started" record is written before the executor takes its first step: ActionRefused
    (nothing done) when it cannot be. A cancelled action (a signal to Pulse, a closed screen)
    is recorded as interrupted at its last step. `log` None (--no-audit) runs unrecorded and says so.
    """
    seen: list[StepEvent] = []
    finished = False
    container = target.container.describe() if target.container is not None else None
    if log is None:
        yield StepEvent("audit", StepStatus.WARNING, f"no audit record of this {action} (--no-audit)")
    else:
        try:
            log.record(action, target.label, plan, [], "started", container=container, record="started")
        except OSError as exc:
            await events.aclose()
            raise ActionRefused(_unwritable_text(action, log, exc.strerror or str(exc))) from None
    why = ""
    try:
        async for event in events:
            if isinstance(event, StepEvent):
                seen.append(event)
            yield event
        finished = True
    except asyncio.CancelledError as exc:
        why = " ".join(map(str, exc.args))
        raise
    finally:
        if not finished and log is not None:
            # Let the executor clean up (stop what it started) before the record is written.
            await events.aclose()
            try:
                log.record(action, target.label, plan, seen, outcome_of(seen, False, why),
                           container=container, record="interrupted")
            except OSError:
                pass  # the action's own error (or the cancellation) is what the caller must see
    if log is None:
        return
    try:
        log.record(action, target.label, plan, seen, outcome_of(seen, True), container=container)
    except OSError as exc:
        yield StepEvent("audit", StepStatus.WARNING, f"could not write the audit log {log.path}: {exc.strerror}")
