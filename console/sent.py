"""What Pulse itself did to the run's processes, as its audit log holds it: the one reader of that file.

A signal Pulse sent is a fact, not a guess: a process in state T after Pulse's own SIGSTOP was stopped
by the operator (console.diagnose's "stopped" verdict says so, with the time), never "hung".
The writer is console.actions.audit.AuditLog, which reads its records back through `read_records`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The clock of Pulse's machine and the target's /proc agree to within this (a process's start is
#: now − its elapsed time): a signal older than the process it names was sent to another one of that PID.
_START_SLACK_S = 2.0


@dataclass(frozen=True, slots=True)
class SentSignal:
    """A signal Pulse sent (the `k` action, audited) and the process got it."""

    pid: int
    signal: str
    """Its name without SIG: STOP, CONT, TERM, ..."""
    at: float
    """When it was sent (epoch seconds on Pulse's machine)."""
    host: str
    """The target's label as the audit log records it."""


def read_records(path: str | os.PathLike[str]) -> list[dict]:
    """Every record of the audit log at `path`, oldest first (an absent file has none).

    Lines end at `\\n` only (a record holds no other line end: U+2028 in it is escaped); an
    unterminated last line was never a whole record and is left out.
    """
    try:
        data = Path(os.path.expanduser(os.fspath(path))).read_bytes()
    except FileNotFoundError:
        return []
    whole = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in whole.split(b"\n") if line.strip()]


def signals_sent(records: Iterable[dict]) -> list[SentSignal]:
    """The signals the audit log says reached their process (finished, its step ok), oldest first."""
    sent = []
    for record in records:
        if record.get("action") != "signal" or record.get("record") != "finished":
            continue
        plan, steps = record.get("plan") or {}, record.get("steps") or []
        if not any(step.get("status") == "ok" for step in steps):
            continue
        sent.append(SentSignal(int(plan["pid"]), str(plan["signal"]), float(record["time"]), str(record.get("host", ""))))
    return sent


def last_signal(sent: Iterable[SentSignal], pid: int, started_at: float) -> SentSignal | None:
    """The newest signal sent to `pid` since that process started (epoch seconds): an older one named
    another process of the same PID."""
    found = [s for s in sent if s.pid == pid and s.at >= started_at - _START_SLACK_S]
    return max(found, key=lambda s: s.at) if found else None
