"""The Monitor keeps a RunState fed from a real run, and recovers when its sources are lost.

A real training process (tests/procs/healthy.py) writing a real log; the agents are killed by
their PIDs and the SSH connections by sshd's, as an operator's network or OOM killer would.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

from console.backoff import JITTER
from console.config import Config, GpuConfig, RunConfig
from console.model import ConnectionStatus
from console.monitor import RETRY_FIRST_S, Monitor
from console.observe import agent
from console.remote.connect import make_target
from console.remote.target import LocalTarget, Target
from console.state import RunState
from tests.test_agent import alive, spawn, unique_name  # noqa: F401
from tests.test_sampler import agent_pids, until

HEALTHY = Path(__file__).parent / "procs" / "healthy.py"


def start_healthy_run(spawn, tmp_path: Path, name: str) -> tuple[int, Config]:
    log = tmp_path / f"{name}.log"
    run = spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("a"))
    config = Config(run=RunConfig(match=rf"--tag={name}\b", log=str(log)), gpus=GpuConfig(source="none", poll_s=0.2))
    return run.pid, config


def pulse_helpers(name: str) -> list[int]:
    """Every live program Pulse started (sampling agent, log follower) about this run."""
    return [
        r["pid"]
        for r in agent.scan_processes()
        if agent.is_pulse_program(r["argv"]) and any(name in word for word in r["argv"]) and alive(r["pid"])
    ]


async def watch(config: Config, target: Target, state: RunState, changes: list[int]) -> Monitor:
    monitor = Monitor(config, target, state, on_change=lambda: changes.append(1))
    await monitor.start()
    return monitor


async def test_monitor_fills_state_from_sampler_and_log(spawn, tmp_path: Path) -> None:
    name = unique_name()
    run_pid, config = start_healthy_run(spawn, tmp_path, name)
    state, changes = RunState(), []
    monitor = await watch(config, LocalTarget(), state, changes)
    try:
        await until(lambda: state.latest and state.latest.processes and state.lines, "a sample and log lines")
        assert [p.pid for p in state.latest.processes] == [run_pid]
        assert state.connection.status is ConnectionStatus.CONNECTED
        assert state.log_path == str(tmp_path / f"{name}.log")
        await until(lambda: state.rate_metric == "tokens_per_s", "a throughput line")
        assert state.lines[0].text.startswith("step ")
        assert changes
    finally:
        await monitor.stop()
    await until(lambda: pulse_helpers(name) == [], "the agent and the follower to exit after stop()")
    assert not monitor.running


async def test_a_killed_agent_is_started_again(spawn, tmp_path: Path) -> None:
    name = unique_name()
    run_pid, config = start_healthy_run(spawn, tmp_path, name)
    state = RunState()
    monitor = await watch(config, LocalTarget(), state, [])
    try:
        # One agent, once the shell that starts it has exec'd into it (on a loaded box both show for a moment).
        (first_agent,) = await until(lambda: (pids := agent_pids(name)) and len(pids) == 1 and pids, "the sampling agent")
        await until(lambda: state.latest is not None, "a first sample")
        os.kill(first_agent, signal.SIGKILL)
        second_agent = await until(
            lambda: [pid for pid in agent_pids(name) if pid != first_agent], "a new sampling agent"
        )
        assert second_agent
        before = state.samples_received
        await until(lambda: state.samples_received > before, "samples from the new agent")
        assert state.latest.processes[0].pid == run_pid
        assert monitor.sampler_restarts == 1
        (event,) = [e for e in state.events if e.kind == "sampler"]
        assert event.text.startswith("sampling stopped: local: the sampling agent exited with status None")
        waited = float(re.search(r"; restarting in (\S+) s$", event.text).group(1))
        assert (1 - JITTER) * RETRY_FIRST_S <= waited <= RETRY_FIRST_S  # the first wait of the backoff
    finally:
        await monitor.stop()
    await until(lambda: pulse_helpers(name) == [], "every helper to exit after stop()")


async def test_stop_ends_the_sources_while_lines_pour_in(spawn, tmp_path: Path) -> None:
    """A cancel that lands as a read completes must still end the source.

    asyncio.wait_for on Python 3.11 returned the read's result and dropped such a cancel:
    stop() gave up after STOP_TIMEOUT_S and the agent and follower ran on, in about half
    the stops of a run whose log never pauses. Five stops make that near certain to show.
    """
    name = unique_name()
    log = tmp_path / f"{name}.log"
    spawn([sys.executable, str(HEALTHY), "--interval", "0", f"--tag={name}"], stdout=log.open("a"))
    config = Config(run=RunConfig(match=rf"--tag={name}\b", log=str(log)), gpus=GpuConfig(source="none", poll_s=0.05))
    for _ in range(5):
        state = RunState()
        monitor = await watch(config, LocalTarget(), state, [])
        try:
            await until(lambda: state.latest and len(state.lines) > 100, "samples and a stream of log lines")
        finally:
            await monitor.stop()
        assert [e.text for e in state.events if e.kind == "internal"] == []
        await until(lambda: pulse_helpers(name) == [], "the agent and the follower to exit after stop()")


async def test_over_ssh_a_lost_connection_is_shown_and_sampling_resumes(spawn, tmp_path: Path, sshd) -> None:
    name = unique_name()
    run_pid, config = start_healthy_run(spawn, tmp_path, name)
    target = make_target(sshd.target_config())
    state = RunState()
    monitor = await watch(config, target, state, [])
    try:
        await until(lambda: state.latest and state.latest.processes and state.lines, "a sample and log lines")
        assert state.connection.status is ConnectionStatus.CONNECTED
        sshd.kill_connections()
        await until(
            lambda: any(e.kind == "connection" and not e.text.startswith("connected") for e in state.events),
            "the loss to show",
        )
        await until(lambda: state.connection.status is ConnectionStatus.CONNECTED, "the reconnection")
        before = state.latest.time
        await until(lambda: state.latest.time > before, "samples after the reconnection")
        assert state.latest.processes[0].pid == run_pid
    finally:
        await monitor.stop()
        await target.close()
    await until(lambda: pulse_helpers(name) == [], "the remote helpers to exit after stop()")


async def test_a_bar_redrawn_ten_times_a_second_is_state_that_wakes_no_repaint(spawn, tmp_path: Path) -> None:
    """A real tqdm bar (scripts/benchlib/writer.py hf) redrawn at 10 Hz into the log, followed for 3 s: its
    redraws are held by the follower (a second at most) and kept in the state without waking the screen,
    which draws the latest with its next frame (a sample's or the second's tick); what the state holds at
    the end is the bar's latest redraw."""
    name = unique_name()
    log = tmp_path / "bar.log"
    writer = Path(__file__).resolve().parents[1] / "scripts" / "benchlib" / "writer.py"
    bar = spawn([sys.executable, str(writer), "hf", str(log), "10", "30", f"--tag={name}"])
    config = Config(run=RunConfig(log=str(log)), gpus=GpuConfig(source="none", poll_s=60.0))
    state, changes = RunState(), []
    monitor = await watch(config, LocalTarget(), state, changes)
    try:
        await until(lambda: state.progress is not None, "the bar's first redraw")
        seen, changes[:] = [], []
        for _ in range(30):
            seen.append(state.progress.text)
            await asyncio.sleep(0.1)
        assert len(set(seen)) >= 2  # the bar moved
        # No sample in the window (poll_s 60); one of the trainer's dict lines may come (every 10 s).
        assert len(changes) <= 1, f"{len(changes)} repaints in 3 s of a bar redrawn 30 times"
        bar.kill()
        bar.wait()
        last = log.read_bytes().rsplit(b"\r", 1)[-1].decode().strip()
        await until(lambda: state.progress.text.strip() == last, "the bar's last redraw, held no longer than a second")
    finally:
        await monitor.stop()
