"""Host keys against a real sshd: unknown keys refused unless accepted, changed keys always refused."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

from console.config import TargetConfig
from console.model import ConnectionStatus
from console.remote.ssh import SshTarget
from console.remote.target import TargetError
from tests.sshd import SshServer, start_sshd


@pytest.fixture
async def targets() -> AsyncIterator[Callable[[TargetConfig], SshTarget]]:
    """Makes SshTargets and closes them when the test ends."""
    made: list[SshTarget] = []

    def make(cfg: TargetConfig) -> SshTarget:
        made.append(SshTarget(cfg))
        return made[-1]

    yield make
    for target in made:
        await target.close()


def other_key_line(server: SshServer) -> str:
    """A known_hosts line for the server's address with some other ed25519 key."""
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().split()
    return f"[{server.host}]:{server.port} {other[0]} {other[1]}\n"


async def test_unknown_key_is_refused_with_what_to_do(sshd: SshServer, targets, tmp_path: Path) -> None:
    """An empty known_hosts: refused, and the one line says how to trust the key."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    target = targets(sshd.target_config(known_hosts=str(known_hosts)))
    with pytest.raises(TargetError) as caught:
        await target.run("true", 30)
    message = str(caught.value)
    assert "is not in" in message and "ssh-keyscan" in message and "--accept-new-host-key" in message
    assert "\n" not in message
    assert target.state.status is ConnectionStatus.FAILED
    assert known_hosts.read_text() == ""


async def test_accept_new_trusts_and_records_the_key(sshd: SshServer, targets, tmp_path: Path) -> None:
    """With accept_new the key is appended (folder created); OpenSSH and a strict target then accept it."""
    known_hosts = tmp_path / "fresh" / "known_hosts"
    accepting = targets(sshd.target_config(known_hosts=str(known_hosts), accept_new_host_key=True))
    assert (await accepting.run("echo first", 30)).stdout == "first\n"
    assert known_hosts.read_text() == f"[{sshd.host}]:{sshd.port} {sshd.host_key_line}\n"

    strict = targets(sshd.target_config(known_hosts=str(known_hosts)))
    assert (await strict.run("echo again", 30)).stdout == "again\n"

    openssh = await asyncio.to_thread(
        subprocess.run,
        ["ssh", "-F", str(sshd.ssh_config), "-o", f"UserKnownHostsFile={known_hosts}", sshd.alias, "echo openssh"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (openssh.returncode, openssh.stdout) == (0, "openssh\n"), openssh.stderr


async def test_changed_key_is_refused_even_with_accept_new(sshd: SshServer, targets, tmp_path: Path) -> None:
    """known_hosts lists another key for the host: refused, the file untouched, whatever accept_new says."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(other_key_line(sshd))
    before = known_hosts.read_text()
    for accept_new in (False, True):
        target = targets(sshd.target_config(known_hosts=str(known_hosts), accept_new_host_key=accept_new))
        with pytest.raises(TargetError, match="CHANGED") as caught:
            await target.run("true", 30)
        assert "\n" not in str(caught.value)
        assert target.state.status is ConnectionStatus.FAILED
    assert known_hosts.read_text() == before


async def test_key_changed_across_a_reconnect_fails_for_good(tmp_path: Path, targets) -> None:
    """The server comes back with a new host key: no silent reconnect; FAILED with the reason."""
    server = start_sshd(tmp_path)
    try:
        target = targets(server.target_config(accept_new_host_key=True))
        failed = asyncio.Event()
        target.on_state(lambda state: failed.set() if state.status is ConnectionStatus.FAILED else None)
        assert (await target.run("true", 30)).ok
        server.new_host_key()
        server.restart()
        await asyncio.wait_for(failed.wait(), 60)
        assert "CHANGED" in target.state.detail
        with pytest.raises(TargetError, match="CHANGED"):
            await target.run("true", 30)
    finally:
        server.stop()
