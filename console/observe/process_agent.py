"""Pulse's process agent: start a process on the target, read processes, signal them by identity.

console.observe.remote_process sends this file's text, after that of console/observe/procfs.py
(its reader of /proc and pidfiles: console.remote.program.program_source), to the target through
console.remote.program.open_program; there it runs under any Python 3.8+ with the standard
library only. A process is named by its PID and its start time (field 22 of /proc/PID/stat,
in clock ticks since boot): a PID alone may belong to another process by the time a signal
is sent, the pair never does. Every command's first line is the hello of
console/observe/protocol.py; then one JSON line per result, every key always present.

    start  [--cwd DIR] [--env NAME=VALUE]... [--merge-stderr] -- ARGV...
        Starts ARGV as the leader of a new session, prints
        {"ev": "started", "pid", "start_ticks"} before it runs, then lets it write to this
        program's stdout and stderr and exits with its status (128+N after signal N).
    launch --log FILE [--pidfile FILE] [--cwd DIR] [--env NAME=VALUE]... -- ARGV...
        Starts ARGV detached: a new session, SIGHUP ignored, stdin /dev/null, stdout and
        stderr appended to FILE (its folder made). FILE and the pidfile are relative to where
        this program starts, as the other readers of them see them, not to --cwd. Prints {"ev": "launched", "pid",
        "start_ticks", "pidfile_error"} once ARGV runs, writes the pidfile by rename, exits.
    info   PID...
        {"ev": "process", "pid", "state", "pgid", "start_ticks"} for each PID that exists.
    descendants PID
        {"ev": "descendant", "pid"} for every descendant of PID, parents first.
    signal --signal NAME DEST...      DEST = PID:START_TICKS or PID:START_TICKS:group
        Sends NAME to the process (or to its process group) only while PID still has that
        start time: {"ev": "signalled", "pid", "said"} with said = sent, gone or reused.
    probe  [--mark TEXT] [--pidfile FILE] [--lock FILE] PID...
        For the restart's guards: {"ev": "process", "kind", "pid", "state", "ppid", "pgid",
        "sid", "start_ticks", "started", "pulse", "comm", "argv"} for this program and each
        ancestor (kind self), each PID (proc) and the process the pidfile names (named);
        `started` is its start as wall-clock time here. {"ev": "member", "pid", "pgid"} for
        every process in a group that one of the PIDs leads; {"ev": "pidfile", "status",
        "text", "mtime"}: missing, symlink (text: where it points), notregular, toolarge (text:
        its size), unreadable (text: why) or text, never read through a link; {"ev": "lock",
        "status", "owner"} for a `lock` FILE, read without taking it: free, held (its holder
        runs) or stale (left by a holder that is gone).
    stop   --grace S PID:START_TICKS
        Ends the process group PID leads: SIGTERM, then SIGKILL to what is left after S
        seconds. {"ev": "stopped", "pid", "said"}: stopped, killed, gone or reused.
    lock   --file FILE --owner JSON [--idle S]
        Holds an exclusive flock(2) on FILE (its folder made, never opened through a link) for
        one restart at a time: {"ev": "lock", "status": "locked", "path", "previous"} once
        held, the owner (JSON, with this holder's pid, start_ticks and since added) written
        into FILE; `previous` is what a holder that is gone left there (null after a release).
        {"ev": "lock", "status": "held", "path", "owner"} when another holds it, or "error"
        with "why", and it exits. An owner read from FILE comes with `now`, this clock's time. Held until stdin ends or sends nothing for S seconds (a link
        cut without a hang-up), or SIGTERM/SIGHUP; FILE is then emptied. The kernel drops the
        flock of a holder killed outright, and its owner left in FILE reads as stale.

A failure to start (no such program, a missing --cwd) is one line on stderr, `pulse-process:
cannot …`, and exit 127; `start` then prints no `started` line. A started process has SIGPIPE
and SIGXFSZ as a shell would give them (Python ignores both, and ignoring survives exec).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import signal
import stat
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from console.observe.procfs import CLOCK_TICKS, Record, pidfile_pid, read_argv, read_pidfile, since_boot, stat_of

PROTOCOL = 1
PROGRAM = "pulse-process"
#: Exit status when ARGV could not be started (the shell's "command not found").
CANNOT_START = 127
STOP_POLL_S = 0.05
#: A command line is answered up to this many characters: enough for the guards' names, bounded for the answer.
ARGV_ANSWER_CHARS = 512
#: How much of a command line is searched for the mark of a program Pulse runs.
CMDLINE_READ_BYTES = 65536
#: A lock file holds one owner record: what is read of it is bounded.
LOCK_MAX_BYTES = 4096


def is_same(pid: int, start_ticks: int) -> Optional[bool]:
    """True while `pid` is the process that started at `start_ticks`, False once reused, None when gone."""
    found = stat_of(pid)
    return None if found is None else found["start_ticks"] == start_ticks


def write_line(record: Record) -> None:
    sys.stdout.write(json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def hello() -> Record:
    python = "%d.%d.%d" % sys.version_info[:3]
    return {"ev": "hello", "program": PROGRAM, "protocol": PROTOCOL, "python": python, "pynvml": None}


def environment(assignments: List[str]) -> Dict[str, str]:
    env = dict(os.environ)
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        env[name] = value
    return env


def place(path: str) -> str:
    """`path` as every reader of it on the target sees it: `~` is the home, a relative path is
    under the folder this program started in (not under --cwd)."""
    return os.path.abspath(os.path.expanduser(path))


class Spawned:
    """A child forked as a new session, set up, and held before exec until `release`."""

    def __init__(self, pid: int, start_ticks: int, go_write: int, failed_read: int) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.go_write = go_write
        self.failed_read = failed_read

    def release(self) -> Optional[str]:
        """Let the child exec; the reason it could not, or None once ARGV runs."""
        os.close(self.go_write)
        return read_failure(self.failed_read)


def read_failure(fd: int) -> Optional[str]:
    """What a child wrote to its failure pipe before the pipe closed (at exec or exit)."""
    said = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        said += chunk
    os.close(fd)
    return said.decode("utf-8", "replace") or None


def spawn(args: argparse.Namespace, log: Optional[str]) -> Tuple[Optional[Spawned], Optional[str]]:
    """Fork ARGV as a new session, set up (folder, log, signals) and held before exec;
    (the child, None), or (None, why it could not be set up).

    The child says it is ready once it leads its session, so the identity printed is that of
    a process whose group can be signalled; it then waits for the go pipe to close, so that
    the identity is out before it can write anything. Every pipe is closed on exec.
    """
    go_read, go_write = os.pipe()
    ready_read, ready_write = os.pipe()
    failed_read, failed_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        doing = "start"
        try:
            for fd in (go_write, ready_read, failed_read):
                os.close(fd)
            os.setsid()
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            if args.cwd:
                doing = "cd %s" % args.cwd
                os.chdir(os.path.expanduser(args.cwd))
            if log is not None:
                doing = "open the log %s" % log
                signal.signal(signal.SIGHUP, signal.SIG_IGN)  # survives exec, as under nohup
                folder = os.path.dirname(log)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOCTTY, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
            elif args.merge_stderr:
                os.dup2(1, 2)
            # Python ignores these; an ignored signal survives exec, and `yes | head` would never end.
            for restored in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(restored, signal.SIG_DFL)
            os.write(ready_write, b".")
            while os.read(go_read, 1):
                pass
            doing = "run %s" % args.argv[0]
            os.execvpe(args.argv[0], args.argv, environment(args.env))
        except BaseException as exc:  # anything at all: the child must never return into the agent
            message = "cannot %s: %s" % (doing, getattr(exc, "strerror", None) or exc)
            os.write(failed_write, message.encode("utf-8", "replace"))
        os._exit(CANNOT_START)
    for fd in (go_read, ready_write, failed_write):
        os.close(fd)
    ready = os.read(ready_read, 1)
    os.close(ready_read)
    if not ready:
        failure = read_failure(failed_read)
        os.close(go_write)
        os.waitpid(pid, 0)
        return None, failure or "cannot start %s" % args.argv[0]
    found = stat_of(pid)  # it waits on the go pipe: its stat is there
    return Spawned(pid, found["start_ticks"] if found is not None else -1, go_write, failed_read), None


def exit_status(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def cannot_start(failure: str) -> int:
    sys.stderr.write("pulse-process: %s\n" % failure)
    return CANNOT_START


def start(args: argparse.Namespace) -> int:
    child, failure = spawn(args, None)
    if child is None:
        return cannot_start(failure or "")
    write_line({"ev": "started", "pid": child.pid, "start_ticks": child.start_ticks})
    failure = child.release()
    _, status = os.waitpid(child.pid, 0)
    return cannot_start(failure) if failure is not None else exit_status(status)


def write_pidfile(path: str, pid: int) -> Optional[str]:
    """Write `pid` beside `path` and rename it into place (whatever was there, a FIFO even, is
    replaced, never opened; a symbolic link is left alone: replacing it would leave the file it
    points at with the old PID); the error, or None."""
    if os.path.islink(path):
        return "%s is a symbolic link (to %s): not replaced; point [run] pidfile at the file itself" % (
            path, os.readlink(path))
    written = None
    try:
        fd, written = tempfile.mkstemp(prefix=".pulse-", dir=os.path.dirname(path) or ".")
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as a shell's `>` would make it, not mkstemp's 0600
        with os.fdopen(fd, "w") as out:
            out.write("%d\n" % pid)
        os.replace(written, path)
    except OSError as exc:
        if written is not None and os.path.lexists(written):
            os.unlink(written)
        return "%s: %s" % (path, exc.strerror or exc)
    return None


def launch(args: argparse.Namespace) -> int:
    child, failure = spawn(args, place(args.log))
    if child is None:
        return cannot_start(failure or "")
    failure = child.release()
    if failure is not None:
        os.waitpid(child.pid, 0)
        return cannot_start(failure)
    pidfile_error = write_pidfile(place(args.pidfile), child.pid) if args.pidfile else None
    write_line({"ev": "launched", "pid": child.pid, "start_ticks": child.start_ticks, "pidfile_error": pidfile_error})
    return 0


def info(args: argparse.Namespace) -> int:
    for pid in args.pids:
        found = stat_of(pid)
        if found is not None:
            write_line({"ev": "process", "pid": pid, "state": found["state"], "pgid": found["pgid"],
                        "start_ticks": found["start_ticks"]})
    return 0


def descendants(args: argparse.Namespace) -> int:
    todo = [args.pid]
    while todo:
        children = []
        for pid in todo:
            try:
                tasks = os.listdir("/proc/%d/task" % pid)
            except OSError:
                continue  # ended meanwhile
            for task in tasks:
                try:
                    with open("/proc/%d/task/%s/children" % (pid, task)) as listed:
                        children += [int(word) for word in listed.read().split()]
                except OSError:
                    pass
        for child in children:
            write_line({"ev": "descendant", "pid": child})
        todo = children
    return 0


def parse_dest(text: str) -> Tuple[int, int, bool]:
    words = text.split(":")
    if len(words) not in (2, 3) or (len(words) == 3 and words[2] != "group"):
        raise argparse.ArgumentTypeError("expected PID:START_TICKS[:group], got %r" % text)
    return int(words[0]), int(words[1]), len(words) == 3


def send(number: int, pid: int, start_ticks: int, group: bool) -> str:
    same = is_same(pid, start_ticks)
    if same is None:
        return "gone"
    if not same:
        return "reused"
    try:
        if group:
            os.killpg(pid, number)
        else:
            os.kill(pid, number)
    except ProcessLookupError:
        return "gone"
    return "sent"


def signal_number(name: str) -> int:
    try:
        return signal.Signals["SIG" + name].value
    except KeyError:
        raise argparse.ArgumentTypeError("no signal SIG%s" % name) from None


def send_signals(args: argparse.Namespace) -> int:
    for pid, start_ticks, group in args.dests:
        write_line({"ev": "signalled", "pid": pid, "said": send(args.signal, pid, start_ticks, group)})
    return 0


def group_running(pgid: int, proc_root: str = "/proc") -> bool:
    """True while a process of group `pgid` runs (a zombie has ended: it only waits to be reaped)."""
    for name in os.listdir(proc_root):
        if name.isdigit():
            found = stat_of(int(name), proc_root)
            if found is not None and found["pgid"] == pgid and found["state"] != "Z":
                return True
    return False


def signal_group(pgid: int, number: int) -> None:
    try:
        os.killpg(pgid, number)
    except ProcessLookupError:
        pass  # ended meanwhile


def stop(args: argparse.Namespace) -> int:
    pid, start_ticks, _ = args.dest
    # The leader may have exited while its group lives on: a group id is never handed out
    # again while the group has members, so the group is still the one started.
    if is_same(pid, start_ticks) is False:
        said = "reused"
    elif not group_running(pid):
        said = "gone"
    else:
        signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + args.grace
        while group_running(pid) and time.monotonic() < deadline:
            time.sleep(STOP_POLL_S)
        said = "stopped"
        if group_running(pid):
            signal_group(pid, signal.SIGKILL)
            said = "killed"
    write_line({"ev": "stopped", "pid": pid, "said": said})
    return 0


def describe(kind: str, pid: int, mark: str) -> Optional[Record]:
    """What the restart's guards need of `pid`: its place (parent, group, session), start, names,
    and whether its command line carries `mark` (a program Pulse runs); None when it is gone."""
    found = stat_of(pid)
    if found is None:
        return None
    try:
        words = "\0".join(read_argv("/proc/%d" % pid, CMDLINE_READ_BYTES))
    except OSError:
        words = ""
    answered = words[:ARGV_ANSWER_CHARS].rstrip("\0")
    argv = answered.split("\0") if answered else []
    started = time.time() - since_boot() + found["start_ticks"] / CLOCK_TICKS
    return {"ev": "process", "kind": kind, "pid": pid, "state": found["state"], "ppid": found["ppid"],
            "pgid": found["pgid"], "sid": found["sid"], "start_ticks": found["start_ticks"],
            "started": round(started, 2), "pulse": bool(mark) and mark in words, "comm": found["comm"], "argv": argv}


def read_lock_owner(fd: int) -> Optional[Record]:
    """The owner record a lock file holds; None when it is empty (released)."""
    data = os.pread(fd, LOCK_MAX_BYTES, 0)
    if not data.strip():
        return None
    try:
        owner = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        owner = None
    return owner if isinstance(owner, dict) else {"unreadable": data[:200].decode("utf-8", "replace")}


def open_lock(path: str) -> int:
    """The lock file's descriptor (made with its folder); OSError when it is a link or not a regular file."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    return fd


def holder_alive(owner: Record) -> bool:
    """True while the process that wrote `owner` into a lock file runs: its PID still has its start
    time and it has not exited (a zombie's files, its lock among them, are closed)."""
    pid, start_ticks = owner.get("holder_pid"), owner.get("holder_start_ticks")
    if not isinstance(pid, int) or not isinstance(start_ticks, int) or pid <= 0:
        return False
    found = stat_of(pid)
    return found is not None and found["start_ticks"] == start_ticks and found["state"] not in ("Z", "X")


def peek_lock(path: str) -> Record:
    """A lock file's state, read without taking it (taking it, even briefly, would make a restart
    trying at that moment fail): free, held or stale, and the owner it names."""
    try:
        fd = os.open(place(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return {"ev": "lock", "status": "free", "owner": None}
    except OSError as exc:
        return {"ev": "lock", "status": "error", "owner": {"unreadable": exc.strerror or str(exc)}}
    try:
        owner = read_lock_owner(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)
    status = "free" if owner is None else "held" if holder_alive(owner) else "stale"
    return {"ev": "lock", "status": status, "owner": seen_now(owner)}


def seen_now(owner: Optional[Record]) -> Optional[Record]:
    """`owner` with this clock's time added as `now`, so that its `since` is read against the clock that wrote it."""
    return None if owner is None else dict(owner, now=time.time())


def released(fd: int, idle_s: float) -> None:
    """Wait until stdin ends, sends nothing for `idle_s`, or SIGTERM/SIGHUP comes; then empty the lock file."""

    def hang_up(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, hang_up)
    try:
        while True:
            ready, _, _ = select.select([0], [], [], idle_s)
            if not ready or not os.read(0, 4096):
                return
    finally:
        os.ftruncate(fd, 0)  # released: whoever takes it next finds no owner left behind
        os.close(fd)


def hold_lock(args: argparse.Namespace) -> int:
    path = place(args.file)
    try:
        owner = json.loads(args.owner)
        fd = open_lock(path)
    except (OSError, ValueError) as exc:
        write_line({"ev": "lock", "status": "error", "path": path, "why": getattr(exc, "strerror", None) or str(exc)})
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        write_line({"ev": "lock", "status": "held", "path": path, "owner": seen_now(read_lock_owner(fd))})
        os.close(fd)
        return 0
    except OSError as exc:
        write_line({"ev": "lock", "status": "error", "path": path, "why": exc.strerror or str(exc)})
        os.close(fd)
        return 0
    previous = seen_now(read_lock_owner(fd))  # the flock was free: whoever wrote this is gone
    found = stat_of(os.getpid())
    owner.update(holder_pid=os.getpid(), holder_start_ticks=found["start_ticks"] if found else -1, since=time.time())
    record = json.dumps(owner).encode() + b"\n"
    os.pwrite(fd, record, 0)
    os.ftruncate(fd, len(record))
    write_line({"ev": "lock", "status": "locked", "path": path, "previous": previous})
    released(fd, args.idle)
    return 0


def probe(args: argparse.Namespace) -> int:
    mark = args.mark
    pid = os.getpid()  # exec'd by the probing shell: this is that shell, then its ancestors
    while pid > 0:
        found = describe("self", pid, mark)
        if found is None:
            break
        write_line(found)
        pid = found["ppid"]
    for pid in args.pids:
        found = describe("proc", pid, mark)
        if found is not None:
            write_line(found)
    wanted = set(args.pids)
    if wanted:
        for name in os.listdir("/proc"):
            found = stat_of(int(name)) if name.isdigit() else None
            if found is not None and found["pgid"] in wanted:
                write_line({"ev": "member", "pid": found["pid"], "pgid": found["pgid"]})
    if args.lock:
        write_line(peek_lock(args.lock))
    if args.pidfile:
        status, text, mtime = read_pidfile(args.pidfile)
        write_line({"ev": "pidfile", "status": status, "text": text, "mtime": mtime})
        named = pidfile_pid(text) if status == "text" else None
        if named is not None:
            found = describe("named", named, mark)
            if found is not None:
                write_line(found)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description="Start and signal processes by identity.",
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "launch"):
        command = commands.add_parser(name, allow_abbrev=False)
        command.add_argument("--cwd", default=None, help="the folder ARGV starts in")
        command.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
        if name == "start":
            command.add_argument("--merge-stderr", action="store_true", help="ARGV's stderr goes to stdout")
        else:
            command.add_argument("--log", required=True, help="file that ARGV's output is appended to")
            command.add_argument("--pidfile", default=None, help="file to hold ARGV's PID")
        command.add_argument("argv", nargs="+", metavar="ARGV")
    command = commands.add_parser("info", allow_abbrev=False)
    command.add_argument("pids", nargs="+", type=int, metavar="PID")
    command = commands.add_parser("descendants", allow_abbrev=False)
    command.add_argument("pid", type=int, metavar="PID")
    command = commands.add_parser("signal", allow_abbrev=False)
    command.add_argument("--signal", required=True, type=signal_number, help="TERM, KILL, INT, ...")
    command.add_argument("dests", nargs="+", type=parse_dest, metavar="DEST")
    command = commands.add_parser("probe", allow_abbrev=False)
    command.add_argument("--mark", default="", help="text in the command line of every program Pulse runs")
    command.add_argument("--pidfile", default=None, help="a pidfile to read, bounded")
    command.add_argument("--lock", default=None, help="a restart's lock file to read, not take")
    command.add_argument("pids", nargs="*", type=int, metavar="PID")
    command = commands.add_parser("stop", allow_abbrev=False)
    command.add_argument("--grace", type=float, required=True, help="seconds between SIGTERM and SIGKILL")
    command.add_argument("dest", type=parse_dest, metavar="PID:START_TICKS")
    command = commands.add_parser("lock", allow_abbrev=False)
    command.add_argument("--file", required=True, help="the lock file")
    command.add_argument("--owner", required=True, help="who takes it, as a JSON object")
    command.add_argument("--idle", type=float, default=30.0, help="seconds without a line on stdin that end it")
    return parser


COMMANDS = {"start": start, "launch": launch, "info": info, "signal": send_signals, "stop": stop, "probe": probe,
            "descendants": descendants, "lock": hold_lock}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("start", "launch") and args.argv[0] == "--":
        del args.argv[0]
    write_line(hello())
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
