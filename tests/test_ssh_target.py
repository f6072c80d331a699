"""SshTarget against a real OpenSSH sshd on 127.0.0.1: commands, streams, limits and faults."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

from console.config import TargetConfig
from console.model import ConnectionState, ConnectionStatus
from console.remote.connect import make_target
from console.remote import ssh
from console.remote.ssh import SshTarget
from console.remote.target import split_user
from console.remote.target import LocalTarget, TargetError
from tests.sshd import SshServer, start_sshd

#: Upper bound on any wait for the connection to change state (reconnects back off up to 15 s).
STATE_WAIT_S = 60.0


class StateLog:
    """Every state a target reports, with a way to wait for one."""

    def __init__(self, target: SshTarget) -> None:
        self.seen: list[ConnectionStatus] = []
        self.details: list[str] = []
        self._changed = asyncio.Event()
        target.on_state(self._record)

    def _record(self, state: ConnectionState) -> None:
        self.seen.append(state.status)
        self.details.append(state.detail)
        self._changed.set()

    async def wait_for(self, status: ConnectionStatus, after: int = 0) -> None:
        async def reached() -> None:
            while status not in self.seen[after:]:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(reached(), STATE_WAIT_S)


@pytest.fixture
async def targets() -> AsyncIterator[Callable[..., SshTarget]]:
    """Makes SshTargets and closes them when the test ends."""
    made: list[SshTarget] = []

    def make(cfg: TargetConfig, **options) -> SshTarget:
        target = SshTarget(cfg, **options)
        made.append(target)
        return target

    yield make
    for target in made:
        await target.close()


@pytest.fixture
def own_sshd(tmp_path: Path):
    """A server of this test's own, for tests that stop, restart or reconfigure it."""
    server = start_sshd(tmp_path)
    yield server
    server.stop()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_target_picks_the_transport(sshd: SshServer) -> None:
    """No host → this machine; a host → SSH."""
    assert isinstance(make_target(TargetConfig()), LocalTarget)
    target = make_target(sshd.target_config())
    assert isinstance(target, SshTarget)
    assert target.label == "pulse-test"


def test_split_user() -> None:
    """`user@host` splits; a bare host or alias has no user."""
    assert split_user("root@10.1.2.6") == ("root", "10.1.2.6")
    assert split_user("gpu-box") == (None, "gpu-box")


async def test_run_returns_status_stdout_and_stderr(sshd: SshServer, targets) -> None:
    """Exit status, stdout and stderr come back separately."""
    target = targets(sshd.target_config())
    result = await target.run("echo out; echo err >&2; exit 3", timeout=30)
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert target.state.status is ConnectionStatus.CONNECTED


async def test_stdin_passes_through(sshd: SshServer, targets) -> None:
    """Bytes written to the channel reach the remote command's stdin, EOF included."""
    target = targets(sshd.target_config())
    result = await target.run("wc -c; cat >/dev/null", timeout=30, stdin=b"x" * 100_000)
    assert result.stdout.split() == ["100000"]
    channel = await target.open("tr a-z A-Z")
    channel.write(b"hello\n")
    channel.write_eof()
    assert await channel.read() == b"HELLO\n"
    assert await channel.read() == b""
    assert await channel.wait() == 0
    channel.close()


async def test_stream_yields_lines(sshd: SshServer, targets) -> None:
    """stream() splits output into lines; a last line without newline still comes."""
    target = targets(sshd.target_config())
    lines = [line async for line in target.stream("seq 1 5000; printf tail")]
    assert lines == [str(i) for i in range(1, 5001)] + ["tail"]


async def test_timeout_is_a_one_line_error(sshd: SshServer, targets) -> None:
    """A command that outlives its timeout raises TargetError and its channel is closed."""
    target = targets(sshd.target_config())
    with pytest.raises(TargetError, match="timed out") as caught:
        await target.run("sleep 30", timeout=0.5)
    assert "\n" not in str(caught.value)


async def test_close_sends_eof_so_a_helper_exits(sshd: SshServer, targets, tmp_path: Path) -> None:
    """sshd ignores channel signals; close() sends EOF and a helper reading stdin ends on its own."""
    target = targets(sshd.target_config())
    marker = tmp_path / "helper-ended"
    channel = await target.open(f"echo started; cat >/dev/null; touch {marker}")
    assert await channel.read() == b"started\n"
    channel.close()
    for _ in range(600):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists()


async def test_targets_share_one_connection(sshd: SshServer, targets, pid_namespace) -> None:
    """Targets naming the same host, container or not, use one SSH connection."""
    before = set(sshd.connection_pids())
    host = targets(sshd.target_config())
    inside = targets(sshd.target_config(container=pid_namespace.container))
    results = await asyncio.gather(host.run("echo host", 30), inside.run("echo inside", 30))
    assert [r.stdout for r in results] == ["host\n", "inside\n"]
    assert len(set(sshd.connection_pids()) - before) == 1


async def test_many_parallel_commands_queue_behind_max_sessions(tmp_path: Path, targets) -> None:
    """With MaxSessions 3 on the server, 20 parallel commands all succeed: the extra ones wait their turn."""
    server = start_sshd(tmp_path, MaxSessions=3)
    try:
        target = targets(server.target_config())
        results = await asyncio.gather(*(target.run(f"sleep 0.1; echo {i}", timeout=60) for i in range(20)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
        assert all(r.ok for r in results)
        assert target.channel_limit == 3

        async def lines_of(first: int) -> list[str]:
            return [line async for line in target.stream(f"seq {first} {first + 2}")]

        outputs = await asyncio.gather(*(lines_of(i) for i in range(6)))
        assert outputs == [[str(i), str(i + 1), str(i + 2)] for i in range(6)]
    finally:
        server.stop()


async def test_many_hosts_handshake_a_few_at_a_time(sshd: SshServer, targets, tmp_path: Path, monkeypatch) -> None:
    """A fleet connects to every node at once: no more than HANDSHAKES_AT_ONCE key exchanges are in
    flight, the hosts behind them say that they wait for one, and every host connects."""
    monkeypatch.setattr(ssh, "HANDSHAKES_AT_ONCE", 2)
    real_connect, in_flight, most = asyncssh.connect, 0, 0

    async def counted(*args, **kwargs):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await real_connect(*args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(asyncssh, "connect", counted)
    hosts = []
    for index in range(6):  # a known_hosts file of its own makes each a host of its own: its own connection
        known = tmp_path / f"known_hosts{index}"
        known.write_bytes(Path(sshd.known_hosts).read_bytes())
        hosts.append(targets(sshd.target_config(known_hosts=str(known))))
    states = [StateLog(host) for host in hosts]
    results = await asyncio.gather(*(host.run("echo up", 30) for host in hosts))
    assert [r.stdout for r in results] == ["up\n"] * 6
    assert most == 2
    waited = [s for s in states if "waiting for one of 2 SSH handshakes in flight" in s.details]
    assert len(waited) >= 4
    assert all(s.seen[-1] is ConnectionStatus.CONNECTED for s in states)


async def test_a_lost_host_waiting_for_a_handshake_still_reads_as_reconnecting(sshd: SshServer, monkeypatch) -> None:
    """A host queued behind the handshakes in flight keeps its status and why: a fleet calls a lost node
    unreachable by its status, and the wait is only added to the detail."""
    monkeypatch.setattr(ssh, "HANDSHAKES_AT_ONCE", 1)
    lost = ssh._Connection(sshd.target_config(), ssh.DEFAULT_MAX_CHANNELS, ssh.KEEPALIVE_INTERVAL_S)
    lost._set_state(ConnectionStatus.RECONNECTING, "connection lost: reset", 12.0)
    held, release = asyncio.Event(), asyncio.Event()

    async def hold_the_slot() -> None:
        async with ssh._handshake_slot(ssh._Connection(sshd.target_config(), 1, 1.0)):
            held.set()
            await release.wait()

    async def wait_for_one() -> None:
        async with ssh._handshake_slot(lost):
            pass

    holder = asyncio.create_task(hold_the_slot())
    await held.wait()
    waiter = asyncio.create_task(wait_for_one())
    await asyncio.sleep(0.05)
    assert (lost.state.status, lost.state.detail, lost.state.retry_at) == (
        ConnectionStatus.RECONNECTING, "connection lost: reset; waiting for one of 1 SSH handshakes in flight", 12.0)
    release.set()
    await asyncio.gather(holder, waiter)
    assert (lost.state.status, lost.state.detail) == (ConnectionStatus.RECONNECTING, "connection lost: reset")


async def test_reconnects_after_server_restart(own_sshd: SshServer, targets) -> None:
    """The server goes away and comes back: RECONNECTING, then CONNECTED, and run() works again."""
    target = targets(own_sshd.target_config())
    log = StateLog(target)
    assert (await target.run("echo before", 30)).stdout == "before\n"
    mark = len(log.seen)
    own_sshd.restart()
    await log.wait_for(ConnectionStatus.RECONNECTING, mark)
    assert target.state.retry_at is not None or target.state.status is ConnectionStatus.CONNECTED
    await log.wait_for(ConnectionStatus.CONNECTED, mark)
    assert (await target.run("echo after", 30)).stdout == "after\n"


async def test_reconnects_after_the_server_side_connection_dies(own_sshd: SshServer, targets) -> None:
    """Killing the per-connection sshd process by PID loses the link; the target reconnects."""
    target = targets(own_sshd.target_config())
    log = StateLog(target)
    assert (await target.run("echo before", 30)).ok
    mark = len(log.seen)
    own_sshd.kill_connections()
    await log.wait_for(ConnectionStatus.RECONNECTING, mark)
    await log.wait_for(ConnectionStatus.CONNECTED, mark)
    assert (await target.run("echo after", 30)).stdout == "after\n"


async def test_open_waits_for_the_reconnect(own_sshd: SshServer, targets) -> None:
    """A command asked for while the server is down runs once it is back, instead of failing at once."""
    target = targets(own_sshd.target_config())
    log = StateLog(target)
    assert (await target.run("true", 30)).ok
    mark = len(log.seen)
    own_sshd.stop()
    await log.wait_for(ConnectionStatus.RECONNECTING, mark)
    pending = asyncio.ensure_future(target.run("echo waited", 60))
    await asyncio.sleep(0.3)
    assert not pending.done()
    own_sshd.start()
    assert (await pending).stdout == "waited\n"


async def test_stream_cut_by_a_lost_connection_raises(own_sshd: SshServer, targets) -> None:
    """A stream that loses its connection ends with TargetError, so a follower knows to resume."""
    target = targets(own_sshd.target_config())
    lines = target.stream("echo first; sleep 60")
    assert await anext(lines) == "first"
    own_sshd.kill_connections()
    with pytest.raises(TargetError, match="connection lost"):
        await anext(lines)
    await lines.aclose()


async def test_keepalive_notices_a_silent_server(own_sshd: SshServer, targets) -> None:
    """A server that stops answering (SIGSTOP) is noticed by keepalives; after SIGCONT the link is back."""
    target = targets(own_sshd.target_config(), keepalive_interval=0.3)
    log = StateLog(target)
    assert (await target.run("true", 30)).ok
    mark = len(log.seen)
    own_sshd.pause()
    try:
        await log.wait_for(ConnectionStatus.RECONNECTING, mark)
    finally:
        own_sshd.resume()
    await log.wait_for(ConnectionStatus.CONNECTED, mark)
    assert (await target.run("echo alive", 60)).stdout == "alive\n"


async def test_unreachable_port_is_a_one_line_error(targets) -> None:
    """Nothing listens on the port: one line naming the host and what to check; state FAILED."""
    target = targets(TargetConfig(host="127.0.0.1", port=closed_port(), known_hosts="/dev/null"))
    with pytest.raises(TargetError) as caught:
        await target.run("true", 30)
    message = str(caught.value)
    assert "connection refused" in message and "127.0.0.1" in message and "\n" not in message
    assert target.state.status is ConnectionStatus.FAILED


async def test_refused_key_is_a_one_line_error(own_sshd: SshServer, targets) -> None:
    """The server does not know our key: one line saying authentication was refused; no retry loop."""
    own_sshd.authorized_keys.write_text("")
    target = targets(own_sshd.target_config())
    with pytest.raises(TargetError, match="authentication refused") as caught:
        await target.run("true", 30)
    assert "\n" not in str(caught.value)
    assert target.state.status is ConnectionStatus.FAILED


async def test_proxy_jump_from_ssh_config(sshd: SshServer, targets, tmp_path: Path) -> None:
    """An alias whose ssh_config names a ProxyJump host goes through it (here: the same server)."""
    config = tmp_path / "ssh_config"
    config.write_text(
        sshd.ssh_config.read_text()
        + f"Host pulse-jumped\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n  ProxyJump {sshd.alias}\n"
    )
    before = set(sshd.connection_pids())
    target = targets(TargetConfig(host="pulse-jumped", ssh_config=str(config)))
    result = await target.run("echo jumped", 30)
    assert result.stdout == "jumped\n"
    # Two new server-side connections: one to the jump host, one tunnelled through it.
    assert len(set(sshd.connection_pids()) - before) == 2


def test_aes_gcm_is_preferred_unless_the_ssh_config_chose_the_ciphers():
    from asyncssh.encryption import get_default_encryption_algs

    from console.remote.ssh import _ciphers

    preferred = _ciphers(get_default_encryption_algs())
    assert preferred[:2] == ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]
    assert sorted(preferred) == sorted(name.decode() for name in get_default_encryption_algs())
    assert _ciphers([b"chacha20-poly1305@openssh.com", b"aes256-ctr"]) == ["chacha20-poly1305@openssh.com", "aes256-ctr"]


async def test_an_ssh_failure_suggests_the_ssh_command_as_the_target_was_given(targets) -> None:
    """Issue 33: the hint for root@10.1.2.6 said `ssh 10.1.2.6`. A server that speaks no SSH-2 (a
    real socket on 127.0.0.1 sending an SSH-1 banner) fails the handshake; the hint keeps user and port."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.sendall(b"SSH-1.5-not-ssh2\r\n")
                client.recv(1024)

    threading.Thread(target=answer, daemon=True).start()
    try:
        target = targets(TargetConfig(host="root@127.0.0.1", port=port, known_hosts="/dev/null"))
        with pytest.raises(TargetError) as caught:
            await target.run("true", 10)
    finally:
        server.close()
    assert f"try `ssh root@127.0.0.1 -p {port}` by hand" in str(caught.value), caught.value
