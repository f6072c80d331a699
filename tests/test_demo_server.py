"""The demo's in-process SSH server: runs commands like sshd, over a pinned host key, for one client key only."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncssh
import pytest

from console.demo.server import DemoSshServer
from console.remote.connect import make_target


@pytest.fixture
async def server(tmp_path: Path):
    async with DemoSshServer(tmp_path) as running:
        yield running


def client(server: DemoSshServer, **options):
    """An asyncssh client with the demo's key and pinned known_hosts, reading no ssh_config."""
    fields = {
        "username": server.user,
        "client_keys": [str(server.client_key)],
        "known_hosts": str(server.known_hosts),
        "config": [],
        **options,
    }
    return asyncssh.connect(server.host, server.port, **fields)


async def test_listens_on_loopback_only(server):
    assert server.host == "127.0.0.1"
    assert server._listener.sockets[0].getsockname()[0] == "127.0.0.1"


async def test_runs_the_command_with_bash_and_returns_its_exit_status(server):
    async with client(server) as connection:
        result = await connection.run('echo "$0 says hi"; echo oops >&2; exit 3', encoding=None)
    assert result.exit_status == 3
    assert result.stdout == b"bash says hi\n"
    assert result.stderr == b"oops\n"


async def test_stdin_and_stdout_are_binary_safe_both_ways(server):
    data = os.urandom(3 << 20)
    async with client(server) as connection:
        result = await connection.run("cat", input=data, encoding=None)
    assert result.exit_status == 0
    assert result.stdout == data


async def test_a_command_killed_by_a_signal_reports_the_signal(server):
    async with client(server) as connection:
        result = await connection.run("kill -TERM $$", encoding=None)
    assert result.exit_signal[0] == "TERM"


async def test_closing_the_channel_kills_the_command_and_its_children(server, tmp_path):
    pids = tmp_path / "pids"
    async with client(server) as connection:
        process = await connection.create_process(f"sleep 300 & echo $$ $! > {pids}; wait", encoding=None)
        while not pids.exists() or not pids.read_text().endswith("\n"):
            await asyncio.sleep(0.02)
        shell, sleeper = map(int, pids.read_text().split())
        while server.child_pids() != [shell]:  # the server registers the command once its start returns
            await asyncio.sleep(0.02)
        process.close()
        await process.wait_closed()
        while server.child_pids():
            await asyncio.sleep(0.02)
    for pid in (shell, sleeper):
        assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


async def test_refuses_a_client_key_it_did_not_issue(server):
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        async with client(server, client_keys=[stranger]):
            pass


async def test_a_client_holding_another_host_key_refuses_the_server(server, tmp_path):
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    known_hosts = tmp_path / "other_known_hosts"
    known_hosts.write_text(f"[{server.host}]:{server.port} {impostor[0]} {impostor[1]}\n")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with client(server, known_hosts=str(known_hosts)):
            pass


async def test_openssh_reaches_it_through_the_written_ssh_config(server):
    ssh = await asyncio.create_subprocess_exec(
        "ssh", "-F", str(server.ssh_config), server.alias, "echo reached; exit 4",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await ssh.communicate()
    assert ssh.returncode == 4, err
    assert out == b"reached\n"


async def test_ssh_target_runs_and_streams_through_it(server):
    target = make_target(server.target_config())
    try:
        result = await target.run("printf 'a\\nb\\n'; exit 2", timeout=30)
        assert (result.exit_status, result.stdout) == (2, "a\nb\n")
        lines = [line async for line in target.stream("for i in 1 2 3; do echo line $i; done")]
        assert lines == ["line 1", "line 2", "line 3"]
        echoed = await target.run("cat", timeout=30, stdin="through stdin\n")
        assert echoed.stdout == "through stdin\n"
    finally:
        await target.close()
