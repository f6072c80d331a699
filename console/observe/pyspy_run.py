"""Run py-spy on a target and read its dump (non-mutating: py-spy only pauses the process briefly).

The remote shell prints its own PID and then `exec`s py-spy, so py-spy runs under a PID
this side knows. If py-spy does not finish in time (ptrace stuck on a process in state D,
a wedged interpreter) that PID is killed through a separate command: closing an SSH channel
does not stop the remote command (see design.md), so nothing is left behind. Failures
become `DumpError(code, message)` with py-spy's one line of advice (pyspy.classify_error).
"""

from __future__ import annotations

import asyncio
import os

from console.observe.pyspy import ProcessDump, classify_error, parse_dump_json, parse_dump_text
from console.observe.textsafe import sanitize
from console.remote.shell import quote
from console.remote.target import Channel, Target, TargetError

#: Printed by the remote shell before it becomes py-spy: what follows it on the line is its PID.
PID_MARK = "pulse-pyspy-pid"
#: After a timeout, how long to wait for the PID line still (a slow login shell) and for the kill.
KILL_GRACE_S = 3.0


class DumpError(Exception):
    """A py-spy dump that failed: `code` (no_such_process, permission_denied, not_found,
    unsupported_python, timeout, unreadable, unreachable, unknown) and one line saying what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def dump_script(
    py_spy: str, pid: int, *, native: bool = False, locals: bool = False, nonblocking: bool = False, json_output: bool = True
) -> str:
    """The bash line that announces its PID and becomes `py-spy dump --pid PID [options]`."""
    words = [quote(py_spy), "dump", "--pid", str(int(pid))]
    if native:
        words.append("--native")
    if locals:
        words.append("--locals")
    if nonblocking:
        words.append("--nonblocking")
    if json_output:
        words.append("--json")
    return f"echo {PID_MARK} $$; exec " + " ".join(words)


def kill_script(spy_pid: int, py_spy: str) -> str:
    """SIGKILL `spy_pid` only while it still is the py-spy we started (its comm is py-spy's file name)."""
    comm = os.path.basename(py_spy)[:15]  # the kernel keeps 15 characters of a command's name
    return f'[ "$(cat /proc/{int(spy_pid)}/comm 2>/dev/null)" = {quote(comm)} ] && kill -9 {int(spy_pid)}; true'


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
    script = dump_script(py_spy, pid, native=native, locals=locals, nonblocking=nonblocking, json_output=json_output)
    run = _SpyRun(target, script)
    try:
        async with asyncio.timeout(timeout):
            status = await run.collect()
    except asyncio.TimeoutError:
        await run.stop(py_spy)
        advice = classify_error("timed out", 124)[1]
        raise DumpError("timeout", f"py-spy on pid {pid} ran over {timeout:g} s and was killed: {advice}") from None
    except TargetError as exc:
        raise DumpError("unreachable", str(exc)) from None
    finally:
        run.close()
    if status != 0:
        code, advice = classify_error(run.stderr, 137 if status is None else status)
        raise DumpError(code, f"py-spy on pid {pid}: {_clean(advice)}")
    parse = parse_dump_json if json_output else parse_dump_text
    try:
        dumps = parse(run.output)
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
            listed = await target.run(descendants_script(pid), timeout)
        except TargetError as exc:
            raise DumpError("unreachable", str(exc)) from None
        pids += [int(word) for word in listed.stdout.split() if word.isdigit() and int(word) != pid]
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


def descendants_script(pid: int) -> str:
    """Bash that prints every descendant PID of `pid` (from /proc/*/task/*/children), parents first."""
    return (
        f"todo={int(pid)}; while [ -n \"$todo\" ]; do next=; for p in $todo; do "
        "for c in $(cat /proc/$p/task/*/children 2>/dev/null); do echo $c; next=\"$next $c\"; done; "
        "done; todo=$next; done"
    )


class _SpyRun:
    """One remote `py-spy dump`: its channel, the PID it announced, its output."""

    def __init__(self, target: Target, script: str) -> None:
        self.target = target
        self.script = script
        self.channel: Channel | None = None
        self.spy_pid: int | None = None
        self._buffer = bytearray()
        self._pid_seen = asyncio.Event()
        self.output = ""

    @property
    def stderr(self) -> str:
        return getattr(self.channel, "stderr", "") if self.channel is not None else ""

    async def collect(self) -> int | None:
        self.channel = await self.target.open(self.script)
        self.channel.write_eof()
        while chunk := await self.channel.read():
            self._buffer += chunk
            self._find_pid()
        status = await self.channel.wait()
        self.output = self._buffer.decode("utf-8", "replace")
        return status

    def _find_pid(self) -> None:
        if self.spy_pid is not None:
            return
        mark = PID_MARK.encode() + b" "
        start = self._buffer.find(mark)
        end = self._buffer.find(b"\n", start)
        if start < 0 or end < 0:
            return
        word = self._buffer[start + len(mark) : end].strip()
        if word.isdigit():
            self.spy_pid = int(word)
            self._pid_seen.set()
        del self._buffer[: end + 1]  # what a login shell printed before the mark is not py-spy's

    async def stop(self, py_spy: str) -> None:
        """Kill the py-spy this run started, by its PID (waiting briefly for the PID if it has not come)."""
        if self.channel is None:
            return
        if self.spy_pid is None:
            reader = asyncio.ensure_future(self._read_for_pid())
            try:
                async with asyncio.timeout(KILL_GRACE_S):
                    await self._pid_seen.wait()
            except asyncio.TimeoutError:
                pass
            finally:
                reader.cancel()
        if self.spy_pid is not None:
            try:
                await self.target.run(kill_script(self.spy_pid, py_spy), KILL_GRACE_S)
            except TargetError:
                pass  # the link is gone too; closing the channel is all that is left

    async def _read_for_pid(self) -> None:
        assert self.channel is not None
        while self.spy_pid is None and (chunk := await self.channel.read()):
            self._buffer += chunk
            self._find_pid()

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


def _clean(text: str) -> str:
    return sanitize(text, 400)[0]
