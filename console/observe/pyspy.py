"""Parse `py-spy dump` (text, --native, --locals, --json) and say where each thread waits.

Also maps py-spy's failures (no such process, ptrace denied, not installed, ...) to a
code and one line of advice, since the operator reads those mid-incident.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from console.observe.textsafe import sanitize, strip_escape_sequences


@dataclass(frozen=True, slots=True)
class LocalVariable:
    """One argument or local of a frame, as py-spy --locals shows it."""

    name: str
    repr: str
    argument: bool = False


@dataclass(frozen=True, slots=True)
class StackFrame:
    """One frame of a thread's stack, innermost first in ThreadStack.frames."""

    function: str
    file: str
    """Full path when py-spy gave one (--json); otherwise its short name, e.g. `threading.py`."""
    line: int | None
    native: bool = False
    """A C/C++ frame (--native): a library instead of a Python source line."""
    locals: tuple[LocalVariable, ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread of a dumped process."""

    pid: int
    thread_id: int
    """The OS thread id (as in /proc/PID/task) when py-spy knows it, else its Python thread id."""
    name: str | None
    active: bool
    """False when py-spy reports the thread idle (not on a CPU)."""
    owns_gil: bool
    frames: tuple[StackFrame, ...]

    @property
    def status(self) -> str:
        """py-spy's own word: idle, active or active+gil."""
        if not self.active:
            return "idle"
        return "active+gil" if self.owns_gil else "active"


@dataclass(frozen=True, slots=True)
class ProcessDump:
    """The threads of one process at the moment of the dump."""

    pid: int
    command: str
    python_version: str | None
    threads: tuple[ThreadStack, ...]
    executable: str | None = None
    parent_pid: int | None = None


# -- text ------------------------------------------------------------------------

_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_PYTHON = re.compile(r"^Python v(\S+) \((.*)\)$")
_PARENT = re.compile(r"^Parent Process (\d+): .*$")
_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(([a-z+]+)\)(?:: "(.*)")?$')
_LOCAL = re.compile(r"^ {12}(.*?): (.*)$")
_FRAME_LINE = re.compile(r"^(.*):(\d+)$")


def parse_dump_text(text: str) -> list[ProcessDump]:
    """Every process in a text dump (several with --subprocesses). Raises ValueError on other text."""
    if "\x1b" in text:
        text = strip_escape_sequences(text)
    dumps: list[ProcessDump] = []
    header: dict | None = None
    threads: list[ThreadStack] = []
    frames: list[StackFrame] = []
    thread: dict | None = None
    argument = False

    def close_thread() -> None:
        nonlocal thread
        if thread is not None:
            threads.append(ThreadStack(frames=tuple(frames), **thread))
            frames.clear()
            thread = None

    def close_process() -> None:
        nonlocal header
        close_thread()
        if header is not None:
            dumps.append(ProcessDump(threads=tuple(threads), **header))
            threads.clear()
            header = None

    for line in text.splitlines():
        if match := _PROCESS.match(line):
            close_process()
            header = {"pid": int(match[1]), "command": match[2], "python_version": None}
        elif header is None:
            continue  # py-spy's progress chatter or a separator before the first process
        elif match := _PYTHON.match(line):
            header.update(python_version=match[1], executable=match[2])
        elif match := _PARENT.match(line):
            header["parent_pid"] = int(match[1])
        elif match := _THREAD.match(line):
            close_thread()
            status = match[2]
            thread = {
                "pid": header["pid"],
                "thread_id": int(match[1], 16) if match[1].startswith("0x") else int(match[1]),
                "name": match[3],
                "active": status != "idle",
                "owns_gil": "gil" in status,
            }
        elif thread is None:
            continue
        elif line.startswith("        ") and line.strip() in ("Arguments:", "Locals:"):
            argument = line.strip() == "Arguments:"
        elif (match := _LOCAL.match(line)) and frames:
            last = frames[-1]
            variable = LocalVariable(match[1], match[2], argument)
            frames[-1] = StackFrame(last.function, last.file, last.line, last.native, (*last.locals, variable))
        elif line.startswith("    ") and not line.startswith("     "):
            frames.append(_text_frame(line[4:]))
    close_process()
    if not dumps:
        first = next((line for line in text.splitlines() if line.strip()), "")
        raise ValueError(f"not py-spy dump output: {first[:200]!r}")
    return dumps


def _text_frame(text: str) -> StackFrame:
    """`Queue.get (queue.py:171)`, `PyThread_acquire_lock_timed (python3.12)` or `0x7f5b... (libc.so.6)`."""
    function, _, where = text.rpartition(" (")
    where = where.removesuffix(")")
    if not function:
        return StackFrame(text, "", None, native=True)
    match = _FRAME_LINE.match(where)
    if match and match[2] != "0":
        return StackFrame(function, match[1], int(match[2]))
    return StackFrame(function, where, None, native=True)


# -- json ------------------------------------------------------------------------


def parse_dump_json(text: str) -> list[ProcessDump]:
    """The processes in `py-spy dump --json` output (a list of threads, grouped here by pid)."""
    try:
        traces = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not py-spy --json output: {exc}") from None
    if not isinstance(traces, list):
        raise ValueError("not py-spy --json output: expected a list of threads")
    by_pid: dict[int, list[ThreadStack]] = {}
    commands: dict[int, str] = {}
    try:
        for trace in traces:
            pid = int(trace["pid"])
            info = trace.get("process_info") or {}
            if info.get("command_line"):
                commands[pid] = info["command_line"]
            by_pid.setdefault(pid, []).append(
                ThreadStack(
                    pid=pid,
                    thread_id=int(trace.get("os_thread_id") or trace["thread_id"]),
                    name=trace.get("thread_name"),
                    active=bool(trace.get("active")),
                    owns_gil=bool(trace.get("owns_gil")),
                    frames=tuple(_json_frame(frame) for frame in trace.get("frames") or ()),
                )
            )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"py-spy --json output has an unexpected shape: {type(exc).__name__}: {exc}") from None
    return [ProcessDump(pid, commands.get(pid, ""), None, tuple(threads)) for pid, threads in by_pid.items()]


def _json_frame(frame: dict) -> StackFrame:
    line = frame.get("line") or None
    variables = tuple(
        LocalVariable(str(local.get("name")), str(local.get("repr") or "?"), bool(local.get("arg")))
        for local in frame.get("locals") or ()
    )
    return StackFrame(
        function=str(frame.get("name")),
        file=str(frame.get("filename") or frame.get("short_filename") or ""),
        line=line,
        native=line is None or frame.get("module") is not None,
        locals=variables,
    )


# -- reading stacks ----------------------------------------------------------------------

_STDLIB = frozenset(sys.stdlib_module_names)
_LIBRARY_PATH = re.compile(r"[/\\](?:site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d+(?:\.\d+)?t?[/\\]")


def is_user_frame(frame: StackFrame) -> bool:
    """True for the run's own code; False for native, installed-package, stdlib and frozen frames.

    From a text dump's short names an installed package (`torch/nn/module.py`) cannot
    be told from the run's own package; the --json dump's full paths can.
    """
    file = frame.file
    if frame.native or not file or file.startswith("<frozen"):
        return False
    if file.startswith("/") or file[1:3] == ":\\":
        return not _LIBRARY_PATH.search(file)
    top = re.split(r"[/\\]", file, maxsplit=1)[0].removesuffix(".py")
    return top not in _STDLIB


#: What classify_wait answers, most telling first.
WAITS = ("queue get", "NCCL collective", "rendezvous", "CUDA synchronize", "lock/condition wait", "I/O", "sleep")

_QUEUE = re.compile(r"(?:^|\.)(?:Simple|Joinable|Lifo|Priority)?Queue\.get(?:_nowait)?$|^get$")
_COLLECTIVE = re.compile(
    r"all_?reduce|all_?gather|reduce_scatter|all_?to_?all|broadcast|barrier|nccl|ProcessGroupNCCL|WorkNCCL", re.I
)
#: torch.distributed's collectives (and their wrappers' usual names): a frame of one of these
#: names is a rank in a collective wherever it is defined (DeepSpeed, Megatron and the run's
#: own helpers wrap them under the same names).
COLLECTIVE_NAMES = frozenset(
    """all_reduce allreduce all_reduce_coalesced all_gather allgather all_gather_into_tensor all_gather_object
    _all_gather_base reduce_scatter reduce_scatter_tensor _reduce_scatter_base all_to_all all_to_all_single
    alltoall broadcast broadcast_object_list barrier monitored_barrier wait_tensor""".split()
)
#: A distributed Work's wait: `Work.wait`, `c10d::ProcessGroupNCCL::WorkNCCL::wait(...)`.
_WORK_WAIT = re.compile(r"Work(?:NCCL)?(?:\.|::)(?:wait|synchronize)\b")
_SYNCHRONIZE = re.compile(r"synchronize|cuStreamQuery|cudaStreamQuery", re.I)
_LOCK = re.compile(
    r"(?:Condition|Event|Barrier|Semaphore|BoundedSemaphore)\.wait|(?:R?Lock|Semaphore|Condition)\.acquire"
    r"|Thread\.join|_wait_for_tstate_lock|PyThread_acquire_lock|pthread_cond_(?:timed)?wait|pthread_mutex_lock"
    r"|pthread_join|sem_(?:timed)?wait|futex|lll_lock_wait|acquire_lock"
)
_IO_NAMES = frozenset(
    "read readinto readline readlines recv recv_into recvfrom recvmsg _recv _recv_bytes recv_bytes accept"
    " accept4 connect select poll ppoll pselect epoll_wait kevent send sendall sendmsg write getaddrinfo"
    " wait_for_data _read_ready readexactly".split()
)
_SLEEP = re.compile(r"(?:^|\.)sleep$|nanosleep|^time_sleep$|^usleep$")
#: torch.distributed waiting for its peers before any collective: the store, the rendezvous, the init barrier.
_RENDEZVOUS = re.compile(
    r"rendezvous|_create_c10d_store|TCPStore|_store_based_barrier|init_process_group|wait_for_workers", re.I
)


def classify_wait(thread: ThreadStack) -> str:
    """Where a thread waits: one of WAITS, or 'running' / 'unknown' when no frame says.

    The whole stack is read and the most telling wait wins, so `Queue.get` beats the
    `Condition.wait` it sits in. A plain dump cannot see C calls: a thread in
    `time.sleep` shows only its Python line, so it reads 'unknown' without --native.
    """
    found: set[str] = set()
    for frame in thread.frames:
        found.update(_frame_waits(frame))
    for wait in WAITS:
        if wait in found:
            return wait
    return "running" if thread.active else "unknown"


def _frame_waits(frame: StackFrame) -> Iterable[str]:
    name = frame.function
    file = frame.file
    if _QUEUE.search(name) and (name != "get" or file.endswith(("queue.py", "queues.py"))):
        yield "queue get"
    if (_COLLECTIVE.search(name) and ("distributed" in file or "c10d" in name or "nccl" in f"{name} {file}".lower())) or (
        _short_name(name) in COLLECTIVE_NAMES or _WORK_WAIT.search(name)
    ):
        yield "NCCL collective"
    if _RENDEZVOUS.search(name) and ("distributed" in file or "c10d" in name):
        yield "rendezvous"
    if _SYNCHRONIZE.search(name) or (frame.native and file.startswith("libcuda")):
        yield "CUDA synchronize"
    if _LOCK.search(name):
        yield "lock/condition wait"
    if _short_name(name) in _IO_NAMES:
        yield "I/O"
    if _SLEEP.search(name):
        yield "sleep"


def collective_call(thread: ThreadStack) -> str | None:
    """The collective a thread is in (`all_reduce`, `barrier`, ...), else 'synchronize' when it waits on the device."""
    found = None
    for frame in thread.frames:
        short = _short_name(frame.function.split("(", 1)[0].rsplit("::", 1)[-1])
        if short in COLLECTIVE_NAMES:
            found = short  # frames are innermost first: the outermost collective names the call
        elif found is None and (_SYNCHRONIZE.search(frame.function) or _WORK_WAIT.search(frame.function)):
            found = "synchronize"
    return found


def main_thread(process: ProcessDump) -> ThreadStack | None:
    """The process's own thread: MainThread when py-spy names it, else the first one listed."""
    for thread in process.threads:
        if thread.name == "MainThread":
            return thread
    return process.threads[0] if process.threads else None


def stack_signature(thread: ThreadStack) -> tuple:
    """What makes two stacks the same stack: every frame's function, file and line."""
    return tuple((frame.function, frame.file, frame.line) for frame in thread.frames)


def where(thread: ThreadStack) -> str:
    """The run's innermost own frame and the call it is in, e.g. 'Queue.get (queue.py:171) ← pack_hidden (hung.py:9)'."""
    frames = thread.frames
    if not frames:
        return "no Python frames"
    index = next((i for i, frame in enumerate(frames) if is_user_frame(frame)), None)
    if index is None or index == 0:
        return frame_text(frames[0])
    # A main thread waiting on its DataLoader workers is said so, however deep the trainer's frames go.
    call = next((f for f in frames[:index] if _DATALOADER_WAIT.search(f.function)), frames[index - 1])
    return f"{frame_text(call)} ← {frame_text(frames[index])}"


_DATALOADER_WAIT = re.compile(r"DataLoaderIter\._get_data$")


def frame_text(frame: StackFrame, *, full_path: bool = False) -> str:
    """`read_batch (train.py:13)`; with `full_path`, the file as py-spy prints it: `read_batch (/work/train.py:13)`."""
    file = frame.file if full_path else frame.file.rsplit("/", 1)[-1]
    place = f"{file}:{frame.line}" if frame.line is not None else frame.file
    return f"{frame.function} ({place})"


def _short_name(function: str) -> str:
    """`socket.recv` → `recv`; native `__libc_recv`, `__GI___poll` → `recv`, `poll`."""
    last = function.rsplit(".", 1)[-1]
    return re.sub(r"^(?:__GI_)?_*(?:libc_)?", "", last) or last


def group_identical(threads: Sequence[ThreadStack]) -> list[tuple[int, ThreadStack]]:
    """Threads with the same stack counted once: (count, first such thread), most common first."""
    groups: dict[tuple, list] = {}
    for thread in threads:
        key = stack_signature(thread)
        if key in groups:
            groups[key][0] += 1
        else:
            groups[key] = [1, thread]
    return sorted(((count, thread) for count, thread in groups.values()), key=lambda group: -group[0])


@dataclass(frozen=True, slots=True)
class DumpLine:
    """One line of a grouped dump, with what it shows so a screen can style it."""

    text: str
    kind: str
    """'process', 'thread', 'user' (a frame of the run's own code), 'library' (any other frame), 'local', 'gap'."""


def dump_lines(dump: ProcessDump) -> list[DumpLine]:
    """The one rendering of a process's dump, for `pulse dump` and the console's dump screen alike:
    identical stacks once with a count, the run's own frames marked `>`, text sanitized (it is the target's)."""
    version = f" (Python {dump.python_version})" if dump.python_version else ""
    command = f": {_clean(dump.command)}" if dump.command else ""
    lines = [DumpLine(f"Process {dump.pid}{command}{version}", "process")]
    for count, thread in group_identical(dump.threads):
        lines.append(DumpLine("", "gap"))
        lines.append(DumpLine("  " + _thread_heading(count, thread, dump.threads), "thread"))
        for frame in thread.frames:
            user = is_user_frame(frame)
            label = _clean(frame_text(frame, full_path=True))
            lines.append(DumpLine(f"      {'>' if user else ' '} {label}", "user" if user else "library"))
            lines += [DumpLine(f"            {_clean(v.name)} = {_clean(v.repr)}", "local") for v in frame.locals]
    return lines


def _clean(text: str) -> str:
    return sanitize(text)[0]


def _thread_heading(count: int, thread: ThreadStack, threads: Sequence[ThreadStack]) -> str:
    """'Thread 8 "Helper-1": idle, lock/condition wait  [x3 identical stacks; also Helper-2, Helper-3]'."""
    name = f' "{_clean(thread.name)}"' if thread.name else ""
    gil = ", holds the GIL" if thread.owns_gil else ""
    state = "active" if thread.active else "idle"
    heading = f"Thread {thread.thread_id}{name}: {state}{gil}, {classify_wait(thread)}"
    if count > 1:
        signature = stack_signature(thread)
        others = [t for t in threads if t is not thread and stack_signature(t) == signature]
        names = ", ".join(_clean(t.name) if t.name else str(t.thread_id) for t in others)
        heading += f"  [x{count} identical stacks; also {names}]"
    return heading


# -- failures ------------------------------------------------------------------------

_ADVICE = {
    "no_such_process": (
        "the process is gone, or py-spy runs in another PID namespace: use the PID as seen where py-spy runs"
    ),
    "permission_denied": (
        "ptrace was denied: run py-spy as root, or allow it (sysctl kernel.yama.ptrace_scope=0); "
        "in docker add --cap-add SYS_PTRACE; "
        "LXC/AppArmor may deny it anyway, then run py-spy on the host with the host PID"
    ),
    "not_found": "py-spy is not installed on the target: `pip install py-spy` there, or set target.py_spy to its path",
    "unsupported_python": (
        "py-spy cannot read this interpreter: upgrade it (`pip install -U py-spy`), "
        "and make sure the PID is the Python process, not a launcher or shell"
    ),
    "timeout": "py-spy did not finish in time: the process may be stuck in the kernel (state D); retry with --nonblocking",
}
_ERROR_RULES = (
    ("permission_denied", re.compile(r"Permission Denied|Operation not permitted|os error 1\)|os error 13\)|EPERM", re.I)),
    (
        "no_such_process",
        re.compile(r"Check that the process is running|check if it is running|No such process|os error 3\)", re.I),
    ),
    (
        "unsupported_python",
        re.compile(
            r"Unsupported version of Python|Failed to find python version|Failed to get python version"
            r"|Failed to find a python interpreter|Failed to find (?:the )?interpreter",
            re.I,
        ),
    ),
    ("not_found", re.compile(r"command not found|py-spy: not found|No such file or directory.*py-spy|py-spy.*No such file or directory")),
    ("timeout", re.compile(r"timed out|timeout", re.I)),
)


def classify_error(stderr: str, exit_status: int, program: str = "py-spy") -> tuple[str, str]:
    """A failed py-spy run (`program`: the py-spy it ran) as (code, one line of advice).

    Codes: no_such_process, permission_denied, not_found, unsupported_python, timeout, unknown.
    A path that is not there is named (it was given, so no install is missing).
    """
    code = "not_found" if exit_status == 127 else next((c for c, rule in _ERROR_RULES if rule.search(stderr)), None)
    if code == "not_found" and "/" in program:
        return code, f"{program} was not found on the target: give the path py-spy is installed at (--py-spy, target.py_spy)"
    if code is not None:
        return code, _ADVICE[code]
    if exit_status in (124, 137) and "Error" not in stderr:
        return "timeout", _ADVICE["timeout"]
    return "unknown", f"py-spy failed (exit {exit_status}): {_first_error_line(stderr)}"


def _first_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Error:"):
            return line[:200]
    return lines[0][:200] if lines else "no message"


# -- py-spy record: what moved ----------------------------------------------------------

#: A recording's length (py-spy takes whole seconds) and rate: 50 samples of every thread, without pausing it.
RECORD_S, RECORD_HZ = 1, 50


@dataclass(frozen=True, slots=True)
class ThreadSamples:
    """One thread as `py-spy record --format raw --threads --idle` saw it over a recording."""

    tid: int
    """The OS thread id, as in /proc/PID/task."""
    name: str
    stacks: tuple[tuple[tuple[StackFrame, ...], int], ...]
    """Each distinct stack (innermost frame first) and how many samples caught it, most first."""

    @property
    def samples(self) -> int:
        return sum(count for _, count in self.stacks)


#: `thread (1104): MainThread;<module> (train.py:40);step (train.py:12) 7`: outermost frame first, then the count.
_RECORD_LINE = re.compile(r"^thread \((\d+)\)(?:: ([^;]*))?((?:;[^;]*)*) (\d+)$")


def parse_record_raw(text: str) -> list[ThreadSamples]:
    """The threads of `py-spy record --format raw --threads` output (py-spy's own `py-spy>` lines skipped)."""
    found: dict[int, tuple[str, dict[tuple[StackFrame, ...], int]]] = {}
    for line in text.splitlines():
        match = _RECORD_LINE.match(line.strip())
        if match is None:
            continue
        tid, name, frames, count = int(match[1]), match[2] or "", match[3], int(match[4])
        stack = tuple(_text_frame(frame) for frame in reversed(frames.split(";")[1:]))
        stacks = found.setdefault(tid, (name, {}))[1]
        stacks[stack] = stacks.get(stack, 0) + count
    return [
        ThreadSamples(tid, name, tuple(sorted(stacks.items(), key=lambda item: -item[1])))
        for tid, (name, stacks) in found.items()
    ]


def merged(first: list[ThreadSamples], second: list[ThreadSamples]) -> list[ThreadSamples]:
    """Two recordings of one process as one: each thread's stacks, their samples added up."""
    found: dict[int, tuple[str, dict[tuple[StackFrame, ...], int]]] = {}
    for samples in (*first, *second):
        stacks = found.setdefault(samples.tid, (samples.name, {}))[1]
        for stack, count in samples.stacks:
            stacks[stack] = stacks.get(stack, 0) + count
    return [
        ThreadSamples(tid, name, tuple(sorted(stacks.items(), key=lambda item: -item[1])))
        for tid, (name, stacks) in found.items()
    ]


def on_the_cpu_in_one_place(samples: ThreadSamples | None, thread: ThreadStack) -> bool:
    """The recording saw `thread` on the CPU in one stack that is no wait: a long call, or a loop whose
    other frames are too short to be caught yet (a longer recording tells)."""
    if samples is None or not thread.active:
        return False
    working = {stack for stack, _ in samples.stacks if classify_wait(_as_thread(thread, stack)) in ("running", "unknown")}
    return len(working) == 1 and len(samples.stacks) == 1


#: How a thread moved over a recording (see thread_motion).
MOTIONS = ("moving", "paced", "busy", "waiting", "still")


def thread_motion(samples: ThreadSamples | None, thread: ThreadStack, woke: int | None, cpu_busy: bool) -> str | None:
    """How `thread` moved while it was recorded; None when it was not recorded.

    - moving: two stacks or more that are not waits (the loop turns through its code);
    - paced: one stack in the run's own code, not a wait, idle, and the thread woke meanwhile
      (it sleeps in its own loop: `time.sleep(0.5)` between steps reads so);
    - busy: one stack that is not a wait, on the CPU (one long call: the recording cannot tell
      whether it progresses);
    - waiting: every sample in a wait (a queue, a collective, the store, a synchronize, a lock, I/O),
      idle or spinning;
    - still: one stack that is not a wait, idle, and the thread never woke (blocked in a call no frame names).
    """
    if samples is None or not samples.samples:
        return None
    working = [stack for stack, _ in samples.stacks if classify_wait(_as_thread(thread, stack)) in ("running", "unknown")]
    if len(working) >= 2:
        return "moving"
    if not working:
        return "waiting"
    stack = working[0]
    if cpu_busy and thread.active:
        return "busy"
    # The dump's frames carry full paths (a recording's may be short: `torch/x.py` reads as the run's own).
    innermost = thread.frames[0] if thread.frames else stack[0] if stack else None
    if woke and innermost is not None and is_user_frame(innermost):
        return "paced"
    return "busy" if cpu_busy else "still"


def _as_thread(thread: ThreadStack, frames: tuple[StackFrame, ...]) -> ThreadStack:
    return ThreadStack(thread.pid, thread.thread_id, thread.name, False, False, frames)
