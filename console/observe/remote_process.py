"""The one way Pulse runs a process on a target and signals it later: by identity, never by PID alone.

Every start, read and signal goes through the process agent (process_agent.py, sent as
source like the other agents). A started process is a new session, so it and its children
can be ended as a group through a separate command: OpenSSH does not pass a closed
channel's signal on (see docs/design.md, "The agent protocol"). A signal goes only while the PID still has the start
time it had when it was planned or started (`ProcessRef`); a reused PID is reported, not hit.

    start(...)       attached: its output streams back on the channel, `.ref` is known first
    launch(...)      detached: appended to a log, PID to a pidfile; returns its ref
    read_processes   PID → state, group, start time, for the PIDs that exist
    descendants      a process's descendants, parents first
    send_signal      a signal to each ref (or its group) that is still itself
    stop_group       SIGTERM the group a started process leads, SIGKILL what is left
    probe            what the restart's guards must know (its own ancestry, groups, the pidfile, the lock)
    take_lock        an exclusive lock held on the target by an agent there, until released
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from console.observe import process_agent
from console.observe.protocol import ProtocolError, check_hello, field
from console.observe.textsafe import sanitize
from console.remote.program import BANNER_MAX_BYTES, open_program, program_source, reap
from console.remote.target import Channel, LineReader, Target, TargetError, read_all

AGENT_SOURCE = program_source(process_agent)
AGENT_NAME = "pulse-process"
#: How long a read or a signal may take, login shell and interpreter start included.
PROBE_TIMEOUT_S = 15.0
#: Once a group is signalled, how long a stop waits for the agent beyond the grace it was given.
STOP_MARGIN_S = 10.0
#: A start given up before its identity came (a timeout, a cancel): how long to wait for it still,
#: so that what it started is stopped rather than left running.
ABANDON_GRACE_S = 3.0
#: How the agent says that what it was asked to start could not start (then it exits 127).
CANNOT_START = "pulse-process: cannot "
#: The most a read, a signal or a probe may answer: a record per process is ~100 bytes.
REPLY_MAX_BYTES = 16 << 20
#: The longest line a start's agent sends before the started process's output (its hello, its `started`).
START_LINE_MAX_BYTES = 64 << 10


class AgentRefused(TargetError):
    """The process agent ran and said what it could not start (a program, a folder that is not
    there): unlike a lost link or a killed agent, what happened is known."""


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """A process as it was when started or planned: with its start time, a PID names one process only."""

    pid: int
    start_ticks: int
    """Field 22 of /proc/PID/stat (clock ticks after boot)."""


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    state: str
    pgid: int
    start_ticks: int


@dataclass(frozen=True, slots=True)
class SignalTarget:
    """Where one signal goes: `ref`'s process, or with `group` the process group it leads."""

    ref: ProcessRef
    group: bool = False

    @property
    def dest(self) -> str:
        """As `kill` takes it: `-PGID` for a group, `PID` for one process."""
        return f"-{self.ref.pid}" if self.group else str(self.ref.pid)

    def describe(self) -> str:
        """As a person reads it: `process group 2572`, `PID 2572`."""
        return f"process group {self.ref.pid}" if self.group else f"PID {self.ref.pid}"

    def word(self) -> str:
        return f"{self.ref.pid}:{self.ref.start_ticks}" + (":group" if self.group else "")


def _args(command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    # `--opt=VALUE` throughout: a value that starts with '-' is still the option's value, never an option.
    words = [command]
    if cwd:
        words.append(f"--cwd={cwd}")
    for name, value in (env or {}).items():
        words.append(f"--env={name}={value}")
    return words


class StartedProcess:
    """A process started by `start`: its identity, then its output, then its exit status."""

    def __init__(self, channel: Channel, ref: ProcessRef, output_start: bytes) -> None:
        self.channel = channel
        self.ref = ref
        self._output_start = output_start

    @property
    def stderr(self) -> str:
        return getattr(self.channel, "stderr", "")

    async def read(self) -> bytes:
        """The process's output, as it comes; b'' at its end."""
        if self._output_start:
            chunk, self._output_start = self._output_start, b""
            return chunk
        return await self.channel.read()

    async def wait(self) -> int | None:
        return await self.channel.wait()

    async def aclose(self) -> None:
        """Hang up and wait briefly for the agent to be gone (it ends with its process)."""
        self.channel.close()
        await reap(self.channel)


async def start(
    target: Target,
    argv: list[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = False,
) -> StartedProcess:
    """Start `argv` on `target` as a new session; returns once its identity is known.

    TargetError when the agent cannot start (no Python there) or the link fails. A program
    that cannot be run shows as exit status 127 with the reason on stderr.
    """
    args = _args("start", cwd=cwd, env=env) + (["--merge-stderr"] if merge_stderr else []) + ["--", *argv]
    channel = await open_program(target, AGENT_SOURCE, args, name=AGENT_NAME, python=target.python)
    reader = _StartReader(channel, target)
    try:
        channel.write_eof()
        ref, output_start = await reader.started()
    except BaseException:
        await asyncio.shield(_abandon(reader))
        raise
    return StartedProcess(channel, ref, output_start)


async def _abandon(reader: _StartReader) -> None:
    """A start given up before its identity came: wait briefly for it, stop what it started, hang up."""
    try:
        async with asyncio.timeout(ABANDON_GRACE_S):
            ref, _ = await reader.started()
            await stop_group(reader.target, ref, grace_s=0.0)
    except (TargetError, asyncio.TimeoutError):
        pass  # it never started, or the link is gone too: closing the channel is all that is left
    finally:
        reader.channel.close()
        await reap(reader.channel)


class _StartReader:
    """Reads a start's channel up to its `started` line (a lock's up to its answer); a login shell's
    text before the hello is dropped (up to BANNER_MAX_BYTES). It keeps its place, so a read given up
    can be taken up again."""

    def __init__(self, channel: Channel, target: Target) -> None:
        self.channel = channel
        self.target = target
        self.lines = LineReader(channel, f"{target.label}: the process agent", START_LINE_MAX_BYTES)
        self.hello_seen = False

    async def started(self) -> tuple[ProcessRef, bytes]:
        """The started process's ref, and what came after its line."""
        record, rest = await self.next_record("started")
        return _ref(record, self.target), rest

    async def next_record(self, event: str) -> tuple[dict, bytes]:
        """The first record after the hello (an `event` line), and what came after it."""
        while (line := await self.lines.line()) is not None:
            if self.hello_seen:
                return _record(line, self.target, event), self.lines.rest()
            self.hello_seen = _is_hello(line, self.target)
            if not self.hello_seen and self.lines.consumed > BANNER_MAX_BYTES:
                raise TargetError(f"{self.target.label}: the process agent sent no hello in its first {BANNER_MAX_BYTES >> 10} KiB")
        status = await self.channel.wait()
        stderr = getattr(self.channel, "stderr", "").strip()
        said = f": {_safe(stderr.splitlines()[-1])}" if stderr else ""
        hint = "; set [target] python to a Python 3.8+ there" if status == 127 and CANNOT_START not in stderr else ""
        raise TargetError(f"{self.target.label}: the process agent exited with status {status}{said}{hint}")


@dataclass(frozen=True, slots=True)
class Launched:
    ref: ProcessRef
    pidfile_error: str | None


async def launch(
    target: Target,
    argv: list[str],
    *,
    log: str,
    pidfile: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> Launched:
    """Start `argv` detached (own session, no hang-up, output appended to `log`); once it runs, its ref.

    `log` and `pidfile` are as the target's shell sees them where it starts (not under `cwd`),
    `~` is the target's home. TargetError when it
    could not start, with the reason.
    """
    args = _args("launch", cwd=cwd, env=env) + [f"--log={log}"] + ([f"--pidfile={pidfile}"] if pidfile else [])
    (record,) = await _ask(target, [*args, "--", *argv], "launched", timeout, login=True)
    pidfile_error = _field(record, "pidfile_error", target)
    return Launched(_ref(record, target), None if pidfile_error is None else _safe(pidfile_error))


async def read_processes(target: Target, pids: Iterable[int], timeout: float = PROBE_TIMEOUT_S) -> dict[int, ProcessInfo]:
    """PID → its state, group and start time, for those of `pids` that exist now."""
    words = [str(int(pid)) for pid in pids]
    if not words:
        return {}
    found = {}
    for record in await _ask(target, ["info", *words], "process", timeout):
        found[_int(record, "pid", target)] = ProcessInfo(
            _safe(_field(record, "state", target)), _int(record, "pgid", target),
            _int(record, "start_ticks", target),
        )
    return found


async def descendants(target: Target, pid: int, timeout: float = PROBE_TIMEOUT_S) -> list[int]:
    """Every descendant PID of `pid`, parents first (none when it is gone)."""
    return [_int(record, "pid", target) for record in await _ask(target, ["descendants", str(int(pid))], "descendant", timeout)]


async def send_signal(
    target: Target, signal_name: str, targets: Iterable[SignalTarget], timeout: float = PROBE_TIMEOUT_S
) -> dict[int, str]:
    """Signal each target only while it is still itself: PID → sent, gone or reused."""
    words = [t.word() for t in targets]
    if not words:
        return {}
    records = await _ask(target, ["signal", "--signal", signal_name, *words], "signalled", timeout)
    return {_int(record, "pid", target): _safe(_field(record, "said", target)) for record in records}


async def probe(target: Target, pids: Iterable[int], pidfile: str | None, mark: str,
                timeout: float = PROBE_TIMEOUT_S, *, lock: str | None = None) -> list[dict]:
    """The restart guards' facts, as the agent's records (process_agent.py `probe`; guards.parse_probe reads them)."""
    args = ["probe", f"--mark={mark}"] + ([f"--pidfile={pidfile}"] if pidfile else []) + [str(int(pid)) for pid in pids]
    if lock:
        args.append(f"--lock={lock}")
    return await _ask(target, args, ("process", "member", "pidfile", "lock"), timeout)


#: How often a held lock tells its holder on the target that Pulse is still there.
LOCK_BEAT_S = 5.0
#: How long the holder waits for a beat before it takes the link for cut and lets the lock go.
LOCK_IDLE_S = 30.0


class LockBusy(TargetError):
    """Another holder has the lock: `owner` is what it wrote into the lock file (None when unread)."""

    def __init__(self, path: str, owner: dict | None) -> None:
        super().__init__(f"{path} is held")
        self.path = path
        self.owner = owner


class HeldLock:
    """An exclusive lock that a process agent holds on the target while this object lives.

    The holder lets the lock go when its stdin ends (`release`, Pulse gone, the link closed) or
    when no beat came for LOCK_IDLE_S (a link cut without a hang-up); a holder killed outright
    loses its flock to the kernel and leaves its owner behind, which the next taker reports.
    """

    def __init__(self, target: Target, path: str, owner: dict, channel: Channel, previous: dict | None) -> None:
        self.target = target
        self.path = path
        self.owner = owner
        self.previous = previous
        """The owner a holder that is gone left in the file (None when the lock had been released)."""
        self.lost: str | None = None
        """Why the holder is gone while this lock is still in use (None while it holds)."""
        self._attach(channel)

    def _attach(self, channel: Channel) -> None:
        self._channel = channel
        self._tasks = [asyncio.create_task(self._beat()), asyncio.create_task(self._watch())]

    async def _beat(self) -> None:
        while self.lost is None:
            await asyncio.sleep(LOCK_BEAT_S)
            try:
                self._channel.write(b"\n")
            except (TargetError, OSError, RuntimeError) as exc:
                self.lost = self.lost or f"the link to its holder failed ({exc})"
                return

    async def _watch(self) -> None:
        try:
            while await self._channel.read():
                pass
            self.lost = self.lost or "its holder on the target ended"
        except TargetError as exc:
            self.lost = self.lost or f"the link to its holder failed ({exc})"

    async def take_again(self) -> None:
        """After a loss, take the lock anew (over a reconnected link). LockBusy when another owner
        took it meanwhile; TargetError when the target cannot be reached."""
        await self._close()
        channel, _ = await _hold(self.target, self.path, self.owner)
        self.lost = None
        self._attach(channel)

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._channel.write_eof()  # the holder empties the file and exits
        try:
            await reap(self._channel)
        finally:
            self._channel.close()

    async def release(self) -> None:
        """Let the lock go: the holder empties the lock file and exits (a cancel does not stop that)."""
        await asyncio.shield(self._close())


async def take_lock(target: Target, path: str, owner: dict) -> HeldLock:
    """Hold an exclusive lock on `path` on the target (process_agent.py `lock`); `owner` goes into the file.

    LockBusy when another holds it; TargetError when it cannot be taken (an unwritable folder, a
    link in its place) or the agent cannot run.
    """
    channel, previous = await _hold(target, path, owner)
    return HeldLock(target, path, owner, channel, previous)


async def _hold(target: Target, path: str, owner: dict) -> tuple[Channel, dict | None]:
    """A channel to an agent holding the lock, and the owner a gone holder left; see take_lock."""
    args = ["lock", f"--file={path}", f"--owner={json.dumps(owner)}", f"--idle={LOCK_IDLE_S:g}"]
    channel = await open_program(target, AGENT_SOURCE, args, name=AGENT_NAME, python=target.python)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            record, _ = await _StartReader(channel, target).next_record("lock")
    except asyncio.TimeoutError:
        channel.close()
        raise TargetError(f"{target.label}: the process agent did not take the lock in {PROBE_TIMEOUT_S:g} s") from None
    except BaseException:
        channel.close()
        raise
    status = _field(record, "status", target)
    where = _safe(_field(record, "path", target))
    if status == "locked":
        previous = _field(record, "previous", target)
        return channel, previous if isinstance(previous, dict) else None
    channel.close()
    if status == "held":
        held_by = _field(record, "owner", target)
        raise LockBusy(where, held_by if isinstance(held_by, dict) else None)
    raise TargetError(f"{target.label}: {where}: {_safe(record.get('why'))}")


async def stop_group(target: Target, ref: ProcessRef, grace_s: float = 2.0) -> str:
    """SIGTERM the group `ref` leads, SIGKILL what is left after `grace_s`: stopped, killed, gone or reused."""
    word = f"{ref.pid}:{ref.start_ticks}"
    (record,) = await _ask(target, ["stop", "--grace", f"{grace_s:g}", word], "stopped", grace_s + STOP_MARGIN_S)
    return _safe(_field(record, "said", target))


async def _ask(
    target: Target, args: list[str], events: str | tuple[str, ...], timeout: float, *, login: bool = False
) -> list[dict]:
    """Run the agent to its end; its result lines (each one of `events`), checked.

    With `login` (a launch: the run's PATH) in the target's login environment; otherwise (a read,
    a signal, a probe: polled every fraction of a second, and a stalled profile must not stall a
    stop) first without the login profile, and in it only when the Python is not found without it.
    """
    if login:
        return await _ask_once(target, args, events, timeout, login=True)
    try:
        return await _ask_once(target, args, events, timeout, login=False)
    except _NoPython:
        return await _ask_once(target, args, events, timeout, login=True)


class _NoPython(TargetError):
    """The shell found no Python by the configured name."""


async def _ask_once(
    target: Target, args: list[str], events: str | tuple[str, ...], timeout: float, *, login: bool
) -> list[dict]:
    channel: Channel | None = None
    try:
        async with asyncio.timeout(timeout):  # opening the channel too: a link that hangs must not hang the caller
            channel = await open_program(
                target, AGENT_SOURCE, args, name=AGENT_NAME, python=target.python, login=login
            )
            channel.write_eof()
            output = await read_all(channel, REPLY_MAX_BYTES, f"{target.label}: the process agent")
            status = await channel.wait()
    except asyncio.TimeoutError:
        raise TargetError(f"{target.label}: the process agent did not answer in {timeout:g} s") from None
    finally:
        if channel is not None:
            channel.close()
            await reap(channel)
    lines = [line for line in output.split(b"\n") if line.strip()]
    stderr = getattr(channel, "stderr", "").strip()
    if status != 0:
        said = _safe(stderr.splitlines()[-1]) if stderr else "no message"
        if status == 127 and CANNOT_START in stderr:
            raise AgentRefused(f"{target.label}: {said}")
        if status == 127 and "pulse-process" not in stderr:
            raise _NoPython(f"{target.label}: {said} (is there a Python 3.8+? set [target] python)")
        raise TargetError(f"{target.label}: the process agent ended with status {status}: {said}")
    while lines and not _is_hello(lines[0], target):
        del lines[0]  # a login banner
    if not lines:
        raise TargetError(f"{target.label}: the process agent sent no hello")
    return [_record(line, target, events) for line in lines[1:]]


def _is_hello(line: bytes, target: Target) -> bool:
    """True for the agent's hello (checked strictly); False for a login shell's text before it."""
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    try:
        check_hello(obj, process_agent.PROGRAM, process_agent.PROTOCOL)
    except ProtocolError as exc:
        raise TargetError(f"{target.label}: {exc}") from None
    return True


def _record(line: bytes, target: Target, events: str | tuple[str, ...]) -> dict:
    try:
        obj = json.loads(line)
    except ValueError:
        raise TargetError(f"{target.label}: the process agent sent {_safe(line.decode('utf-8', 'replace'))!r}") from None
    wanted = (events,) if isinstance(events, str) else events
    if not isinstance(obj, dict) or obj.get("ev") not in wanted:
        raise TargetError(f"{target.label}: the process agent sent {_safe(str(obj))!r}, not a {' or '.join(wanted)} line")
    return obj


def _ref(record: dict, target: Target) -> ProcessRef:
    return ProcessRef(_int(record, "pid", target), _int(record, "start_ticks", target))


def _field(record: dict, key: str, target: Target) -> object:
    """`record[key]`; a TargetError naming it when the agent left it out."""
    try:
        return field(record, key, f"the process agent's {record.get('ev')} line")
    except ProtocolError as exc:
        raise TargetError(f"{target.label}: {exc}") from None


def _int(record: dict, key: str, target: Target) -> int:
    value = _field(record, key, target)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TargetError(f"{target.label}: the process agent sent {key}={_safe(str(value))!r}, not a number")
    return value


def _safe(value: object) -> str:
    return sanitize(str(value), 200)[0]
