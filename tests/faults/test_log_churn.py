"""Log churn over a real sshd: every line exactly once across truncation, rotation, deletion,
a newer run's log, a partial line completed later and a burst, with memory measured.

One Monitor follows the run's log (a `{started}` glob, as a restart names logs) into a bounded
RunState for the whole test while real processes churn the file; between events the link is cut
too. Lines are numbered across every file, so the recorder sees a loss or a repeat the moment it
happens; at the end the lines received hash to exactly the bytes written.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig
from console.monitor import Monitor
from console.remote.connect import make_target
from console.state import RunState
from tests.faults.helpers import LineDigest, record_figure, rss_mib, until
from tests.faults.test_ssh_drops import RecordingState
from tests.sshd import SshServer
from tests.test_follow import python

#: Appends argv[2] (hex) to argv[1] through one descriptor; optional argv[3] (hex) goes after a rename
#: of the file to argv[4], through the same descriptor (a logger that keeps writing after rotation).
APPEND_ROTATING = """
import os, sys
path, first = sys.argv[1], bytes.fromhex(sys.argv[2])
with open(path, 'ab', buffering=0) as out:
    out.write(first)
    if len(sys.argv) > 3:
        os.rename(path, sys.argv[4])
        out.write(bytes.fromhex(sys.argv[3]))
"""
TRUNCATE_AND_WRITE = "import sys; open(sys.argv[1], 'wb').write(bytes.fromhex(sys.argv[2]))"
#: Writes `count` numbered lines from `first` in 64 KiB writes; prints the sha256 of what it wrote.
BURST_FROM = """
import hashlib, sys
path, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
digest = hashlib.sha256()
with open(path, 'ab', buffering=0) as out:
    block = bytearray()
    for i in range(first, first + count):
        block += b'line %d step=%d loss=2.%03d tok/s=14%03d\\n' % (i, i, i % 1000, i % 1000)
        if len(block) >= 65536:
            out.write(block); digest.update(block); block.clear()
    out.write(block); digest.update(block)
print(digest.hexdigest())
"""
#: RSS the console process may gain while a burst streams through it: the state is a bounded ring
#: of 10,000 lines, and a million kept LogLines would take several hundred MiB.
RSS_GROWTH_BOUND_MIB = 120.0


class Churn:
    """Numbered lines for the churn; the sha256 of every line handed to a writer."""

    def __init__(self) -> None:
        self.next = 0
        self.sha = hashlib.sha256()

    def lines(self, count: int) -> bytes:
        data = b"".join(b"line %d churn\n" % i for i in range(self.next, self.next + count))
        self.next += count
        self.sha.update(data)
        return data


async def churn_and_burst(server: SshServer, tmp_path: Path, burst: int) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    config = Config(
        target=server.target_config(),
        run=RunConfig(log=str(logs / "train_{started}.log"), match=r"^no-such-run-\d+$"),
        gpus=GpuConfig(source="none", poll_s=0.5),
    )
    target = make_target(config.target)
    digest = LineDigest()
    state: RunState = RecordingState(digest)
    monitor = Monitor(config, target, state)
    churn = Churn()
    first = logs / "train_20260101-0900.log"

    def seen(ev: str) -> int:
        return sum(1 for e in state.events if e.data.get("ev") == ev)

    async def received_all(what: str) -> None:
        await until(lambda: digest.expected >= churn.next, f"{what}: line {churn.next - 1} (have {digest.expected})")
        assert not digest.problems, (what, digest.problems)

    try:
        first.write_bytes(churn.lines(50))
        await monitor.start()
        await received_all("the first lines")

        # Truncated and rewritten (a run restarted with `>` instead of `>>`).
        await python(TRUNCATE_AND_WRITE, str(first), churn.lines(10).hex())
        await received_all("after truncation")
        await until(lambda: seen("truncated") == 1, "the truncation to be reported")

        # Rotated: renamed while the writer keeps its descriptor and writes more, then recreated.
        before, after = churn.lines(30), churn.lines(20)
        rotated = logs / "train_20260101-0900.log.1"
        await python(APPEND_ROTATING, str(first), before.hex(), after.hex(), str(rotated))
        await python(APPEND_ROTATING, str(first), churn.lines(15).hex())
        await received_all("after rotation")

        # The link is cut while the follower is idle at the end of the file.
        server.kill_connections()
        await python(APPEND_ROTATING, str(first), churn.lines(25).hex())
        await received_all("after a cut")

        # Deleted and recreated.
        first.unlink()
        await until(lambda: seen("missing") >= 1, "the deletion to be reported")
        await python(APPEND_ROTATING, str(first), churn.lines(12).hex())
        await received_all("after deletion and recreation")

        # A partial last line, completed later (across a cut in between).
        partial = b"line %d completed later\n" % churn.next
        churn.next += 1
        churn.sha.update(partial)
        await python(APPEND_ROTATING, str(first), partial[:9].hex())
        await asyncio.sleep(0.3)
        assert digest.expected == churn.next - 1, "an unfinished line was handed on"
        server.kill_connections()
        await python(APPEND_ROTATING, str(first), partial[9:].hex())
        await received_all("after the partial line was completed")

        # A newer run's log appears: it is followed, the old one's late lines are not mixed in.
        newer = logs / "train_20260101-1000.log"
        await python(APPEND_ROTATING, str(newer), churn.lines(40).hex())
        await received_all("after a newer log appeared")
        assert state.log_path == str(newer)

        # Every byte so far, across five files and two cuts, arrived exactly.
        assert digest.hexdigest == churn.sha.hexdigest()
        digest.sha = hashlib.sha256()

        # A burst, with the console's memory measured around it.
        await asyncio.sleep(0.5)
        rss_before = rss_mib()
        peak = rss_before

        async def watch_rss() -> None:
            nonlocal peak
            while True:
                peak = max(peak, rss_mib())
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch_rss())
        try:
            start = churn.next
            written = await python(BURST_FROM, str(newer), str(start), str(burst))
            churn.next += burst
            await received_all(f"the {burst}-line burst")
        finally:
            watcher.cancel()
        await asyncio.sleep(0.3)  # a repeat would have arrived by now
    finally:
        await monitor.stop()
        await target.close()
    assert digest.problems == []
    assert digest.count == churn.next
    assert digest.hexdigest == written.strip()
    assert len(state.lines) == state.lines.maxlen
    growth = peak - rss_before
    record_figure("log_churn", lines=digest.count, burst=burst, events=6, rss_growth_mib=round(growth, 1),
                  rss_before_mib=round(rss_before, 1), lost_or_repeated=0, burst_sha256=written.strip()[:16])
    assert growth < RSS_GROWTH_BOUND_MIB, f"RSS grew {growth:.0f} MiB during a {burst}-line burst"


async def test_churn_then_a_burst_loses_and_repeats_nothing(own_sshd: SshServer, tmp_path: Path) -> None:
    """Truncate, rotate, cut, delete, partial line, newer log, 200k-line burst: each line once, RSS bounded."""
    await churn_and_burst(own_sshd, tmp_path, 200_000)


@pytest.mark.soak
async def test_churn_then_a_million_line_burst(own_sshd: SshServer, tmp_path: Path) -> None:
    """The same churn, then a burst of 1,000,000 lines."""
    await churn_and_burst(own_sshd, tmp_path, 1_000_000)
