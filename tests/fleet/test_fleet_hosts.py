"""A fleet from a plain host list over the real sshd: a Monitor per node, rows worst first, the sums, a fleet diagnosis."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from console.config import parse_config
from console.monitor import LogPacing
from console.fleet.fleet import FLEET_SAMPLES_PER_S, Fleet, node_log_pacing
from console.fleet.fleet_diagnose import diagnose_fleet

WRITER = "import sys, time\nwhile True:\n    print('step 1 tokens/s: 1500.0 loss 2.0', flush=True)\n    time.sleep(0.2)\n"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def writer(tmp_path: Path):
    """A real process writing throughput lines to its log."""
    script = tmp_path / "fleet_writer.py"
    script.write_text(WRITER)
    log = tmp_path / "train.log"
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-u", str(script)], stdout=out, stderr=subprocess.STDOUT)
    yield log
    process.kill()
    process.wait()


def command_lines() -> list[bytes]:
    """Every process's command line on this machine (the test sshd's sessions run here)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                found.append((entry / "cmdline").read_bytes())
        except OSError:
            pass
    return found


def fleet_toml(sshd, tmp_path: Path, log: Path, *, name: str | None = None) -> str:
    """Two nodes: the test sshd, and an alias whose port nothing listens on."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        sshd.ssh_config.read_text()
        + f"Host pulse-dead\n  HostName 127.0.0.1\n  Port {closed_port()}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n  BatchMode yes\n"
    )
    named = f'name = "{name}"\n' if name else ""
    # This test's own writer, by its path: another test's, running beside it on another worker, is not this run.
    match = re.escape(str(log.parent / "fleet_writer.py"))
    return (
        f'[target]\nhosts = ["{sshd.alias}", "pulse-dead"]\nssh_config = "{ssh_config}"\nknown_hosts = "{sshd.known_hosts}"\n'
        f'[run]\n{named}log = "{log}"\nmatch = \'{match}\'\n[gpus]\npoll_s = 0.3\n'
    )


def fleet_config(sshd, tmp_path: Path, log: Path):
    return parse_config(fleet_toml(sshd, tmp_path, log))


async def test_monitors_rows_and_summary(sshd, tmp_path: Path, writer: Path) -> None:
    """Each node is watched on its own; the unreachable node sorts first; the header sums the healthy one."""
    fleet = await Fleet.open(fleet_config(sshd, tmp_path, writer))
    assert [n.name for n in fleet.nodes] == [sshd.alias, "pulse-dead"]
    live = fleet.nodes[0]
    await fleet.start()
    try:
        for _ in range(200):
            fleet.refresh()
            if live.state.samples_received >= 3 and live.state.rate_metric and fleet.nodes[1].verdict:
                break
            await asyncio.sleep(0.05)
        fleet.refresh()
        rows = fleet.rows(now=live.state.clock())
        followers = [argv for argv in command_lines() if b"pulse-follow" in argv and str(writer).encode() in argv]
    finally:
        await fleet.close()
    # The node's log agent reads at most once a second and sends what it read together, here each
    # second (a run's console: each write at once).
    assert [argv.split(b"\0").count(b"--batch=1") + argv.split(b"\0").count(b"--hold=1") for argv in followers] == [2]
    assert [r.name for r in rows] == ["pulse-dead", sshd.alias]
    dead, alive = rows
    assert dead.verdict == "unknown" and "unreachable" in dead.summary and "connection refused" in dead.summary
    assert alive.verdict == "healthy" and alive.ranks == 1
    assert alive.rate == 1500.0 and alive.rate_unit == "tok/s"
    assert alive.log_silent_s is not None and alive.log_silent_s < 5
    summary = fleet.summary()
    assert (summary.nodes, summary.healthy, summary.rate, summary.worst) == (2, 1, 1500.0, "unknown")


async def test_fleet_diagnosis_names_the_dead_node(sshd, tmp_path: Path, writer: Path) -> None:
    """A diagnosis of all nodes at once: one unreachable node does not hold back the other's verdict."""
    config = fleet_config(sshd, tmp_path, writer)
    config = replace(config, stall=replace(config.stall, sample_window_s=0.3))
    fleet = await Fleet.open(config)
    try:
        diagnosis = await diagnose_fleet(fleet.nodes, window_s=0.3)
    finally:
        await fleet.close()
    by_name = {n.name: n for n in diagnosis.nodes}
    assert by_name[sshd.alias].verdict.name == "healthy" and by_name[sshd.alias].error is None
    assert by_name["pulse-dead"].evidence is None and "connection refused" in by_name["pulse-dead"].error
    assert diagnosis.headline() == "1/2 nodes healthy: unknown on pulse-dead"
    assert diagnosis.groups == []  # nothing looked stuck: no rank was dumped


async def test_a_large_fleet_samples_each_node_less_often_to_stay_within_the_consoles_budget(tmp_path: Path) -> None:
    """64 nodes keep [gpus] poll_s; 256 are sampled every 4 s each (64 samples a second in all); a slower
    poll_s than that is kept. A node's log is read at most once a second and sent as often as its samples.
    Nothing is connected: opening a host-list fleet only builds its nodes."""
    def opened(count: int, poll_s: float):
        hosts = ", ".join(f'"node{i:03d}"' for i in range(count))
        return Fleet.open(parse_config(f'[target]\nhosts = [{hosts}]\n[run]\nmatch = "train"\n[gpus]\npoll_s = {poll_s}\n'))

    for count, poll_s, expected, send_s in ((64, 1.0, 1.0, 1.0), (256, 1.0, 4.0, 4.0), (256, 10.0, 10.0, 10.0), (32, 0.5, 0.5, 1.0)):
        fleet = await opened(count, poll_s)
        try:
            assert {node.config.gpus.poll_s for node in fleet.nodes} == {expected}
            assert count / expected <= FLEET_SAMPLES_PER_S
            assert {node_log_pacing(node.config) for node in fleet.nodes} == {LogPacing(read_s=1.0, send_s=send_s)}
        finally:
            await fleet.close()
