"""Run py-spy on a target: read its dump (py-spy pauses the process briefly) or its recording of a
second of stacks (`record`, never pausing it). Non-mutating.

py-spy is started through the process agent (remote_process.start), so its PID and start
time are known before it runs. If it does not finish in time (ptrace stuck on a process in
state D, a wedged interpreter) that process, and only while it is still that process, is
killed through a separate command: closing an SSH channel does not stop the remote command
(see docs/design.md, "The agent protocol"), so nothing is left behind. Failures become `DumpError(code, message)` with
py-spy's one line of advice (pyspy.classify_error).
"""

from __future__ import annotations

import asyncio
from typing import Any

from console.observe.pyspy import (
    RECORD_HZ,
    RECORD_S,
    ProcessDump,
    ThreadSamples,
    classify_error,
    parse_dump_json,
    parse_dump_text,
    parse_record_raw,
)
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
    text = await _spy(target, argv, pid, timeout)
    parse = parse_dump_json if json_output else parse_dump_text
    try:
        dumps = parse(text)
    except ValueError as exc:
        raise DumpError("unreadable", f"py-spy on pid {pid} printed something unexpected: {_clean(str(exc))}") from None
    for found in dumps:
        if found.pid == pid:
            return found
    if json_output and not dumps:
        raise DumpError("unreadable", f"py-spy on pid {pid} returned no threads")
    return dumps[0]


def record_argv(py_spy: str, pid: int, seconds: int = RECORD_S, rate: int = RECORD_HZ) -> list[str]:
    """`py-spy record` of `pid` for `seconds`, every thread's stack at `rate` Hz, idle ones too, as raw text on stdout."""
    return [py_spy, "record", "--pid", str(int(pid)), "--duration", str(int(seconds)), "--rate", str(int(rate)),
            "--format", "raw", "--threads", "--idle", "--nonblocking", "--full-filenames", "-o", "/dev/stdout"]


async def record(
    target: Target, pid: int, *, py_spy: str = "py-spy", seconds: int = RECORD_S, rate: int = RECORD_HZ, timeout: float = 10.0
) -> list[ThreadSamples]:
    """Every thread of `pid` sampled for `seconds` (py-spy record, never pausing it): which stacks each was seen in."""
    return parse_record_raw(await _spy(target, record_argv(py_spy, pid, seconds, rate), pid, seconds + timeout))


async def _spy(target: Target, argv: list[str], pid: int, timeout: float) -> str:
    """What py-spy `argv` printed about `pid`; DumpError with its advice when it failed or ran over `timeout`."""
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
    if status != 0:
        code, advice = classify_error(spy.stderr, 137 if status is None else status, argv[0])
        raise DumpError(code, f"py-spy on pid {pid}: {_clean(advice)}")
    return output.decode("utf-8", "replace")


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
    options: dict[str, Any] = dict(py_spy=py_spy, native=native, locals=locals, nonblocking=nonblocking, timeout=timeout, json_output=json_output)
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
