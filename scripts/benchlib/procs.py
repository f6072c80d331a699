"""What processes cost, read from /proc and wait4: CPU of a process tree, RSS, one timed command.

CPU of a tree is the sum, over a process and its live descendants, of utime+stime plus the
cutime+cstime of children they have reaped. The difference of two readings is then exactly
the CPU the tree spent in between, even when processes were born and reaped in between
(a reaped child's whole time moves into its parent's cutime, and its time before the first
reading had been counted then).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def parent_map() -> dict[int, int]:
    """pid → ppid of every process now."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                parents[int(name)] = int(fields[1])
    return parents


def tree(pid: int) -> list[int]:
    """`pid` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for child, parent in parent_map().items():
        children.setdefault(parent, []).append(child)
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [kid for p in frontier for kid in children.get(p, ())]
        found += frontier
    return found


def cpu_s(pid: int, *, reaped: bool = True) -> float:
    """utime+stime of one process (plus its reaped children's with `reaped`), seconds; 0 if gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def tree_cpu(pid: int, kinds: dict[str, str] | None = None) -> dict[str, float]:
    """CPU seconds of the tree under `pid`, as {"total": …} plus one entry per kind in `kinds`
    (kind name → text its command line contains; the first match wins, the rest is "other")."""
    out = {"total": 0.0, **{name: 0.0 for name in kinds or {}}, "other": 0.0}
    for member in tree(pid):
        spent = cpu_s(member)
        out["total"] += spent
        line = cmdline(member)
        kind = next((name for name, mark in (kinds or {}).items() if mark in line), "other")
        out[kind] += spent
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}


def rss_mib(pid: int | str = "self") -> float:
    """Resident set size now, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


_PYMALLOC_IN_USE = re.compile(rb"# bytes in allocated blocks\s*=\s*([\d,]+)")


def heap_mib() -> float:
    """What this process has allocated and not freed, MiB: Python's small objects (pymalloc's
    blocks in use) plus malloc's chunks in use (Python's larger objects and every C library's:
    glibc's mallinfo2). RSS counts the pages ever touched and rarely falls; this moves by the
    byte, both ways. pymalloc reports only through `sys._debugmallocstats`, on fd 2, which is
    sent to a file meanwhile: call it where no other thread writes to stderr."""
    with tempfile.TemporaryFile() as report:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(report.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        found = _PYMALLOC_IN_USE.search(report.read())
    pymalloc = int(found.group(1).replace(b",", b"")) if found else 0
    info = _mallinfo2()()
    return (pymalloc + info.uordblks + info.hblkhd) / 2**20


@functools.cache
def _mallinfo2():
    mallinfo2 = getattr(ctypes.CDLL(None), "mallinfo2", None)
    if mallinfo2 is None:
        raise RuntimeError("the heap's size is read with glibc's mallinfo2 (glibc 2.33 or later): not found here")
    mallinfo2.restype = _MallInfo2
    return mallinfo2


@dataclass(frozen=True)
class Timed:
    """One command run to its end: wall time and the CPU it and its children used (wait4)."""

    wall_s: float
    cpu_s: float
    status: int
    stdout: bytes


def run_timed(argv: list[str], timeout: float = 30.0) -> Timed:
    """Run `argv`, read all its output, and reap it with wait4 for its own CPU figure."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out = _read_all(process, timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
    return Timed(wall, usage.ru_utime + usage.ru_stime, process.returncode, out)


def _read_all(process: subprocess.Popen, timeout: float) -> bytes:
    """Its stdout to EOF (checked against `timeout` between chunks), without reaping it."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    chunks = []
    while chunk := process.stdout.read1(65536):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)
    process.stdout.close()
    return b"".join(chunks)


def self_cpu_s() -> float:
    """This process's CPU (all threads) so far, seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine() -> dict:
    """What the figures were measured on."""

    def first_line(argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "unknown"

    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    import asyncssh
    import textual

    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "openssh": first_line(["ssh", "-V"]),
        "python": platform.python_version(),
        "asyncssh": asyncssh.__version__,
        "textual": textual.__version__,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "executable": sys.executable,
    }
