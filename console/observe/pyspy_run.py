"""Run py-spy on a target and read its dump (non-mutating: py-spy only pauses the process briefly).

py-spy is started through the process agent (remote_process.start), so its PID and start
time are known before it runs. If it does not finish in time (ptrace stuck on a process in
state D, a wedged interpreter) that process, and only while it is still that process, is
killed through a separate command: closing an SSH channel does not stop the remote command
(see design.md), so nothing is left behind. Failures become `DumpError(code, message)` with
py-spy's one line of advice (pyspy.classify_error).
"""

from __future__ import annotations

import asyncio

from console.observe.pyspy import ProcessDump, classify_error, parse_dump_json, parse_dump_text
from console.observe.remote_process import SignalTarget, StartedProcess, descendants, send_signal, start
from console.observe.textsafe import sanitize
from console.remote.target import OutputTooLong, Target, TargetError, read_all

#: After a timeout, how long the kill of the py-spy still may take.
KILL_GRACE_S = 3.0
#: The most a dump may print: a thread's stack is kilobytes, with --locals tens of them.
DUMP_MAX_BYTES = 16 << 20


class DumpError(Exception):
    """A py-spy dump that failed: `code` (no_such_process, permission_denied, not_found,
    unsupported_python, timeout, unreadable, unreachable, unknown) and one line saying what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def dump_argv(
    py_spy: str, pid: int, *, native: bool = False, locals: bool = False, nonblocking: bool = False, json_output: bool = True
) -> list[str]:
    """`py-spy dump --pid PID [options]`."""
    words = [py_spy, "dump", "--pid", str(int(pid))]
    if native:
        words.append("--native")
    if locals:
        words.append("--locals")
    if nonblocking:
        words.append("--nonblocking")
    if json_output:
        words.append("--json")
    return words


async def dump(
    target: Target,
    pid: int,
    *,
    py_spy: str = "py-spy",
    native: bool = False,
    locals: bool = False,
    nonblocking: bool = False,
    timeout: float = 10.0,
    json_output: bool = True,
) -> ProcessDump:
    """The threads of process `pid` on `target` (PID as seen there, inside its container)."""
    argv = dump_argv(py_spy, pid, native=native, locals=locals, nonblocking=nonblocking, json_output=json_output)
    spy: StartedProcess | None = None
    status: int | None = None
    ended = False
    try:
        async with asyncio.timeout(timeout):
            spy = await start(target, argv)
            output = await read_all(spy, DUMP_MAX_BYTES, f"py-spy on pid {pid}")
            status = await spy.wait()
            ended = True
    except asyncio.TimeoutError:
        advice = classify_error("timed out", 124)[1]
        raise DumpError("timeout", f"py-spy on pid {pid} ran over {timeout:g} s and was killed: {advice}") from None
    except OutputTooLong as exc:
        raise DumpError("unreadable", f"{exc}: not a dump (stopped it)") from None
    except TargetError as exc:
        raise DumpError("unreachable", str(exc)) from None
    finally:
        if spy is not None:
            if not ended:  # timed out or cancelled: a py-spy left attached would keep the run paused
                await asyncio.shield(_kill(target, spy))
            await spy.aclose()
    stderr = spy.stderr
    if status != 0:
        code, advice = classify_error(stderr, 137 if status is None else status)
        raise DumpError(code, f"py-spy on pid {pid}: {_clean(advice)}")
    parse = parse_dump_json if json_output else parse_dump_text
    try:
        dumps = parse(output.decode("utf-8", "replace"))
    except ValueError as exc:
        raise DumpError("unreadable", f"py-spy on pid {pid} printed something unexpected: {_clean(str(exc))}") from None
    for found in dumps:
        if found.pid == pid:
            return found
    if json_output and not dumps:
        raise DumpError("unreadable", f"py-spy on pid {pid} returned no threads")
    return dumps[0]


async def dump_tree(
    target: Target,
    pid: int,
    children: bool = True,
    *,
    py_spy: str = "py-spy",
    native: bool = False,
    locals: bool = False,
    nonblocking: bool = False,
    timeout: float = 10.0,
    json_output: bool = True,
) -> list[ProcessDump]:
    """`pid`'s dump, then (with `children`) each descendant's, e.g. DataLoader workers.

    `py-spy --subprocesses --json` reports the parent only, so descendants are listed from
    /proc and dumped in parallel. A descendant that ended meanwhile or is not Python (a
    shell, a compiler) is left out; the main process's failure raises DumpError.
    """
    options = dict(py_spy=py_spy, native=native, locals=locals, nonblocking=nonblocking, timeout=timeout, json_output=json_output)
    pids = [pid]
    if children:
        try:
            pids += [found for found in await descendants(target, pid, timeout) if found != pid]
        except TargetError as exc:
            raise DumpError("unreachable", str(exc)) from None
    results = await asyncio.gather(*(dump(target, p, **options) for p in pids), return_exceptions=True)
    out: list[ProcessDump] = []
    for found, result in zip(pids, results):
        if isinstance(result, ProcessDump):
            out.append(result)
        elif found == pid or not isinstance(result, DumpError):
            raise result
        elif result.code not in ("no_such_process", "unsupported_python"):
            raise result
    return out


async def _kill(target: Target, spy: StartedProcess) -> None:
    """SIGKILL the py-spy this dump started, while it is still that process."""
    try:
        async with asyncio.timeout(KILL_GRACE_S):
            await send_signal(target, "KILL", [SignalTarget(spy.ref)], timeout=KILL_GRACE_S)
    except (TargetError, asyncio.TimeoutError):
        pass  # the link is gone too; closing the channel is all that is left


def _clean(text: str) -> str:
    return sanitize(text, 400)[0]
