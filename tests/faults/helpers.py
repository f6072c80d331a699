"""What the fault tests share: a line recorder that checks order and checksum, RSS, waits and cuts.

Lines written by the tests' writers are `line I ...` with I counting from 0, so a recorder can
tell at once whether a line was lost (a gap) or repeated (a step back) without keeping them all.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from console.model import ConnectionState, ConnectionStatus, LogLine
from console.remote.target import Target

#: Upper bound on any wait: other engineers' tests share the two cores. Never a speed assertion.
WAIT_S = 90.0
#: The issue's bound: the console is connected again within this long of the server being back.
RECONNECT_BOUND_S = 2.0
NUMBERED = re.compile(r"line (\d+)\b")


async def until(condition: Callable[[], object], what: str, timeout: float = WAIT_S) -> object:
    """Poll `condition` without blocking the loop; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def rss_mib(pid: int | None = None) -> float:
    """Resident memory of `pid` (default: this process) in MiB, from /proc."""
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return kib / 1024


class LineDigest:
    """An `on_lines` callback that keeps a sha256 of the lines (each + '\\n') instead of the lines.

    `numbered` checks that each `line I` is the next I: a loss or a repeat fails on the spot
    (`problems`) with the line that shows it, so a million lines need no list to compare.
    """

    def __init__(self, *, numbered: bool = True, keep: int = 0) -> None:
        self.sha = hashlib.sha256()
        self.count = 0
        self.numbered = numbered
        self.expected = 0
        self.problems: list[str] = []
        self.cut = 0
        self.last_numbers: list[int] = []
        self.kept: list[LogLine] = []
        self._keep = keep

    def __call__(self, lines: list[LogLine]) -> None:
        for line in lines:
            self.count += 1
            self.sha.update(line.text.encode() + b"\n")
            self.cut += line.cut
            if self._keep and len(self.kept) < self._keep:
                self.kept.append(line)
            if self.numbered:
                match = NUMBERED.match(line.text)
                index = int(match.group(1)) if match else -1
                if index != self.expected and len(self.problems) < 20:
                    what = "repeated" if 0 <= index < self.expected else "lost"
                    self.problems.append(f"expected line {self.expected}, got {line.text[:60]!r} ({what})")
                self.expected = index + 1 if index >= 0 else self.expected

    @property
    def hexdigest(self) -> str:
        return self.sha.hexdigest()


class StateLog:
    """Every connection state a target reports, in order, with the monotonic time it was reported."""

    def __init__(self, target: Target) -> None:
        self.states: list[tuple[float, ConnectionState]] = []
        target.on_state(self._record)

    def _record(self, state: ConnectionState) -> None:
        self.states.append((time.monotonic(), state))

    def since(self, mark: int) -> list[ConnectionState]:
        return [state for _, state in self.states[mark:]]

    def connected_after(self, moment: float) -> float | None:
        """When the target was first CONNECTED at or after `moment`, or None."""
        for at, state in self.states:
            if at >= moment and state.status is ConnectionStatus.CONNECTED:
                return at
        return None

    def retry_scheduled(self, moment: float) -> float | None:
        """The retry time announced by the last RECONNECTING state reported before `moment`."""
        last = None
        for at, state in self.states:
            if at > moment:
                break
            if state.status is ConnectionStatus.RECONNECTING:
                last = state.retry_at
        return last


#: A writer that appends `line I <padding>` lines to a file in writes of varying size (cutting lines
#: across writes), pausing between writes, until a stop file exists; prints `COUNT SHA256` at the end.
PACED_WRITER = """
import hashlib, os, sys, time
path, stop, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
digest = hashlib.sha256()
sizes = (1, 9, 120, 700, 4096, 33)
count = 0
pending = bytearray()
with open(path, 'ab', buffering=0) as out:
    while not os.path.exists(stop):
        for _ in range(20):
            pending += b'line %d %s\\n' % (count, b'x' * (count % 61))
            count += 1
        while len(pending) > 64:
            cut = sizes[count % len(sizes)]
            out.write(pending[:cut]); digest.update(pending[:cut]); del pending[:cut]
        time.sleep(pause)
    out.write(pending); digest.update(pending)
print(count, digest.hexdigest())
"""


class PacedWriter:
    """A real writer process (PACED_WRITER) appending to `path` until `stop()`; `(count, sha256)` at the end."""

    def __init__(self, path: Path, pause_s: float = 0.005) -> None:
        self.path = path
        self.pause_s = pause_s
        self._stop = path.with_name(path.name + ".stop")
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> PacedWriter:
        self._stop.unlink(missing_ok=True)
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PACED_WRITER, str(self.path), str(self._stop), f"{self.pause_s:g}",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        )
        return self

    async def stop(self) -> tuple[int, str]:
        """Ask the writer to finish; the number of lines it wrote and the sha256 of every byte."""
        assert self._process is not None
        self._stop.touch()
        out, _ = await asyncio.wait_for(self._process.communicate(), WAIT_S)
        assert self._process.returncode == 0
        count, digest = out.decode().split()
        return int(count), digest

    def kill(self) -> None:
        """End the writer by its PID (cleanup after a failed test)."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()


def record_figure(name: str, **values: object) -> None:
    """Append one JSON line of figures to $PULSE_FAULT_FIGURES (scripts/soak sets it) for the notes."""
    where = os.environ.get("PULSE_FAULT_FIGURES")
    if where:
        with open(where, "a") as out:
            out.write(json.dumps({"figure": name, **values}) + "\n")
