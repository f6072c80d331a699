"""SshTarget: scripts run on a host over SSH, one asyncssh connection per host, a channel per command.

Every SshTarget in the process that names the same host (same user, port, ssh_config and
known_hosts) shares one connection; each `open()` is a new exec channel on it. The connection
sends keepalives, reconnects with exponential backoff after it is lost, and checks the host key
against known_hosts (an unknown key is refused unless the operator asked to accept new keys; a
changed key is always refused). Channel opens queue behind a semaphore so that more parallel
commands than the server's MaxSessions wait for a free session instead of failing.

OpenSSH ignores channel signals without privilege separation, so closing a channel does not stop
the remote command: `close()` sends EOF on its stdin, and remote helpers exit on stdin EOF.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import asyncssh
from asyncssh.encryption import get_default_encryption_algs

from console.backoff import Backoff
from console.config import KNOWN_HOSTS_FILE, SSH_CONFIG_FILE, ConfigError, TargetConfig, read_regular_file
from console.model import ConnectionState, ConnectionStatus
from console.remote.shell import command_line, script_argv
from console.remote.target import Channel, Target, TargetError, split_user

DEFAULT_MAX_CHANNELS = 8
"""Channels open at once on one connection; OpenSSH's MaxSessions defaults to 10."""
KEEPALIVE_INTERVAL_S = 5.0
KEEPALIVE_COUNT_MAX = 3
CONNECT_TIMEOUT_S = 10.0
HANDSHAKES_AT_ONCE = 32
"""SSH handshakes in flight at once on one event loop (the console's), as pdsh's default fanout. A fleet connects to
every node at once; unbounded, a thousand key exchanges queue on this machine's CPU, each one's
CONNECT_TIMEOUT_S runs out in the queue, every node reads as unreachable, and their reconnects
storm again. Bounded, each connect's timeout counts its own handshake, not the others'."""
OPEN_TIMEOUT_S = 30.0
"""How long `open()` waits for a connection (also while reconnecting) and for the channel."""
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 15.0
REFUSED_RETRY_MAX_S = 2.0
"""The longest wait between attempts while the host answers but refuses the port (sshd restarting):
a refusal costs the host nothing, and the console must be back within this long of sshd."""
STDERR_LIMIT = 1 << 20
#: asyncssh's own default ssh_config, read when none is named.
DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
CLOSE_TIMEOUT_S = 5.0
"""How long closing waits for the server to acknowledge before the connection is dropped."""


class _Permanent(TargetError):
    """A failure that retrying will not fix (authentication, host key, bad config)."""


class _Refused(TargetError):
    """The host is up but nothing listens on the port yet: cheap to retry, and soon."""


class _HostKeys:
    """known_hosts policy: trust listed keys, refuse changed ones, add unknown ones only when asked."""

    def __init__(self, files: list[Path], accept_new: bool) -> None:
        self.files = files
        self.accept_new = accept_new
        self.known: list[asyncssh.SSHKey] = []
        self.refusal: str | None = None
        """Why the last key was refused, for the operator."""

    def check(self) -> None:
        """ConfigError (one line) unless each file is missing or a regular file within its cap."""
        for path in self.files:
            read_regular_file(path, KNOWN_HOSTS_FILE, read=False, missing_ok=True)

    def match(self, host: str, addr: str, port: int | None):
        """asyncssh's known_hosts callback: the keys listed for this host (missing files are empty)."""
        texts = (read_regular_file(path, KNOWN_HOSTS_FILE, missing_ok=True) for path in self.files)
        text = "".join(data.decode("utf-8", "replace") for data in texts if data)
        result = asyncssh.import_known_hosts(text).match(host, addr, port)
        self.known = list(result[0])
        return result

    def validate(self, host: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called for a key that known_hosts does not list for this host."""
        name = host if port == 22 else f"[{host}]:{port}"
        listed = ", ".join(str(path) for path in self.files)
        if self.known:
            self.refusal = (
                f"the host key of {name} has CHANGED ({key.get_fingerprint()}); refusing to connect: "
                f"if the host was really reinstalled, remove its old line from {listed} and verify the new key"
            )
            return False
        if not self.accept_new:
            self.refusal = (
                f"host key of {name} ({key.get_fingerprint()}) is not in {listed}; verify it and add it "
                f"(ssh-keyscan -p {port} {host} >> {self.files[0]}) or pass --accept-new-host-key"
            )
            return False
        target = self.files[0]
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        algorithm, blob, *_ = key.export_public_key("openssh").decode().split()
        with target.open("a") as out:
            out.write(f"{name} {algorithm} {blob}\n")
        return True


class _Client(asyncssh.SSHClient):
    """asyncssh callbacks of one connection, forwarded to its owner."""

    def __init__(self, owner: _Connection, host_keys: _HostKeys) -> None:
        self._owner = owner
        self._host_keys = host_keys
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.lost(self._conn, exc)

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self._host_keys.validate(host, port, key)


class _ChannelSlots:
    """Channel opens queue here; a server that refuses sessions sooner teaches us its real limit."""

    REFUSED_RETRY_S = 0.2
    """After a refusal, retry at the latest this long after (the server frees a session a moment
    after the channel that held it has closed on our side)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0
        """Slots taken: open channels and opens in flight."""
        self.open = 0
        self.peak = 0
        """The most channels the server has let us hold at once."""
        self._released = asyncio.Event()

    async def acquire(self) -> None:
        while self.in_use >= self.limit:
            await self._released.wait()
        self.in_use += 1

    def opened(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)

    def closed(self) -> None:
        """An opened channel has closed on both sides: its server session is free."""
        self.open -= 1
        self.release()

    def release(self) -> None:
        self.in_use -= 1
        self._released.set()
        self._released = asyncio.Event()

    async def refused(self) -> bool:
        """The server refused the caller's channel: give its slot back and, when other channels are
        open (the server is only full), lower the limit to what it has allowed, wait for a channel to
        end and return True so the caller retries. False: a refusal with nothing open is real."""
        released = self._released
        self.release()
        if self.in_use == 0:
            return False
        # Opens still in flight may be refused too, so count them now and let `peak` (channels the
        # server did hold at once) keep a late-freed session from lowering the limit below its real value.
        self.limit = max(1, min(self.limit, max(self.peak, self.in_use)))
        try:
            async with asyncio.timeout(self.REFUSED_RETRY_S):
                await released.wait()
        except asyncio.TimeoutError:
            pass
        return True


class _Connection:
    """The one asyncssh connection to a host, shared by every SshTarget naming it on this event loop."""

    def __init__(self, cfg: TargetConfig, max_channels: int, keepalive_interval: float) -> None:
        self.cfg = cfg
        self.keepalive_interval = keepalive_interval
        self.user, self.host = split_user(cfg.host or "")
        self.label = cfg.host or ""
        self._config_paths = [Path(cfg.ssh_config).expanduser()] if cfg.ssh_config else ()
        """ssh_config files; () is asyncssh's default, ~/.ssh/config."""
        self.conn: asyncssh.SSHClientConnection | None = None
        self.slots = _ChannelSlots(max_channels)
        self.state = ConnectionState(ConnectionStatus.CONNECTING)
        self.targets: weakref.WeakSet[SshTarget] = weakref.WeakSet()
        self._changed = asyncio.Event()
        self._connect_lock = asyncio.Lock()
        self._reconnect_task: asyncio.Task | None = None
        self._closed = False

    def _set_state(self, status: ConnectionStatus, detail: str = "", retry_at: float | None = None) -> None:
        self.state = ConnectionState(status, detail, retry_at)
        self._changed.set()
        self._changed = asyncio.Event()
        for target in list(self.targets):
            target._set_state(self.state)

    async def _options(self) -> tuple[asyncssh.SSHClientConnectionOptions, _HostKeys]:
        """Connection options from the ssh_config (read afresh, so fixes apply on the next attempt).

        Each file asyncssh will read is checked first as the TOML config is (read_regular_file):
        asyncssh would read a FIFO or /dev/zero forever, in a thread that Ctrl+C cannot stop.
        """
        config = self._config_paths
        try:
            # asyncssh reads the default only when it is readable, a named one always.
            default = [path for path in [DEFAULT_SSH_CONFIG.expanduser()] if os.access(path, os.R_OK)]
            for path in config or default:
                read_regular_file(path, SSH_CONFIG_FILE, read=False, missing_ok=not config)
        except ConfigError as exc:
            raise _Permanent(f"{self.label}: {exc}; fix the file") from None
        try:
            resolved = await asyncssh.SSHClientConnectionOptions.construct(
                None, config=config, host=self.host, port=self.cfg.port or (), username=self.user or ()
            )
        except (ValueError, OSError, asyncssh.Error) as exc:
            where = self.cfg.ssh_config or "~/.ssh/config"
            raise _Permanent(f"{self.label}: cannot use {where}: {exc}; fix the file") from None
        if self.cfg.known_hosts:
            files = [Path(self.cfg.known_hosts).expanduser()]
        elif resolved.known_hosts:
            files = [Path(str(name)).expanduser() for name in resolved.known_hosts]
        else:
            files = [Path("~/.ssh/known_hosts").expanduser()]
        host_keys = _HostKeys(files, self.cfg.accept_new_host_key)
        try:
            host_keys.check()
        except ConfigError as exc:
            raise _Permanent(f"{self.label}: {exc}; fix the file") from None
        try:
            options = await asyncssh.SSHClientConnectionOptions.construct(
                resolved,
                config=config,
                host=self.host,
                port=self.cfg.port or (),
                username=self.user or (),
                known_hosts=host_keys.match,
                client_factory=lambda: _Client(self, host_keys),
                keepalive_interval=self.keepalive_interval,
                keepalive_count_max=KEEPALIVE_COUNT_MAX,
                connect_timeout=CONNECT_TIMEOUT_S,
                encryption_algs=_ciphers(resolved.encryption_algs),
            )
        except (ValueError, OSError, asyncssh.Error) as exc:
            raise _Permanent(f"{self.label}: cannot set up SSH: {exc}") from None
        return options, host_keys

    async def _connect_once(self) -> None:
        try:
            options, host_keys = await self._options()
            address = f"{options.host}:{options.port}"
            where = address if options.host == self.label else f"{self.label} ({address})"
            try:
                async with _handshake_slot(self):
                    # The config again, for the ProxyJump hops: asyncssh reads it afresh for each.
                    conn = await asyncssh.connect(self.host, options=options, config=self._config_paths)
            except Exception as exc:  # every failure becomes one line for the operator
                by_hand = f"ssh {self.label}" + (f" -p {self.cfg.port}" if self.cfg.port else "")
                raise _describe(exc, where, options, host_keys, by_hand) from None
        except _Permanent as exc:
            self._set_state(ConnectionStatus.FAILED, str(exc))
            raise
        if self._closed:
            conn.close()
            raise TargetError(f"{self.label}: target closed")
        self.conn = conn
        self.slots = _ChannelSlots(self.slots.limit)
        self._set_state(ConnectionStatus.CONNECTED)

    async def connection(self, timeout: float) -> asyncssh.SSHClientConnection:
        """The live connection: connect now, or wait for the reconnect in progress (up to `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise TargetError(f"{self.label}: target closed")
            if self.conn is not None:
                return self.conn
            if self._reconnect_task is not None and not self._reconnect_task.done():
                changed = self._changed
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TargetError(
                        f"{self.label}: still reconnecting after {timeout:g} s ({self.state.detail}); "
                        "check the host and the network, Pulse keeps retrying"
                    )
                try:
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                except asyncio.TimeoutError:
                    pass
                continue
            async with self._connect_lock:
                if self.conn is None and not self._closed:
                    try:
                        await self._connect_once()
                    except _Permanent:
                        raise
                    except TargetError as exc:
                        self._set_state(ConnectionStatus.FAILED, str(exc))
                        raise

    def lost(self, conn: asyncssh.SSHClientConnection | None, exc: Exception | None) -> None:
        """asyncssh reports a connection ended; unless we closed it, reconnect."""
        if conn is None or conn is not self.conn:
            return
        self.conn = None
        if self._closed:
            return
        detail = _reason(exc) if exc else "closed by the server"
        reason = "connection lost" if detail.lower() == "connection lost" else f"connection lost: {detail}"
        self._reconnect_task = asyncio.ensure_future(self._reconnect(reason))

    async def _reconnect(self, reason: str) -> None:
        refused = False
        backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S)
        while True:
            delay = backoff.next()
            if refused:
                delay = min(delay, REFUSED_RETRY_MAX_S)
            self._set_state(ConnectionStatus.RECONNECTING, reason, time.monotonic() + delay)
            await asyncio.sleep(delay)
            if self._closed:
                return
            try:
                async with self._connect_lock:
                    if self.conn is None:
                        await self._connect_once()
                return
            except _Permanent:
                return
            except TargetError as exc:
                reason = str(exc)
                refused = isinstance(exc, _Refused)

    async def open_channel(self, command: str, timeout: float) -> _SshChannel:
        """A new exec channel running `command`, once a slot and the connection are there."""
        deadline = time.monotonic() + timeout
        while True:
            conn = await self.connection(max(0.1, deadline - time.monotonic()))
            slots = self.slots
            try:
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    await slots.acquire()
            except asyncio.TimeoutError:
                raise TargetError(
                    f"{self.label}: all {slots.limit} channels stayed busy for {timeout:g} s; "
                    "close some streams or raise the channel limit"
                ) from None
            try:
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    process = await conn.create_process(command, encoding=None)
            except asyncio.CancelledError:
                slots.release()  # a caller that gave up must not keep the slot
                raise
            except asyncio.TimeoutError:
                slots.release()
                raise TargetError(
                    f"{self.label}: the server did not open a channel within {timeout:g} s; is it overloaded or hung?"
                ) from None
            except asyncssh.ChannelOpenError as exc:
                if self.conn is not conn or slots is not self.slots:
                    slots.release()  # the connection went away meanwhile: try again on the next one
                    continue
                if await slots.refused():  # the server's MaxSessions is lower than our limit
                    continue
                raise TargetError(f"{self.label}: the server refused a channel ({exc.reason}); check its sshd_config") from None
            except (asyncssh.Error, OSError) as exc:
                slots.release()
                if self.conn is not conn:
                    continue
                raise TargetError(f"{self.label}: could not start a command ({_reason(exc)})") from None
            slots.opened()
            return _SshChannel(process, self.label, slots, lambda: self.conn is not conn)

    async def close(self) -> None:
        self._closed = True
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
            await asyncio.gather(self._reconnect_task, return_exceptions=True)
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
            try:
                # A graceful close waits on the peer; a peer that stopped reading must not hang a quit.
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await conn.wait_closed()
            except asyncio.TimeoutError:
                conn.abort()


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())


def _ciphers(chosen: Sequence[bytes]) -> list[str]:
    """AES-GCM first unless the ssh_config chose the ciphers (then its list, as it is).

    asyncssh prefers ChaCha20-Poly1305, which it runs as several cryptography calls per
    packet; AES-GCM is one call with the CPU's AES instructions. A console with hundreds of
    connections spends a fifth of its time on packet decryption with ChaCha20 (profile in
    README, "Performance").
    """
    names = [name.decode("ascii") for name in chosen]
    if list(chosen) != list(get_default_encryption_algs()):
        return names
    gcm = sorted((name for name in names if name.endswith("-gcm@openssh.com")), key=lambda name: "aes128" not in name)
    return gcm + [name for name in names if name not in gcm]


def _describe(
    exc: BaseException, where: str, options: asyncssh.SSHClientConnectionOptions, host_keys: _HostKeys,
    by_hand: str,
) -> TargetError:
    """One line saying what went wrong connecting to `where` and what to do about it (`by_hand`: the
    ssh command that reaches the target as it was given, user and port included)."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        refusal = host_keys.refusal or _reason(exc)
        return _Permanent(f"{where}: {refusal}")
    if isinstance(exc, asyncssh.PermissionDenied):
        return _Permanent(
            f"{where}: authentication refused for user {options.username}; check the key "
            "(IdentityFile in the ssh config, or ssh-agent) and the server's authorized_keys"
        )
    if isinstance(exc, asyncssh.KeyExchangeFailed):
        return _Permanent(f"{where}: key exchange failed ({_reason(exc)}); check known_hosts and the server's host keys")
    if isinstance(exc, socket.gaierror):
        return TargetError(f"{where}: host name not found ({exc.strerror}); check the host name or its ssh config alias")
    if isinstance(exc, ConnectionRefusedError):
        return _Refused(f"{where}: connection refused; check that sshd runs there and the port is right")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return TargetError(f"{where}: no answer within {CONNECT_TIMEOUT_S:g} s; check that the host is up and reachable")
    if isinstance(exc, OSError):
        return TargetError(f"{where}: {exc.strerror or exc}; check the network path to the host")
    if isinstance(exc, asyncssh.Error):
        return TargetError(f"{where}: SSH failed ({_reason(exc)}); try `{by_hand}` by hand to see more")
    return TargetError(f"{where}: cannot connect ({type(exc).__name__}: {_reason(exc)})")


class _SshChannel:
    """One exec channel: stdout as bytes, stdin, stderr collected in the background."""

    def __init__(
        self, process: asyncssh.SSHClientProcess, label: str, slots: _ChannelSlots, lost: Callable[[], bool]
    ) -> None:
        self._process = process
        self._label = label
        self._lost = lost
        """True once the connection this channel ran on is gone."""
        self._stderr = bytearray()
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._closed_by_us = False
        # The server's session slot is free only once the channel is closed on both sides.
        asyncio.ensure_future(process.wait_closed()).add_done_callback(lambda _: slots.closed())

    async def _drain_stderr(self) -> None:
        try:
            while chunk := await self._process.stderr.read(65536):
                if len(self._stderr) < STDERR_LIMIT:
                    self._stderr.extend(chunk)
        except (asyncssh.Error, OSError):
            pass  # the connection went away; read() and wait() say so

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    async def read(self, n: int = 65536) -> bytes:
        try:
            data = await self._process.stdout.read(n)
        except (asyncssh.Error, OSError) as exc:
            raise TargetError(f"{self._label}: connection lost while reading ({_reason(exc)})") from None
        if not data and not self._closed_by_us and self._lost():
            raise TargetError(f"{self._label}: connection lost before the command ended")
        return data

    def write(self, data: bytes) -> None:
        try:
            self._process.stdin.write(data)
        except (asyncssh.Error, OSError) as exc:
            raise TargetError(f"{self._label}: cannot write to the command ({_reason(exc)})") from None

    def write_eof(self) -> None:
        try:
            if not self._process.stdin.is_closing():
                self._process.stdin.write_eof()
        except (asyncssh.Error, OSError):
            pass  # already closed: the command has its EOF

    async def wait(self) -> int | None:
        await self._process.wait_closed()
        await self._stderr_task
        if self._process.exit_status is not None:
            return self._process.exit_status
        if self._process.exit_signal is not None or self._closed_by_us:
            return None
        raise TargetError(f"{self._label}: connection lost before the command ended")

    def close(self) -> None:
        if self._closed_by_us:
            return
        self._closed_by_us = True
        self.write_eof()
        self._process.close()


_connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, _Connection]] = (
    weakref.WeakKeyDictionary()
)
_handshakes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def _handshake_slot(connection: _Connection) -> AsyncIterator[None]:
    """One of this event loop's HANDSHAKES_AT_ONCE. While none is free the connection says in its
    detail that it waits for one, and keeps its status: a host that was lost still reads as
    reconnecting (a fleet calls it unreachable), with why it was lost."""
    loop = asyncio.get_running_loop()
    slots = _handshakes.get(loop)
    if slots is None:
        slots = _handshakes[loop] = asyncio.Semaphore(HANDSHAKES_AT_ONCE)
    before = connection.state if slots.locked() else None
    if before is not None:
        waiting = f"waiting for one of {HANDSHAKES_AT_ONCE} SSH handshakes in flight"
        connection._set_state(before.status, f"{before.detail}; {waiting}" if before.detail else waiting, before.retry_at)
    async with slots:
        if before is not None:
            connection._set_state(before.status, before.detail, before.retry_at)
        yield


class SshTarget(Target):
    """A host over SSH, optionally a container on it; shares one connection per host with other SshTargets."""

    def __init__(
        self,
        cfg: TargetConfig,
        *,
        max_channels: int = DEFAULT_MAX_CHANNELS,
        open_timeout: float = OPEN_TIMEOUT_S,
        keepalive_interval: float = KEEPALIVE_INTERVAL_S,
    ) -> None:
        """`max_channels`, `open_timeout` and `keepalive_interval` apply to the connection this target
        creates; a target that joins an existing connection shares that connection's settings."""
        if not cfg.host:
            raise ValueError("SshTarget needs a host")
        super().__init__(cfg.container, cfg.python)
        self.cfg = cfg
        self.max_channels = max_channels
        self.open_timeout = open_timeout
        self.keepalive_interval = keepalive_interval
        self.label = cfg.host if cfg.container is None else f"{cfg.host}/{cfg.container.describe()}"
        self._connection: _Connection | None = None

    @property
    def key(self) -> tuple:
        """What makes two targets share a connection."""
        cfg = self.cfg
        return (cfg.host, cfg.port, cfg.ssh_config, cfg.known_hosts, cfg.accept_new_host_key)

    def _shared(self) -> _Connection:
        if self._connection is not None and not self._connection._closed:
            return self._connection
        loop = asyncio.get_running_loop()
        registry = _connections.setdefault(loop, {})
        connection = registry.get(self.key)
        if connection is None or connection._closed:
            connection = registry[self.key] = _Connection(self.cfg, self.max_channels, self.keepalive_interval)
        connection.targets.add(self)
        self._connection = connection
        self._set_state(connection.state)
        return connection

    @property
    def channel_limit(self) -> int:
        """How many channels may be open at once: the configured limit, lowered to the server's MaxSessions once seen."""
        return self._connection.slots.limit if self._connection is not None else self.max_channels

    async def connect(self) -> None:
        """Connect now (open() does it on demand); TargetError says why it cannot."""
        await self._shared().connection(self.open_timeout)

    async def open(self, script: str, *, login: bool = True) -> Channel:
        command = command_line(script_argv(script, self.container, login=login))
        return await self._shared().open_channel(command, self.open_timeout)

    async def close(self) -> None:
        """Stop using the connection; the last target on it closes it."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.targets.discard(self)
        if not connection.targets:
            registry = _connections.get(asyncio.get_running_loop(), {})
            if registry.get(self.key) is connection:
                del registry[self.key]
            await connection.close()
