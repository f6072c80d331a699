"""Pulse's sampling agent: one JSON line per interval about the run's processes, GPUs and log.

console.observe.sampler sends this file's text, after that of console/observe/procfs.py (its
reader of /proc and pidfiles: console.remote.program.program_source), to the target through
console.remote.program.open_program; there it runs under any Python 3.8+ with the standard
library only (and pynvml when the target has it). It is also importable, so tests call
its pieces directly. It takes named options (`pulse-agent --help`). Its first line is the
hello of console/observe/protocol.py (PROTOCOL, its Python and pynvml versions); each line
after it is one JSON object, every key always present:

    {"t", "gpu_source", "gpu_error", "gpus", "smi_gpu_csv", "smi_apps_csv",
     "processes", "process_error", "in_pid_namespace", "log"}

GPUs come from NVML in-process (`gpus`: dicts named like model.GpuReading) or, without it,
from nvidia-smi (`smi_*_csv`: its raw CSV, parsed on the console's side). Processes come
from /proc, CPU% as the delta of utime+stime between two samples. The agent exits when
its stdin reaches EOF or its stdout breaks, so it never outlives the channel that started it.

What it reads and sends is bounded: at most SMI_MAX_BYTES of each nvidia-smi answer, at most
ARGV_READ_BYTES of a command line (its first CMDLINE_CHARS sent, marked when cut), and no line
over LINE_MAX_BYTES (the run's processes past it are left out, and process_error says so).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import AbstractSet, Any, Container, Dict, Iterable, List, Optional, Set, Tuple

from console.observe.procfs import (
    CLOCK_TICKS,
    Record,
    pidfile_pid,
    read_argv,
    read_pidfile,
    read_stat,
    read_text,
    since_boot,
)

#: Programs whose command line may contain the run's pattern without being the run: the
#: operator's ssh session and launchers, searchers, pagers and editors, and tools pointed at the run.
NOT_THE_RUN = frozenset(
    """
    ssh sshd sudo su nohup setsid timeout pct docker kubectl nsenter unshare tmux screen
    grep egrep fgrep rg pgrep pkill ps top htop vim vi nvim nano emacs less more view
    tail cat head py-spy watch
    """.split()
)

#: Shells: one running a `-c` command string is a launcher (the `bash -lc 'cd … && setsid
#: nohup python3 train.py &'` parent of a run), one running a script file may be the run.
SHELLS = frozenset("bash sh zsh dash fish ksh csh tcsh".split())

#: Text in the command line of every program Pulse runs through console.remote.program:
#: another console's agent carries the same pattern in its arguments and is never the run.
PULSE_PROGRAM_MARK = "src=sys.stdin.buffer.read(n)"

#: Inode of the initial PID namespace: PROC_PID_INIT_INO (0xEFFFFFFC) in the kernel's
#: include/linux/proc_ns.h, fixed since Linux 3.8. Any other inode means a nested namespace.
INIT_PID_NAMESPACE_INODE = 0xEFFFFFFC

SMI_TIMEOUT_S = 5.0
#: The most of an nvidia-smi answer that is read: a GPU's row is ~200 bytes, a process's ~100
#: (three answers a line, each up to six times longer as JSON if it is garbage, stay under LINE_MAX_BYTES).
SMI_MAX_BYTES = 128 << 10
#: What is kept of nvidia-smi's stderr (its first line is what the operator reads).
SMI_STDERR_BYTES = 4096
#: The longest line the agent writes; the console refuses a longer one (sampler.MAX_LINE_BYTES).
LINE_MAX_BYTES = 4 << 20
#: How often the nvidia-smi fallback asks for the compute apps: each ask starts nvidia-smi a
#: second time (~27 ms of CPU); a sample in between repeats the last list.
APPS_EVERY_S = 5.0
#: A GPU's memory.used moving by more than this since the last ask means a run started or
#: stopped there: the apps are asked for at once rather than at the next APPS_EVERY_S.
APPS_MEMORY_JUMP_MIB = 1024.0
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
#: Seconds after its start from which a process's argv is taken as final (see ArgvCache).
ARGV_SETTLE_S = 2.0

#: The version of what this program prints; the console refuses an agent that speaks another.
PROTOCOL = 1
PROGRAM = "pulse-agent"


# -- /proc parsing (pure) ------------------------------------------------------------------


def parse_nspid(status_text: str) -> Tuple[int, ...]:
    """The NSpid line of /proc/PID/status: this PID from the /proc mount's namespace inwards."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            return tuple(int(word) for word in line.split()[1:])
    return ()


def python_unbuffered_flag(argv: List[str]) -> bool:
    """True when `argv` runs Python with -u among the interpreter's own options."""
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return False
    takes_value = "WXQ"
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-") or word == "-" or word.startswith("--"):
            return False
        for position, letter in enumerate(word[1:]):
            if letter == "u":
                return True
            if letter in "cm":
                return False  # what follows is the program, not interpreter options
            if letter in takes_value:
                if position == len(word) - 2:
                    next(words, None)  # `-W arg`: skip the separate value
                break
    return False


def program_names(record: Record) -> Tuple[str, ...]:
    """Names a process goes by: its comm, and argv[0]'s first word without a login shell's '-'."""
    names = [record.get("comm", "")]
    argv = record.get("argv") or []
    if argv and argv[0].split():
        names.append(os.path.basename(argv[0].split()[0]).lstrip("-"))
    return tuple(names)


def is_pulse_program(argv: List[str]) -> bool:
    """True for Pulse itself: a console or headless command (`pulse …`, `python -m console.cli …`),
    whose own command line names the run's pattern, or a program it started through its bootstrap."""
    if any(PULSE_PROGRAM_MARK in word for word in argv):
        return True
    if any(os.path.basename(word) == "pulse" for word in argv[:2]):
        return True
    return any(a == "-m" and b == "console.cli" for a, b in zip(argv, argv[1:]))


def shell_script_words(argv: List[str]) -> List[str]:
    """A shell's argv without its `-c` command string: what is left names a script it runs, if any."""
    words = argv[:1]
    rest = iter(argv[1:])
    for word in rest:
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            next(rest, None)  # the command string: launcher text, not the run
            continue
        words.append(word)
    return words


def match_words(record: Record) -> Optional[List[str]]:
    """The words of a process's command line the run's pattern may match; None when it is never the run."""
    argv = record.get("argv") or []
    if not argv or is_pulse_program(argv):
        return None
    names = program_names(record)
    if any(name in NOT_THE_RUN for name in names):
        return None
    if any(name in SHELLS for name in names):
        return shell_script_words(argv)
    return argv


def ancestry(procs: Iterable[Record], pid: int) -> List[int]:
    """`pid` and every ancestor of it present in `procs`, nearest first."""
    parent_of = {record["pid"]: record["ppid"] for record in procs}
    chain = []
    while pid in parent_of and pid not in chain:
        chain.append(pid)
        pid = parent_of[pid]
    return chain


def run_tree(procs: List[Record], roots: Iterable[int], self_pids: Iterable[int]) -> List[Record]:
    """The records of `roots` and all their descendants, parents first, never one of `self_pids`."""
    excluded = set(self_pids)
    by_pid = {record["pid"]: record for record in procs}
    children: Dict[int, List[int]] = {}
    for record in procs:
        children.setdefault(record["ppid"], []).append(record["pid"])
    chosen: List[Record] = []
    seen = set()
    stack = sorted((pid for pid in roots if pid in by_pid), reverse=True)
    while stack:
        pid = stack.pop()
        if pid in seen or pid in excluded:
            continue
        seen.add(pid)
        chosen.append(by_pid[pid])
        stack.extend(sorted(children.get(pid, ()), reverse=True))
    return chosen


#: A command line is matched on its first this-many characters (an argv can be megabytes).
MATCH_CHARS = 4096
#: The most of /proc/PID/cmdline that is read: one argument may be 128 KiB (the kernel's
#: MAX_ARG_STRLEN), so a launcher's whole `-c` string is stepped over and the match still sees
#: what follows it.
ARGV_READ_BYTES = (128 << 10) + 2 * MATCH_CHARS
#: A command line is sent to the console up to this many characters (it shows less), then CMDLINE_CUT.
CMDLINE_CHARS = 960
CMDLINE_CUT = " …[cut]"
#: CPU seconds the match regex may spend on one command line; a real pattern needs microseconds.
MATCH_BUDGET_S = 0.25


class MatchTimedOut(Exception):
    """The match regex ran past MATCH_BUDGET_S on one command line (catastrophic backtracking)."""


def _match_expired(signum: int, frame: Any) -> None:
    raise MatchTimedOut()


#: What select_run_processes found of each PID's command line: (the argv searched, whether it matched).
Searched = Dict[int, Tuple[List[str], bool]]


def select_run_processes(
    procs: List[Record], pattern: Any, self_pids: Iterable[int], searched: Optional[Searched] = None
) -> List[Record]:
    """The run's processes: those whose command line matches `pattern`, and their descendants.

    `procs` are records with pid, ppid, comm and argv. A match never counts when it is one of
    `self_pids` (the agent and the shells that launched it), a program in NOT_THE_RUN (ssh,
    grep, an editor or a tail whose command line merely names the run), a shell whose `-c`
    command string names it (its launcher), or a program Pulse started. Descendants
    (DataLoader workers) are included whatever their names.

    Each search gets MATCH_BUDGET_S of CPU time (SIGVTALRM; the standard `re` checks for
    signals while it backtracks) and raises MatchTimedOut past it. Off the main thread, where
    no signal can be set, it runs unbounded on the capped line.

    With `searched` (kept by the caller from one call to the next, for one pattern), a process whose
    argv is the very list searched last time (ArgvCache hands out one list while it holds one
    reading) is not searched again; `searched` is left holding what `procs` found.
    """
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    bounded = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = signal.signal(signal.SIGVTALRM, _match_expired) if bounded else None
    excluded = set(self_pids)
    before = searched if searched is not None else {}
    found: Searched = {}
    try:
        for record in procs:
            pid, argv = record["pid"], record["argv"]
            if pid in excluded:
                continue
            last = before.get(pid)
            if last is not None and last[0] is argv:
                found[pid] = last
                continue
            words = match_words(record)
            if not words:
                found[pid] = (argv, False)
                continue
            if bounded:
                signal.setitimer(signal.ITIMER_VIRTUAL, MATCH_BUDGET_S)
            try:
                found[pid] = (argv, regex.search(" ".join(words), 0, MATCH_CHARS) is not None)
            finally:
                if bounded:
                    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    finally:
        if bounded:
            signal.signal(signal.SIGVTALRM, previous)
    if searched is not None:
        searched.clear()
        searched.update(found)
    return run_tree(procs, [pid for pid, (_, matched) in found.items() if matched], excluded)


# -- /proc reading -------------------------------------------------------------------------


def shipped_cmdline(argv: List[str]) -> str:
    """The command line as the console gets it: its first CMDLINE_CHARS characters, CMDLINE_CUT marking a cut."""
    text = " ".join(argv)
    return text if len(text) <= CMDLINE_CHARS else text[:CMDLINE_CHARS] + CMDLINE_CUT


class ArgvCache:
    """Each process's argv, so that a sample reads only the stat files of processes it knows.

    An entry is keyed by (pid, start time, comm): a reused PID has another start time, and an
    exec changes comm. A process younger than ARGV_SETTLE_S is read again every sample: between
    fork and exec a child shows its parent's command line (with the same comm when Python
    starts Python), and a launcher shell execs its last command after its profile ran. An empty
    command line is kept only for a kernel thread: in the middle of an exec the kernel has set the
    new comm but not yet the new arguments (kept, the run would never match again).
    """

    def __init__(self) -> None:
        self._argv: Dict[Tuple[int, int, str], List[str]] = {}

    def argv(self, proc_dir: str, record: Record, uptime: float) -> List[str]:
        """`record`'s argv, read from `proc_dir` only when it is not known yet or not settled."""
        key = (record["pid"], record["start_ticks"], record["comm"])
        known = self._argv.get(key)
        if known is not None:
            return known
        argv = read_argv(proc_dir, ARGV_READ_BYTES)
        settled = uptime - record["start_ticks"] / CLOCK_TICKS >= ARGV_SETTLE_S
        if settled and (argv or record["kernel_thread"]):
            self._argv[key] = argv
        return argv

    def holds(self, record: Record) -> bool:
        """True when `record`'s argv is known and settled: it is not read again while its stat says the same."""
        return (record["pid"], record["start_ticks"], record["comm"]) in self._argv

    def __len__(self) -> int:
        return len(self._argv)

    def keep_only(self, records: Iterable[Record]) -> None:
        """Forget processes not among `records` (they ended), so the cache stays bounded."""
        alive = {(record["pid"], record["start_ticks"], record["comm"]) for record in records}
        for key in [key for key in self._argv if key not in alive]:
            del self._argv[key]


#: Seconds between two samples that read every process's stat, once the run is found (ProcessTable).
FULL_SCAN_EVERY_S = 30.0


class ProcessTable:
    """The visible processes, kept from one sample to the next, so that a sample costs what the run's tree costs.

    Each update lists /proc (one directory read) and reads the stat of the processes it is asked
    for (the run's tree), of those it has not seen before, and of those whose argv is not settled
    (ArgvCache: young, mid-exec); any other process keeps its last reading. A process outside the
    tree that execs, or a PID reused between two updates, shows only in a `full` update, which
    reads every one again: ProcessWatch asks for one while the run is not found and every
    FULL_SCAN_EVERY_S.
    """

    def __init__(self, proc_root: str = "/proc", argv_cache: Optional[ArgvCache] = None) -> None:
        self.proc_root = proc_root
        self.argv_cache = argv_cache if argv_cache is not None else ArgvCache()
        self.records: Dict[int, Record] = {}
        self.read_now: Set[int] = set()
        """The PIDs whose stat the last update read."""
        self.unsettled: Set[int] = set()
        """The PIDs whose argv the cache did not keep when last read: read again every update."""

    def update(self, wanted: AbstractSet[int] = frozenset(), full: bool = False) -> List[Record]:
        """Every visible process as a stat record plus its argv (those that vanish while read are left out)."""
        listed = {int(name) for name in os.listdir(self.proc_root) if name.isdigit()}
        vanished = self.records.keys() - listed
        for pid in vanished:
            del self.records[pid]
        self.unsettled -= vanished
        self.read_now = set()
        since = since_boot()
        for pid in listed if full else (listed - self.records.keys()) | (listed & (wanted | self.unsettled)):
            record = self._read(pid, since)
            if record is None:
                self.records.pop(pid, None)
                self.unsettled.discard(pid)
            else:
                self.records[pid] = record
        if full or vanished:  # an entry left by an exec outside these waits for the next full update
            self.argv_cache.keep_only(self.records.values())
        return list(self.records.values())

    def current(self, record: Record) -> Optional[Record]:
        """`record` as its stat says now (read again unless the last update read it); None when
        the process ended or its PID was reused since."""
        pid = record["pid"]
        if pid in self.read_now:
            return record
        fresh = self._read(pid, since_boot())
        if fresh is None:
            self.records.pop(pid, None)
            return None
        self.records[pid] = fresh
        return fresh if fresh["start_ticks"] == record["start_ticks"] else None

    def _read(self, pid: int, since: float) -> Optional[Record]:
        proc_dir = "%s/%d" % (self.proc_root, pid)
        try:
            record = read_stat(proc_dir + "/stat")
            record["argv"] = self.argv_cache.argv(proc_dir, record, since)
        except (OSError, ValueError, IndexError):
            return None
        self.read_now.add(pid)
        if self.argv_cache.holds(record):
            self.unsettled.discard(pid)
        else:
            self.unsettled.add(pid)
        return record


def scan_processes(proc_root: str = "/proc", argv_cache: Optional[ArgvCache] = None) -> List[Record]:
    """Every visible process as a stat record plus its argv, read now; processes that vanish are skipped.

    With `argv_cache`, a process's cmdline is read only while the cache does not hold it.
    """
    return ProcessTable(proc_root, argv_cache).update(full=True)


def own_pid(proc_root: str = "/proc") -> int:
    """This process's PID as the /proc being read numbers it (it may be an outer namespace's)."""
    try:
        return int(os.readlink(proc_root + "/self"))
    except (OSError, ValueError):
        return os.getpid()


def in_pid_namespace(proc_root: str = "/proc") -> bool:
    """True when this process lives in a PID namespace other than the initial one (a container).

    The initial namespace's inode is a kernel constant (INIT_PID_NAMESPACE_INODE), so
    /proc/self/ns/pid tells directly. Neither /proc/1/sched (namespace-relative on current
    kernels) nor PID 1's name (containers run systemd too) can. Where the link is unreadable,
    an NSpid with more than one entry (a /proc of an outer namespace) is the fallback.
    """
    try:
        link = os.readlink(proc_root + "/self/ns/pid")
        return int(link[link.index("[") + 1 : link.rindex("]")]) != INIT_PID_NAMESPACE_INODE
    except (OSError, ValueError):
        try:
            return len(parse_nspid(read_text(proc_root + "/self/status"))) > 1
        except OSError:
            return False


class CpuMeter:
    """CPU% of processes and threads as the delta of their utime+stime between two samples."""

    def __init__(self) -> None:
        self._previous: Dict[Tuple, Tuple[int, float]] = {}
        self._current: Dict[Tuple, Tuple[int, float]] = {}

    def rate(self, key: Tuple, cpu_ticks: int, now: float) -> Optional[float]:
        """CPU% since the last sample that saw `key`; None the first time (or after a PID reuse,
        as callers put the start time in `key`)."""
        self._current[key] = (cpu_ticks, now)
        before = self._previous.get(key)
        if before is None or now <= before[1]:
            return None
        return round(max(0.0, (cpu_ticks - before[0]) / CLOCK_TICKS / (now - before[1]) * 100.0), 1)

    def next_sample(self) -> None:
        """Forget what the sample just taken did not see, so memory stays bounded."""
        self._previous, self._current = self._current, {}


#: Environment variables that say a process's place in a distributed run (and where its
#: NCCL flight recorder dumps): sent with the process, any other variable never is.
RUN_ENV_KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_FR_DUMP_TEMP_FILE",
)


#: Set (by `srun --export`) in every job step Pulse starts: its agent, py-spy and their shells are never the run.
PULSE_STEP_VARIABLE = "PULSE_STEP"


def slurm_job_of(environ: Optional[List[str]]) -> Optional[str]:
    """The Slurm job a process belongs to (its SLURM_JOB_ID); None outside a job or in a step Pulse started."""
    job = None
    for entry in environ or ():
        name, _, value = entry.partition("=")
        if name == PULSE_STEP_VARIABLE:
            return None
        if name == "SLURM_JOB_ID":
            job = value
    return job


class JobCache:
    """Each process's Slurm job, read once from its environment (which does not change after exec)."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.jobs: Dict[Tuple[int, int], Optional[str]] = {}

    def job(self, record: Record) -> Optional[str]:
        key = (record["pid"], record["start_ticks"])
        if key not in self.jobs:
            self.jobs[key] = slurm_job_of(read_environ("%s/%d" % (self.proc_root, record["pid"])))
        return self.jobs[key]

    def keep_only(self, records: List[Record]) -> None:
        alive = {(record["pid"], record["start_ticks"]) for record in records}
        self.jobs = {key: job for key, job in self.jobs.items() if key in alive}


def read_environ(proc_dir: str) -> Optional[List[str]]:
    """A process's environment entries (NAME=value); None when unreadable (another user's process)."""
    try:
        return read_text(proc_dir + "/environ").split("\0")
    except OSError:
        return None


def run_env(environ: Optional[List[str]]) -> Dict[str, str]:
    """The RUN_ENV_KEYS set in `environ`."""
    found = {}
    for entry in environ or ():
        name, _, value = entry.partition("=")
        if name in RUN_ENV_KEYS:
            found[name] = value[:300]
    return found


def _unbuffered(environ: Optional[List[str]], argv: List[str]) -> Optional[bool]:
    if python_unbuffered_flag(argv):
        return True
    if environ is None:
        return None
    return any(entry.startswith("PYTHONUNBUFFERED=") and len(entry) > 17 for entry in environ)


def _thread_cpu(proc_dir: str, meter: CpuMeter, now: float) -> List[Record]:
    """The process's threads that ran since the last sample (CPU% above 0), each with its name and
    state. Every thread is read, for the next delta; one with no CPU since (or no rate yet: the
    first sample) is no evidence of anything, and a run's idle threads were most of a sample:
    400 thread records cost the console 2 ms of JSON a second, the agent 0.5 ms."""
    threads: List[Record] = []
    try:
        tids = sorted(os.listdir(proc_dir + "/task"), key=int)
    except OSError:
        return threads
    for tid in tids:
        try:
            stat = read_stat("%s/task/%s/stat" % (proc_dir, tid))
        except (OSError, ValueError, IndexError):
            continue
        cpu_pct = meter.rate(("thread", stat["pid"], stat["start_ticks"]), stat["cpu_ticks"], now)
        if cpu_pct:
            threads.append({"tid": stat["pid"], "name": stat["comm"], "cpu_pct": cpu_pct, "state": stat["state"]})
    return threads


def describe_process(
    stat: Record, children: List[int], meter: CpuMeter, now: float, uptime: float, proc_root: str = "/proc"
) -> Optional[Record]:
    """One process's reading for the JSON line, from its stat record (with argv) read this sample;
    None when it vanished while being read."""
    pid = stat["pid"]
    proc_dir = "%s/%d" % (proc_root, pid)
    try:
        status = read_text(proc_dir + "/status")
    except OSError:
        return None
    try:
        stdout: Optional[str] = os.readlink(proc_dir + "/fd/1")
    except OSError:
        stdout = None
    environ = read_environ(proc_dir)
    return {
        "pid": pid,
        "ppid": stat["ppid"],
        "state": stat["state"],
        "elapsed_s": round(max(0.0, uptime - stat["start_ticks"] / CLOCK_TICKS), 2),
        "threads": stat["threads"],
        "rss_mib": round(stat["rss_pages"] * PAGE_BYTES / MIB, 1),
        "cpu_pct": meter.rate(("process", pid, stat["start_ticks"]), stat["cpu_ticks"], now),
        "cpu_s": round(stat["cpu_ticks"] / CLOCK_TICKS, 2),
        "cmdline": shipped_cmdline(stat["argv"]),
        "nspid": list(parse_nspid(status)),
        "stdout": stdout,
        "unbuffered": _unbuffered(environ, stat["argv"]),
        "env": run_env(environ),
        "children": children,
        "thread_cpu": _thread_cpu(proc_dir, meter, now),
    }


def pidfile_run_pid(path: str, running: Container[int]) -> Tuple[Optional[int], Optional[str]]:
    """The run's PID from a pidfile (procfs.read_pidfile: bounded, never through a link), or an
    error saying why there is none; `running` holds the PIDs that run now."""
    status, text, _ = read_pidfile(path)
    if status == "missing":
        return None, "pidfile %s does not exist: is the run started?" % path
    if status == "symlink":
        return None, "pidfile %s is a symbolic link (to %s): point [run] pidfile at the file itself" % (path, text)
    if status == "notregular":
        return None, "pidfile %s is not a regular file: point [run] pidfile at the file the launch writes" % path
    if status == "toolarge":
        return None, "pidfile %s is %s bytes, not a pidfile: point [run] pidfile at the file the launch writes" % (
            path, text)
    if status == "unreadable":
        return None, "pidfile %s cannot be read: %s" % (path, text)
    pid = pidfile_pid(text)
    if pid is None:
        return None, "pidfile %s does not hold a PID (it holds %r)" % (path, text.strip()[:40])
    if pid not in running:
        return None, "pidfile %s names PID %d, which is not running (stale pidfile)" % (path, pid)
    return pid, None


class ProcessWatch:
    """Finds the run's processes each sample and describes them.

    With a Slurm job, the run is the job's processes (SLURM_JOB_ID in their environment), and
    `match`, when given, narrows within them: another job's process never counts, whatever it runs.
    A sample reads the stat of the run's tree and of new processes only (ProcessTable); every
    process's, while the run is not found and every FULL_SCAN_EVERY_S.
    """

    def __init__(self, match: str, pidfile: str, proc_root: str = "/proc", slurm_job: str = "") -> None:
        self.proc_root = proc_root
        self.pidfile = pidfile
        self.slurm_job = slurm_job
        self.job_cache = JobCache(proc_root)
        self.meter = CpuMeter()
        self.argv_cache = ArgvCache()
        self.table = ProcessTable(proc_root, self.argv_cache)
        self.searched: Searched = {}
        self.tree: Set[int] = set()
        """The run's PIDs in the last sample: read every sample."""
        self.full_at = -FULL_SCAN_EVERY_S
        self.regex: Optional[re.Pattern[str]] = None
        self.config_error: Optional[str] = None
        if match and not pidfile:
            try:
                self.regex = re.compile(match)
            except re.error as exc:
                self.config_error = "the match regex %r is invalid: %s" % (match, exc)
        elif not pidfile and not slurm_job:
            self.config_error = "no match regex or pidfile is configured: the run's processes are not watched"

    def read(self) -> Tuple[List[Record], Optional[str]]:
        """(process readings, error text or None)."""
        if self.config_error:
            return [], self.config_error
        now = time.monotonic()
        full = not self.tree or now - self.full_at >= FULL_SCAN_EVERY_S
        if full:
            self.full_at = now
        procs = self.table.update(self.tree, full)
        chosen, error = self._choose(procs)
        children: Dict[int, List[int]] = {}
        for record in procs:
            children.setdefault(record["ppid"], []).append(record["pid"])
        uptime = since_boot()
        readings = []
        for record in chosen:
            fresh = self.table.current(record)
            reading = None if fresh is None else describe_process(
                fresh, sorted(children.get(record["pid"], [])), self.meter, now, uptime, self.proc_root
            )
            if reading is not None:
                readings.append(reading)
        self.meter.next_sample()
        self.tree = {reading["pid"] for reading in readings}
        return readings, error

    def _choose(self, procs: List[Record]) -> Tuple[List[Record], Optional[str]]:
        """(the run's records, None), or ([], why none)."""
        self_pids = ancestry(procs, own_pid(self.proc_root))
        if self.pidfile:
            pid, error = pidfile_run_pid(self.pidfile, self.table.records)
            return ([], error) if pid is None else (run_tree(procs, [pid], self_pids), None)
        if self.slurm_job and self.regex is None:
            members = self._job_members(procs, self_pids)
            return run_tree(members, [r["pid"] for r in members if match_words(r) is not None], self_pids), None
        candidates = self._job_members(procs, self_pids) if self.slurm_job else procs
        try:
            return select_run_processes(candidates, self.regex, self_pids, self.searched), None
        except MatchTimedOut:
            pattern = self.regex.pattern if self.regex is not None else ""  # only a regex runs out of time
            self.config_error = (
                "the match regex %r took more than %g s of CPU on one command line: disabled; fix [run] match"
                % (pattern, MATCH_BUDGET_S)
            )
            return [], self.config_error

    def _job_members(self, procs: List[Record], self_pids: List[int]) -> List[Record]:
        members = [r for r in procs if r["pid"] not in self_pids and self.job_cache.job(r) == self.slurm_job]
        self.job_cache.keep_only(procs)
        return members


# -- GPUs ----------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: A GPU the driver would not name: the keys of a reading, with nothing read.
UNREAD_GPU: Record = {
    "uuid": "", "name": "", "memory_used_mib": None, "memory_total_mib": None, "utilization_pct": None,
    "temperature_c": None, "power_w": None, "power_limit_w": None, "sm_clock_mhz": None, "processes": [],
}  # fmt: skip


class NvmlGpus:
    """GPUs read in-process through NVML: ~0.02 ms a GPU against ~27 ms for an nvidia-smi call."""

    source = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    @classmethod
    def open(cls) -> Tuple[Optional["NvmlGpus"], Optional[str]]:
        """NVML initialised once, or why it is unavailable (no pynvml, no driver library, ...)."""
        try:
            import pynvml
        except ImportError:
            return None, "pynvml is not installed for this Python"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return None, "NVML: %s" % exc
        return cls(pynvml), None

    def _field(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def _process_name(self, pid: int) -> Optional[str]:
        name = self._field(self.nvml.nvmlSystemGetProcessName, pid)
        return os.path.basename(_text(name)) if name else None

    def read_gpu(self, index: int) -> Record:
        """A GPU's reading: every key of UNREAD_GPU, its index and error (None when it was read)."""
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            return dict(UNREAD_GPU, index=index, error=str(exc))
        memory = self._field(nvml.nvmlDeviceGetMemoryInfo, handle)
        utilization = self._field(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._field(nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = self._field(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        processes = []
        for process in self._field(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
            used = getattr(process, "usedGpuMemory", None)
            processes.append(
                {
                    "pid": process.pid,
                    "used_mib": used // MIB if isinstance(used, int) else None,
                    "name": self._process_name(process.pid),
                }
            )
        return {
            "index": index,
            "uuid": _text(self._field(nvml.nvmlDeviceGetUUID, handle) or ""),
            "name": _text(self._field(nvml.nvmlDeviceGetName, handle) or ""),
            "memory_used_mib": memory.used // MIB if memory is not None else None,
            "memory_total_mib": memory.total // MIB if memory is not None else None,
            "utilization_pct": float(utilization.gpu) if utilization is not None else None,
            "temperature_c": self._field(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
            "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
            "sm_clock_mhz": self._field(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            "processes": processes,
            "error": None,
        }

    def start_process_utilization(self) -> None:
        """Nothing to start: NVML keeps the samples, process_utilization asks for the window's."""

    def process_utilization(self, since_s: float) -> Record:
        """Each GPU's per-process SM % over the last `since_s` seconds (NVML process samples, averaged)."""
        nvml = self.nvml
        since_us = int((time.time() - since_s) * 1e6)
        found: Dict[int, List[List[float]]] = {}
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return {"process_sm_error": "NVML: %s" % exc}
        for index in range(count):
            try:
                samples = nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(index), since_us)
            except nvml.NVMLError_NotFound:
                samples = []  # no process ran a kernel since then
            except (nvml.NVMLError, AttributeError) as exc:
                return {"process_sm_error": "NVML process utilization: %s" % exc}
            by_pid: Dict[int, List[float]] = {}
            for sample in samples:
                by_pid.setdefault(int(sample.pid), []).append(float(sample.smUtil))
            found[index] = [[pid, round(sum(values) / len(values), 1)] for pid, values in sorted(by_pid.items())]
        return {"process_sm": found}

    def read(self) -> Record:
        """The `gpus` part of a line (the per-second fields only: no PCIe or process utilization)."""
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except self.nvml.NVMLError as exc:
            return {"gpus": [], "gpu_error": "NVML: %s" % exc}
        return {"gpus": [self.read_gpu(index) for index in range(count)], "gpu_error": None}


def memory_used_mib(gpu_csv: str, gpu_fields: str) -> Optional[List[Optional[float]]]:
    """Each GPU row's memory.used from a `--query-gpu` CSV (noheader, nounits); None when the
    fields do not ask for it, None for a row's value that is not a number ([N/A])."""
    fields = [field.strip() for field in gpu_fields.split(",")]
    if "memory.used" not in fields:
        return None
    column = fields.index("memory.used")
    used: List[Optional[float]] = []
    for row in gpu_csv.splitlines():
        cells = row.split(",")
        try:
            used.append(float(cells[column]))
        except (IndexError, ValueError):
            used.append(None)
    return used


def memory_jumped(before: Optional[List[Optional[float]]], now: Optional[List[Optional[float]]]) -> bool:
    """True when a GPU's memory.used moved by more than APPS_MEMORY_JUMP_MIB (or the GPUs changed)."""
    if before is None or now is None:
        return False
    if len(before) != len(now):
        return True
    return any(a is not None and b is not None and abs(a - b) > APPS_MEMORY_JUMP_MIB for a, b in zip(before, now))


class SmiGpus:
    """GPUs read by running nvidia-smi's CSV queries; the CSV goes back raw for the console to parse.

    The GPU query runs every sample; the compute-apps query every `apps_every_s`, or at once
    when a GPU's memory jumped (see memory_jumped). A loop inside nvidia-smi (`-lms`) would
    save the starts but cannot be read: it prints the header once and block-buffers a pipe, so
    an empty apps list leaves no line to tell one sample's block from the next.
    """

    source = "nvidia-smi"

    def __init__(
        self,
        command: str,
        gpu_fields: str,
        app_fields: str,
        timeout_s: float = SMI_TIMEOUT_S,
        apps_every_s: float = APPS_EVERY_S,
    ) -> None:
        self.command = shlex.split(command)
        self.gpu_fields = gpu_fields
        self.app_fields = app_fields
        self.timeout_s = timeout_s
        self.apps_every_s = apps_every_s
        self._stuck: Optional[subprocess.Popen] = None
        self._pmon: Optional[Tuple[Optional[subprocess.Popen], Optional[str]]] = None
        """A pmon started at the start of a diagnosis's window, or why it could not start."""
        self._apps: Optional[Tuple[str, float, Optional[List[Optional[float]]]]] = None
        """The last compute-apps CSV, when it was asked for, and the GPUs' memory.used then."""

    def run(self, query: str) -> Tuple[Optional[str], Optional[str]]:
        """(stdout, None) or (None, one line saying what went wrong)."""
        return self._run_argv(self.command + [query, "--format=csv,noheader,nounits"])

    def _run_argv(self, argv: List[str]) -> Tuple[Optional[str], Optional[str]]:
        process, error = self._spawn(argv)
        return (None, error) if process is None else self._collect(process)

    def _spawn(self, argv: List[str]) -> Tuple[Optional[subprocess.Popen], Optional[str]]:
        if self._stuck is not None:
            if self._stuck.poll() is None:
                # Killed but not gone: it is stuck in the driver; do not pile up more of them.
                return None, "nvidia-smi (PID %d) is still hung in the driver" % self._stuck.pid
            self._stuck = None
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # so a timeout ends whatever it started too
            )
        except FileNotFoundError:
            return None, "%s not found (no NVIDIA driver tools on this PATH?)" % self.command[0]
        except OSError as exc:
            return None, "%s cannot run: %s" % (self.command[0], exc.strerror or exc)
        return process, None

    def _collect(self, process: subprocess.Popen) -> Tuple[Optional[str], Optional[str]]:
        out, err, ended = read_bounded(process, self.timeout_s, SMI_MAX_BYTES, SMI_STDERR_BYTES)
        if not ended:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self._stuck = process
            if len(out) > SMI_MAX_BYTES:
                return None, "nvidia-smi sent more than %d KiB: not a query's answer (stopped it)" % (SMI_MAX_BYTES >> 10)
            return None, "nvidia-smi did not answer within %g s (stopped it)" % self.timeout_s
        if process.returncode != 0:
            said = (err or out).decode("utf-8", "replace").strip().splitlines()
            return None, "nvidia-smi exited with status %d: %s" % (
                process.returncode,
                said[0] if said else "no message",
            )
        return out.decode("utf-8", "replace"), None

    def start_process_utilization(self) -> Tuple[Optional[subprocess.Popen], Optional[str]]:
        """Start `nvidia-smi pmon -c 1 -s u` now: it samples for about a second, so it runs during
        the diagnosis's window and process_utilization only collects it."""
        self._pmon = self._spawn(self.command + ["pmon", "-c", "1", "-s", "u"])
        return self._pmon

    def process_utilization(self, since_s: float) -> Record:
        """One pmon sample of each process's SM %, raw for the console to parse (started now if not yet)."""
        process, error = self._pmon if self._pmon is not None else self.start_process_utilization()
        self._pmon = None
        out, error = (None, error) if process is None else self._collect(process)
        return {"smi_pmon": out} if error is None else {"process_sm_error": error}

    def read(self) -> Record:
        """The `smi_*_csv` part of a line."""
        gpu_csv, error = self.run("--query-gpu=" + self.gpu_fields)
        if error is not None or gpu_csv is None:
            return {"smi_gpu_csv": None, "smi_apps_csv": None, "gpu_error": error}
        used = memory_used_mib(gpu_csv, self.gpu_fields)
        now = time.monotonic()
        if self._apps is None or now - self._apps[1] >= self.apps_every_s or memory_jumped(self._apps[2], used):
            apps_csv, error = self.run("--query-compute-apps=" + self.app_fields)
            self._apps = None if apps_csv is None else (apps_csv, now, used)
        else:
            apps_csv = self._apps[0]
        return {"smi_gpu_csv": gpu_csv, "smi_apps_csv": apps_csv, "gpu_error": error}


def read_bounded(process: subprocess.Popen, timeout_s: float, max_out: int, max_err: int) -> Tuple[bytes, bytes, bool]:
    """(stdout, the first `max_err` bytes of stderr, ended) of `process`, read for at most
    `timeout_s`; `ended` is False when it ran past it or sent more than `max_out` bytes (then
    stdout is what came, one read past the bound), and it is left for the caller to stop."""
    deadline = time.monotonic() + timeout_s
    stdout, stderr = process.stdout, process.stderr
    if stdout is None or stderr is None:
        raise ValueError("read_bounded reads a process started with stdout=PIPE and stderr=PIPE")
    out, err = bytearray(), bytearray()
    kept = {stdout.fileno(): out, stderr.fileno(): err}
    poller = select.poll()
    for fd in kept:
        poller.register(fd, select.POLLIN)
    try:
        while kept and len(out) <= max_out:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(left * 1000):
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    del kept[fd]
                elif kept[fd] is out or len(err) < max_err:
                    kept[fd] += chunk
        ended = not kept and len(out) <= max_out
        if ended:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        ended = False
    finally:
        stdout.close()
        stderr.close()
    return bytes(out), bytes(err[:max_err]), ended


def open_gpus(source: str, smi: SmiGpus) -> Tuple[Any, Optional[str]]:
    """The GPU reader for `source` ('auto', 'nvml', 'nvidia-smi', 'none') and a note when NVML is missing.

    'auto' takes NVML when it initialises and nvidia-smi otherwise; the note is then kept
    only to explain a failing nvidia-smi. 'nvml' gives None and the reason when it fails.
    """
    if source in ("auto", "nvml"):
        nvml, why = NvmlGpus.open()
        if nvml is not None:
            return nvml, None
        return (smi if source == "auto" else None), why
    if source == "nvidia-smi":
        return smi, None
    return None, None


# -- the log -------------------------------------------------------------------------------


def log_status(spec: str) -> Optional[Record]:
    """stat() of the log; for a glob, of its newest match."""
    if not spec:
        return None
    path = os.path.expanduser(spec)
    if any(char in path for char in "*?["):
        newest = None
        for candidate in glob.glob(path):
            try:
                mtime = os.stat(candidate).st_mtime
            except OSError:
                continue
            if newest is None or mtime > newest[0]:
                newest = (mtime, candidate)
        if newest is None:
            return {"path": path, "exists": False, "size": 0, "mtime": 0.0, "inode": 0, "mode": 0}
        path = newest[1]
    try:
        info = os.stat(path)
    except OSError:
        return {"path": path, "exists": False, "size": 0, "mtime": 0.0, "inode": 0, "mode": 0}
    return {
        "path": path, "exists": True, "size": info.st_size, "mtime": info.st_mtime, "inode": info.st_ino,
        "mode": info.st_mode,
    }


# -- the loop ------------------------------------------------------------------------------


class Agent:
    """Takes samples: one dict per call, ready for json.dumps."""

    def __init__(self, args: argparse.Namespace, proc_root: str = "/proc") -> None:
        self.args = args
        self.proc_root = proc_root
        self.processes = ProcessWatch(args.match, args.pidfile, proc_root, args.slurm_job)
        self.smi = SmiGpus(args.nvidia_smi, args.smi_gpu_fields, args.smi_app_fields, apps_every_s=args.apps_every)
        self.gpus, self.gpu_note = open_gpus(args.gpu_source, self.smi)
        self.namespaced = in_pid_namespace(proc_root)

    def _gpu_part(self) -> Record:
        part: Record = {"gpu_source": "none", "gpu_error": None, "gpus": [], "smi_gpu_csv": None, "smi_apps_csv": None}
        if self.gpus is None:
            if self.args.gpu_source == "nvml":
                self.gpus, self.gpu_note = open_gpus("nvml", self.smi)  # the driver may come back
            if self.gpus is None:
                part["gpu_error"] = self.gpu_note
                return part
        part["gpu_source"] = self.gpus.source
        part.update(self.gpus.read())
        if part["gpu_error"] and self.gpu_note:
            part["gpu_error"] = "%s; %s" % (part["gpu_error"], self.gpu_note)
        return part

    def sample(self, process_use_s: Optional[float] = None) -> Record:
        """One line; with `process_use_s`, also each GPU's per-process SM % over about that many seconds."""
        line: Record = {"t": time.time()}
        try:
            line.update(self._gpu_part())
        except Exception as exc:  # an unexpected driver or tool failure is reported, never fatal
            line.update(gpu_source="none", gpus=[], smi_gpu_csv=None, smi_apps_csv=None)
            line["gpu_error"] = "GPU read failed: %s: %s" % (type(exc).__name__, exc)
        try:
            line["processes"], line["process_error"] = self.processes.read()
        except Exception as exc:
            line["processes"], line["process_error"] = [], "process read failed: %s: %s" % (type(exc).__name__, exc)
        line["in_pid_namespace"] = self.namespaced
        line["log"] = log_status(self.args.log)
        if process_use_s is not None and self.gpus is not None:
            try:
                line.update(self.gpus.process_utilization(process_use_s))
            except Exception as exc:  # as for the other GPU reads: reported, never fatal
                line["process_sm_error"] = "per-process GPU use failed: %s: %s" % (type(exc).__name__, exc)
        return line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description="Stream JSON samples of a training run.", allow_abbrev=False
    )
    need = parser.add_argument_group("required")
    need.add_argument("--interval", type=float, required=True, help="seconds between samples")
    need.add_argument("--count", type=int, required=True, help="samples to take; 0 = until stdin closes")
    need.add_argument("--match", required=True, help="regex over process command lines, or ''")
    need.add_argument("--pidfile", required=True, help="file holding the run's PID, or '' (wins over match)")
    need.add_argument("--log", required=True, help="the run's log path or glob, or ''")
    need.add_argument("--gpu-source", required=True, choices=("auto", "nvml", "nvidia-smi", "none"))
    need.add_argument("--nvidia-smi", required=True, help="the nvidia-smi command")
    need.add_argument("--smi-gpu-fields", required=True, help="fields for nvidia-smi --query-gpu")
    need.add_argument("--smi-app-fields", required=True, help="fields for nvidia-smi --query-compute-apps")
    parser.add_argument(
        "--slurm-job", default="", metavar="ID", help="the run is this Slurm job's processes; match narrows within them"
    )
    parser.add_argument(
        "--process-utilization",
        action="store_true",
        help="the last sample (of a counted run) also reads each GPU's per-process SM %% (for a diagnosis)",
    )
    parser.add_argument(
        "--apps-every", type=float, default=APPS_EVERY_S, metavar="S",
        help="seconds between nvidia-smi compute-apps queries (0: every sample)",
    )
    return parser


def pynvml_version() -> Optional[str]:
    """The version of the nvidia-ml-py this process loaded; None when pynvml was not imported."""
    if "pynvml" not in sys.modules:
        return None
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # pynvml from another distribution, or no metadata: it is loaded, version unknown
        return "unknown"


def hello(program: str, protocol: int) -> Record:
    """The first line an agent sends (console/observe/protocol.py reads it)."""
    python = "%d.%d.%d" % sys.version_info[:3]
    return {"ev": "hello", "program": program, "protocol": protocol, "python": python, "pynvml": pynvml_version()}


def watch_stdin(hung_up: threading.Event) -> None:
    """Set `hung_up` when stdin reaches EOF: the console closed the channel."""

    def wait_for_eof() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        hung_up.set()

    # os.read, not sys.stdin: a daemon thread holding the buffered reader's lock makes
    # interpreter shutdown abort.
    threading.Thread(target=wait_for_eof, name="stdin-watch", daemon=True).start()


def json_line(record: Record, limit: int = LINE_MAX_BYTES) -> str:
    """`record` as one JSON line of at most `limit` bytes: the processes that would pass it are
    left out (the first ones kept: the run's roots come first), and process_error says how many."""
    text = json.dumps(record, separators=(",", ":"))
    processes = record.get("processes")
    if len(text) <= limit or not processes:
        return text
    room = limit - len(json.dumps(dict(record, processes=[], process_error="x" * 200), separators=(",", ":")))
    kept: List[Record] = []
    for process in processes:
        room -= len(json.dumps(process, separators=(",", ":"))) + 1
        if room < 0:
            break
        kept.append(process)
    note = "%d of the run's %d processes sent: all would make a line over %d bytes" % (len(kept), len(processes), limit)
    return json.dumps(dict(record, processes=kept, process_error=note), separators=(",", ":"))


def write_line(record: Record) -> bool:
    """Print `record` as one JSON line (json_line); False when nobody reads any more."""
    try:
        sys.stdout.write(json_line(record) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        # Point stdout at /dev/null so that exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False
    return True


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    hung_up = threading.Event()
    watch_stdin(hung_up)
    agent = Agent(args)  # NVML loads here, so the hello can name its version
    if not write_line(hello(PROGRAM, PROTOCOL)):
        return 0
    taken = 0
    due = time.monotonic()
    while not hung_up.is_set():
        last = bool(args.count) and taken == args.count - 1
        process_use_s = max(args.interval, 1.0) if args.process_utilization and last else None
        if args.process_utilization and taken == 0 and args.count > 1 and agent.gpus is not None:
            agent.gpus.start_process_utilization()  # pmon samples while the window passes
        if not write_line(agent.sample(process_use_s)):
            return 0
        taken += 1
        if args.count and taken >= args.count:
            break
        due = max(due + args.interval, time.monotonic())
        hung_up.wait(due - time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main())
