"""Targets: where the run lives. `run` a script, `stream` its output, `open` a raw channel.

A Target hides the transport (this machine, or SSH) and the container layer. Observers,
diagnosis and actions take a Target and never know which one they have.

What a target sends is untrusted and read within bounds: `read_all` takes a command's whole
output up to a size, `LineReader` its lines, each up to a size and within a time. Past a bound
the output is refused with one line (OutputTooLong), never cut or dropped without a word.
"""

from __future__ import annotations

import asyncio
import os
import signal
import weakref
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from console.model import ConnectionState, ConnectionStatus, Container
from console.remote.shell import script_argv


class TargetError(Exception):
    """A failure the operator must read: one line saying what happened and what to do."""


class OutputTooLong(TargetError):
    """A command sent more than its reader takes, in all or in one line: refused, not cut."""


#: The most a command run to its end (`Target.run`) may print: Pulse's commands print kilobytes,
#: the flight recorder's dumps megabytes; past this it is not their answer.
RUN_OUTPUT_BYTES = 64 << 20
#: The longest line `Target.stream` takes.
STREAM_LINE_BYTES = 1 << 20


def split_user(host: str) -> tuple[str | None, str]:
    """`user@host` → (user, host); a bare host or alias → (None, host)."""
    user, sep, name = host.rpartition("@")
    return (user or None, name) if sep else (None, host)


@dataclass(frozen=True, slots=True)
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def size_text(n: int) -> str:
    """A byte count as it is read: 4 MiB, 64 KiB, 100 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


class Readable(Protocol):
    """Output that comes in chunks: a Channel, or a started process's output."""

    async def read(self) -> bytes:
        """The next chunk; b'' at the end."""


async def read_all(source: Readable, limit: int, what: str) -> bytes:
    """Everything `source` sends to its end; OutputTooLong ("`what` sent more than …") past `limit` bytes."""
    out = bytearray()
    while chunk := await source.read():
        if len(out) + len(chunk) > limit:
            raise OutputTooLong(f"{what} sent more than {size_text(limit)}")
        out += chunk
    return bytes(out)


class LineReader:
    """Whole lines of `source`, each at most `max_line` bytes, each waited for at most a given time.

    A line past the bound is refused (OutputTooLong), never cut or dropped; a line that does not
    end in time is a TargetError, however its bytes trickle in. It keeps its place: a wait given
    up (a timeout, a cancel) loses nothing, and `rest()` is what came after the last line.
    """

    def __init__(self, source: Readable, what: str, max_line: int) -> None:
        """`what` names the sender in the errors ("gpu-box: the sampling agent")."""
        self.source = source
        self.what = what
        self.max_line = max_line
        self.consumed = 0
        """Bytes of the lines given so far, their ends included."""
        self._buffer = bytearray()
        self._scanned = 0
        """How much of the buffer is known to hold no line end (a long line is searched once)."""
        self._ended = False

    async def line(self, timeout: float | None = None) -> bytes | None:
        """The next line without its newline; None at the end of output (an unfinished line stays in `rest()`)."""
        try:
            async with asyncio.timeout(timeout):
                return await self._next()
        except TimeoutError:
            if self._buffer:
                raise TargetError(
                    f"{self.what} sent {size_text(len(self._buffer))} without a line end in {timeout:g} s"
                ) from None
            raise TargetError(f"{self.what} sent no line for {timeout:g} s") from None

    def rest(self) -> bytes:
        """What was read after the last line given, taken out of the reader."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._scanned = 0
        return rest

    async def _next(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end > self.max_line or (end < 0 and len(self._buffer) > self.max_line):
                raise OutputTooLong(f"{self.what} sent a line of more than {size_text(self.max_line)}")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                self.consumed += end + 1
                return line
            self._scanned = len(self._buffer)
            if self._ended:
                return None
            chunk = await self.source.read()
            if chunk:
                self._buffer += chunk
            else:
                self._ended = True


class Channel(Protocol):
    """A running command: its stdout as raw bytes and its stdin."""

    async def read(self, n: int = 65536) -> bytes:
        """Up to n bytes of stdout; b'' at end of output."""

    def write(self, data: bytes) -> None: ...

    def write_eof(self) -> None: ...

    async def wait(self) -> int | None:
        """Exit status once the command has ended (None when it was killed by a signal)."""

    def close(self) -> None:
        """Stop reading and hang up; a remote helper sees EOF on stdin and exits."""


StateListener = Callable[[ConnectionState], None]


class Target(ABC):
    """A place to run scripts: this machine, or a host over SSH, optionally inside a container."""

    label: str
    container: Container | None
    python: str
    """The Python that runs Pulse's agents there."""

    def __init__(self, container: Container | None = None, python: str = "python3") -> None:
        self.container = container
        self.python = python
        self.state = ConnectionState(ConnectionStatus.CONNECTING)
        self._listeners: list[StateListener] = []

    def on_state(self, listener: StateListener) -> None:
        self._listeners.append(listener)
        listener(self.state)

    def _set_state(self, state: ConnectionState) -> None:
        self.state = state
        for listener in self._listeners:
            listener(state)

    @abstractmethod
    async def open(self, script: str, *, login: bool = True) -> Channel:
        """Start `script` under bash in the target's environment and return its channel."""

    async def run(
        self,
        script: str,
        timeout: float,
        *,
        stdin: str | bytes | None = None,
        login: bool = True,
        limit: int = RUN_OUTPUT_BYTES,
    ) -> CommandResult:
        """Run a script to its end; TargetError on timeout, OutputTooLong past `limit` bytes of
        output (the command is stopped either way)."""
        channel = await self.open(script, login=login)

        async def collect() -> tuple[bytes, int | None]:
            if stdin is not None:
                channel.write(stdin.encode() if isinstance(stdin, str) else stdin)
            channel.write_eof()
            stdout = await read_all(channel, limit, f"{self.label}: the command")
            return stdout, await channel.wait()

        try:
            async with asyncio.timeout(timeout):
                stdout, status = await collect()
        except asyncio.TimeoutError:
            raise TargetError(f"{self.label}: command timed out after {timeout:g} s") from None
        finally:
            channel.close()
        return CommandResult(status, stdout.decode("utf-8", "replace"), getattr(channel, "stderr", ""))

    async def stream(self, script: str, *, stdin: str | bytes | None = None) -> AsyncIterator[str]:
        """Lines of a long-running script's output (decoded, newline stripped) until it ends;
        OutputTooLong for a line over STREAM_LINE_BYTES."""
        channel = await self.open(script)
        lines = LineReader(channel, f"{self.label}: the command", STREAM_LINE_BYTES)
        try:
            if stdin is not None:
                channel.write(stdin.encode() if isinstance(stdin, str) else stdin)
                channel.write_eof()
            while (line := await lines.line()) is not None:
                yield line.decode("utf-8", "replace")
            if rest := lines.rest():
                yield rest.decode("utf-8", "replace")
        finally:
            channel.close()

    async def close(self) -> None:
        """Release the transport; open channels end."""


_KILL_AFTER_S = 2.0
#: How long LocalTarget.close() waits for what it killed to be reaped.
CLOSE_REAP_S = 5.0


class _LocalChannel:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._stderr = bytearray()
        assert process.stdout is not None and process.stderr is not None
        self._stderr_task = asyncio.ensure_future(_drain(process.stderr, self._stderr))
        self._discarding: asyncio.Task | None = None

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    async def read(self, n: int = 65536) -> bytes:
        assert self._process.stdout is not None
        return await self._process.stdout.read(n)

    def write(self, data: bytes) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(data)

    def write_eof(self) -> None:
        assert self._process.stdin is not None
        if not self._process.stdin.is_closing():
            self._process.stdin.close()

    async def wait(self) -> int | None:
        status = await self._process.wait()
        await self._stderr_task
        return status if status >= 0 else None

    def close(self) -> None:
        end_process_group(self._process)
        if self._process.stdin is not None and not self._process.stdin.is_closing():
            self._process.stdin.close()
        # wait() ends only once every pipe has: what nobody reads any more is read and dropped (a
        # reader left paused on a full buffer would never see the end of a command that flooded it).
        if self._discarding is None:
            assert self._process.stdout is not None
            self._discarding = asyncio.ensure_future(_drain(self._process.stdout, None))


async def _drain(stream: asyncio.StreamReader, kept: bytearray | None) -> None:
    """Read `stream` to its end, keeping its first MiB in `kept` (None: nothing)."""
    while chunk := await stream.read(65536):
        if kept is not None and len(kept) < 1 << 20:
            kept.extend(chunk)


def end_process_group(process: asyncio.subprocess.Process, grace_s: float = _KILL_AFTER_S) -> None:
    """SIGTERM the group `process` leads, SIGKILL it after `grace_s` if it is still there.

    SIGTERM first: a login shell killed outright mid `pyenv rehash` leaves a lock that
    stalls every later login shell of that user for 60 s.
    """

    def signal_group(sig: int) -> None:
        if process.returncode is None:
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass

    signal_group(signal.SIGTERM)
    if process.returncode is None:
        asyncio.get_running_loop().call_later(grace_s, signal_group, signal.SIGKILL)


class LocalTarget(Target):
    """This machine (or a container on it): commands run as child processes."""

    def __init__(self, container: Container | None = None, python: str = "python3") -> None:
        super().__init__(container, python)
        self.label = "local" if container is None else f"local/{container.describe()}"
        self._set_state(ConnectionState(ConnectionStatus.CONNECTED))
        self._processes: weakref.WeakSet[asyncio.subprocess.Process] = weakref.WeakSet()

    async def close(self) -> None:
        """End what this target started and still runs (a program that ignored its end of input and
        SIGTERM, one whose reaping timed out), each by its process group, and reap it: none outlives
        the event loop that owns its pipes."""
        left = [process for process in self._processes if process.returncode is None]
        for process in left:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            await asyncio.wait([asyncio.ensure_future(process.wait()) for process in left], timeout=CLOSE_REAP_S)

    async def open(self, script: str, *, login: bool = True) -> Channel:
        # This machine's environment is the console's own: a login shell would only add the
        # profile's start-up cost. Inside a container the run's environment is its login one.
        argv = script_argv(script, self.container, login=login and self.container is not None)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # so close() can end the whole process group
            )
        except FileNotFoundError as exc:
            raise TargetError(f"local: {argv[0]} not found; install it or fix the container setting") from exc
        self._processes.add(process)
        return _LocalChannel(process)
