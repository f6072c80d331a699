"""Targets: where the run lives. `run` a script, `stream` its output, `open` a raw channel.

A Target hides the transport (this machine, or SSH) and the container layer. Observers,
diagnosis and actions take a Target and never know which one they have.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import signal
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from console.model import ConnectionState, ConnectionStatus, Container
from console.remote.shell import script_argv


class TargetError(Exception):
    """A failure the operator must read: one line saying what happened and what to do."""


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
        self, script: str, timeout: float, *, stdin: str | bytes | None = None, login: bool = True
    ) -> CommandResult:
        """Run a script to its end; TargetError on timeout (the command is stopped)."""
        channel = await self.open(script, login=login)
        stdout = bytearray()

        async def collect() -> int | None:
            if stdin is not None:
                channel.write(stdin.encode() if isinstance(stdin, str) else stdin)
            channel.write_eof()
            while chunk := await channel.read():
                stdout.extend(chunk)
            return await channel.wait()

        try:
            async with asyncio.timeout(timeout):
                status = await collect()
        except asyncio.TimeoutError:
            raise TargetError(f"{self.label}: command timed out after {timeout:g} s") from None
        finally:
            channel.close()
        return CommandResult(status, stdout.decode("utf-8", "replace"), getattr(channel, "stderr", ""))

    async def stream(self, script: str, *, stdin: str | bytes | None = None) -> AsyncIterator[str]:
        """Lines of a long-running script's output (decoded, newline stripped) until it ends."""
        channel = await self.open(script)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        try:
            if stdin is not None:
                channel.write(stdin.encode() if isinstance(stdin, str) else stdin)
                channel.write_eof()
            while chunk := await channel.read():
                pending += decoder.decode(chunk)
                *lines, pending = pending.split("\n")
                for line in lines:
                    yield line
            pending += decoder.decode(b"", final=True)
            if pending:
                yield pending
        finally:
            channel.close()

    async def close(self) -> None:
        """Release the transport; open channels end."""


_KILL_AFTER_S = 2.0


class _LocalChannel:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._stderr = bytearray()
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._process.stderr is not None
        while chunk := await self._process.stderr.read(65536):
            if len(self._stderr) < 1 << 20:
                self._stderr.extend(chunk)

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
        return _LocalChannel(process)
