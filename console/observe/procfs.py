"""The agents' one reader of /proc and of pidfiles: stat lines, command lines, the time since boot, a pidfile.

Both agents that read processes (agent.py, process_agent.py) import these names; each is shipped
with this file's text before its own (console.remote.program.program_source), so what runs on the
target is one program, still standard library only and Python 3.8+. A process is named by its PID
and its start time (`start_ticks`, field 22 of /proc/PID/stat, in clock ticks since boot).
"""

from __future__ import annotations

import os
import stat
import time
from typing import Any, Dict, List, Optional, Tuple

Record = Dict[str, Any]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: The kernel's flag for its own threads (field 9 of /proc/PID/stat): their command line is always empty.
PF_KTHREAD = 0x00200000
#: The most of a /proc text file that is read unless a caller says otherwise (an environment is kilobytes).
PROC_READ_BYTES = 1 << 20
#: A pidfile holds one PID and a newline: a larger file is refused unread.
PIDFILE_MAX_BYTES = 64
#: The most digits of a PID (the kernel's PID_MAX_LIMIT is 4,194,304).
PID_MAX_DIGITS = 9


def parse_stat(text: str) -> Record:
    """The fields Pulse uses from one /proc/PID/stat (or task/TID/stat) line."""
    # comm sits in parentheses and may itself hold spaces and ')': split at the last one.
    open_at = text.index("(")
    close_at = text.rindex(")")
    rest = text[close_at + 2 :].split()
    return {
        "pid": int(text[:open_at]),
        "comm": text[open_at + 1 : close_at],
        "state": rest[0],
        "ppid": int(rest[1]),
        "pgid": int(rest[2]),
        "sid": int(rest[3]),
        "cpu_ticks": int(rest[11]) + int(rest[12]),
        "threads": int(rest[17]),
        "start_ticks": int(rest[19]),
        "rss_pages": int(rest[21]),
        "kernel_thread": bool(int(rest[6]) & PF_KTHREAD),
    }


def read_text(path: str, limit: int = PROC_READ_BYTES) -> str:
    """The first `limit` bytes of a /proc file, as text."""
    # os.open/os.read rather than open(): a sample reads many of these small files, and a
    # file object costs more than the read itself.
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(65536, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def read_stat(path: str) -> Record:
    """parse_stat of a /proc stat file, in one read: the kernel hands over the whole line at once."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return parse_stat(os.read(fd, 4096).decode("utf-8", "replace"))
    finally:
        os.close(fd)


def stat_of(pid: int, proc_root: str = "/proc") -> Optional[Record]:
    """read_stat of process `pid`, or None when there is no such process (it ended, or never was)."""
    try:
        return read_stat("%s/%d/stat" % (proc_root, pid))
    except (OSError, ValueError, IndexError):
        return None


def read_argv(proc_dir: str, limit: int) -> List[str]:
    """A process's argv from its /proc/PID/cmdline, its first `limit` bytes only ([] for a kernel
    thread or a zombie)."""
    raw = read_text(proc_dir + "/cmdline", limit)
    return raw.rstrip("\0").split("\0") if raw else []


def since_boot() -> float:
    """Seconds since boot on the clock that process start times count from: CLOCK_BOOTTIME (shifted
    as they are in a time namespace), not /proc/uptime, which lxcfs rewrites in a container."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return float(read_text("/proc/uptime").split()[0])


def read_pidfile(path: str) -> Tuple[str, str, Optional[float]]:
    """(status, text, mtime) of a pidfile, never opening anything but a small regular file, never
    through a link. status is missing, symlink (text: where it points), notregular, toolarge
    (text: its size), unreadable (text: why) or text (text: what it holds, printable; mtime: its
    last write, wall-clock time here)."""
    path = os.path.expanduser(path)
    try:
        if not os.path.lexists(path):
            return "missing", "", None
        if os.path.islink(path):
            return "symlink", os.readlink(path), None
        if not os.path.isfile(path):
            return "notregular", "", None
        size = os.stat(path).st_size
        if size > PIDFILE_MAX_BYTES:
            return "toolarge", str(size), None
        # O_NONBLOCK: a FIFO put there since the check opens at once instead of waiting for a
        # writer; O_NOFOLLOW: nor is a link put there since read through.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return "notregular", "", None
            data = os.read(fd, PIDFILE_MAX_BYTES)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return "missing", "", None  # removed since the first look
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc), None
    return "text", "".join(c if c.isprintable() else " " for c in data.decode("ascii", "replace")), info.st_mtime


def pidfile_pid(text: str) -> Optional[int]:
    """The PID a pidfile's text holds (digits, blanks around them), or None when it holds something else."""
    number = text.strip()
    return int(number) if number.isdigit() and len(number) <= PID_MAX_DIGITS else None
