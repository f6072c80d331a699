"""How the diagnosis words what it saw: who a thread is, the frame worth reading, times and clipped quotes.
Pure. The prose names no console key (the console adds the key of a verdict's step)."""

from __future__ import annotations

import time

from console.diagnose.evidence import StackSummary
from console.model import ProcessReading

#: How many problems a verdict quotes (each by the line that names it).
QUOTED_LINES = 3
QUOTE_CHARS = 160


def record_text() -> str:
    """How the evidence names a recording of the stacks (console.observe.pyspy_run.record)."""
    from console.observe.pyspy import RECORD_HZ, RECORD_S  # py-spy's parsing loads with the first recording, not at start

    return f"{RECORD_S} s at {RECORD_HZ} Hz"


def clock_text(at: float) -> str:
    """HH:MM:SS of an epoch time, in the local time of Pulse's machine (where the operator sent it from)."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def exception_type(line: str) -> str:
    """'torch.OutOfMemoryError' from a traceback's last line (the whole line is evidence)."""
    return clip(line.split(":", 1)[0].strip() or line, 80)


def user_frame(where: str) -> str:
    """The run's own frame of a 'call ← frame' where, e.g. 'read_batch (ddp_allreduce.py:32)'."""
    return where.rpartition(" ← ")[2]

def thread_who(thread: StackSummary) -> str:
    """'rank 1 (pid 1165)', 'main (pid 711)', or 'pid 711' for a process without a label."""
    name = thread.label.split(" · ", 1)[0]
    return f"{name} (pid {thread.pid})" if name else f"pid {thread.pid}"


def short_who(who: str) -> str:
    """'rank 1 (pid 1165)' → 'rank 1'; a bare 'pid 711' stays."""
    return who.split(" (pid ", 1)[0]


def lifetime_cpu_pct(process: ProcessReading) -> float | None:
    """CPU% averaged over the process's whole life: what `ps` shows, and why it cannot tell a hang."""
    if process.cpu_s is None or process.elapsed_s <= 0:
        return None
    return process.cpu_s / process.elapsed_s * 100.0


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
