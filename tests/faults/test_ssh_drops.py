"""SSH drops while the log streams and the sampler polls: every line arrives exactly once.

A real writer appends numbered lines to a log; a Monitor (sampling agent + log follower) feeds a
RunState over a real sshd; the link is cut again and again by the faults an unreliable network
makes: the server side of the connection killed, sshd restarted, sshd stopped for longer than the
backoff, sshd frozen (SIGSTOP) so only keepalives notice. After the last cut the lines received
must hash to exactly what the writer wrote, and the state must have said each time that it was
reconnecting and then connected.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig
from console.model import ConnectionStatus
from console.monitor import Monitor
from console.remote.ssh import SshTarget
from console.state import RunState
from tests.faults.helpers import (
    RECONNECT_BOUND_S,
    LineDigest,
    PacedWriter,
    StateLog,
    record_figure,
    until,
)
from tests.sshd import SshServer

#: Keepalive for these tests: a frozen server is noticed after about 3 × this.
KEEPALIVE_S = 0.3
#: "Longer than the backoff": the first attempts (0.5, 1, 2 s) all fail while sshd is down.
LONG_STOP_S = 4.0


class RecordingState(RunState):
    """A RunState that also hashes every line it is given (it keeps only its bounded ring)."""

    def __init__(self, digest: LineDigest) -> None:
        super().__init__()
        self.digest = digest

    def add_lines(self, lines) -> None:
        lines = list(lines)
        self.digest(lines)
        super().add_lines(lines)


class Cutter:
    """Cuts the link one way or another and says when the server was reachable again."""

    def __init__(self, server: SshServer) -> None:
        self.server = server

    async def cut(self, kind: str) -> float:
        """Make fault `kind`; returns the monotonic time the server could be reached again."""
        server = self.server
        if kind == "kill":
            server.kill_connections()
        elif kind == "restart":
            await asyncio.to_thread(server.restart)
        elif kind == "long_stop":
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(LONG_STOP_S)
            await asyncio.to_thread(server.start)
        elif kind == "freeze":
            server.pause()
            return time.monotonic()  # resumed by the caller once the loss is seen
        else:
            raise ValueError(kind)
        return time.monotonic()


async def cut_while_streaming(server: SshServer, tmp_path: Path, cuts: list[str]) -> dict:
    """Run a Monitor over `server` while a writer writes, make each fault in `cuts`, check every line."""
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    config = Config(
        target=server.target_config(),
        run=RunConfig(log=str(log), match=r"^no-such-run-\d+$"),
        gpus=GpuConfig(source="none", poll_s=0.2),
    )
    target = SshTarget(config.target, keepalive_interval=KEEPALIVE_S)
    states = StateLog(target)
    digest = LineDigest()
    state = RecordingState(digest)
    monitor = Monitor(config, target, state)
    writer = PacedWriter(log)
    cutter = Cutter(server)
    latencies: list[float] = []
    schedule_gaps: list[float] = []
    samples_before = 0
    try:
        await monitor.start()
        await until(lambda: state.latest is not None, f"a first sample ({[e.text for e in state.events]})")
        await writer.start()
        for number, kind in enumerate(cuts):
            seen = digest.count
            await until(lambda: digest.count > seen + 20, f"lines flowing before cut {number} ({kind})")
            mark = len(states.states)
            back = await cutter.cut(kind)
            if kind == "freeze":
                try:
                    await until(
                        lambda: any(s.status is ConnectionStatus.RECONNECTING for s in states.since(mark)),
                        "keepalive to notice the frozen server",
                    )
                finally:
                    server.resume()
                back = time.monotonic()
            connected = await until(lambda: states.connected_after(back), f"the reconnection after cut {number} ({kind})")
            said = [s.describe(s.retry_at or 0) for s in states.since(mark)]
            assert any(s.status is ConnectionStatus.RECONNECTING for s in states.since(mark)), said
            latencies.append(connected - back)
            retry_at = states.retry_scheduled(back)
            if retry_at is not None:
                schedule_gaps.append(retry_at - back)
            assert not digest.problems, digest.problems
        samples_before = state.samples_received
        written, sha = await writer.stop()
        await until(lambda: digest.count >= written, f"all {written} lines (have {digest.count})")
        await until(lambda: state.samples_received > samples_before, "samples after the last cut")
        await asyncio.sleep(0.3)  # a repeat would arrive by now
    finally:
        writer.kill()
        await monitor.stop()
        await target.close()
    assert digest.problems == []
    assert (digest.count, digest.hexdigest) == (written, sha)
    # The console said so each time: "reconnecting in N s: connection lost", then "connected".
    texts = [e.text for e in state.events if e.kind == "connection"]
    assert sum(t.startswith("reconnecting in ") for t in texts) >= len(cuts), texts
    assert sum(t == "connected" for t in texts) >= len(cuts) + 1, texts
    # Retries are scheduled at most RECONNECT_BOUND_S after the server is back (a schedule, not a speed).
    assert all(gap <= RECONNECT_BOUND_S for gap in schedule_gaps), schedule_gaps
    figures = {
        "cuts": len(cuts),
        "kinds": sorted(set(cuts)),
        "lines": written,
        "lost_or_repeated": 0,
        "reconnect_s_max": round(max(latencies), 3),
        "reconnect_s_median": round(sorted(latencies)[len(latencies) // 2], 3),
    }
    record_figure("ssh_cuts", **figures)
    return figures


async def test_sshd_down_longer_than_the_backoff_is_rejoined_promptly(own_sshd: SshServer, tmp_path: Path) -> None:
    """sshd stays down while several reconnect attempts fail; once it is back the retry comes within 2 s."""
    await cut_while_streaming(own_sshd, tmp_path, ["long_stop"])


async def test_mixed_cuts_in_a_row(own_sshd: SshServer, tmp_path: Path) -> None:
    """Server side killed, sshd restarted, sshd frozen (only keepalive notices): six cuts back to back, nothing lost.

    The short CI version of the hundred-cut soak.
    """
    await cut_while_streaming(own_sshd, tmp_path, ["kill", "restart", "freeze", "kill", "restart", "kill"])


@pytest.mark.soak
async def test_a_hundred_cuts_in_a_row(own_sshd: SshServer, tmp_path: Path) -> None:
    """A hundred cuts in one test (mostly killed connections, some restarts and freezes): nothing lost."""
    kinds = ["kill"] * 100
    for position in range(9, 100, 10):
        kinds[position] = "restart" if position % 20 == 9 else "freeze"
    await cut_while_streaming(own_sshd, tmp_path, kinds)
