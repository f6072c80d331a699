"""The log follower on real files written by real processes, through LocalTarget and a real sshd.

Every test checks the exact lines received: nothing lost, nothing repeated, across partial
lines, truncation, rotation, deletion, a newer run's log, a killed agent and a lost connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from console.config import Config, RunConfig
from console.model import Event, LineKind, LogLine
from console.observe import follow_agent
from console.observe.follow import TURNS_PER_YIELD, LogFollower, _Frames, log_pattern
from console.remote.connect import make_target
from console.remote.target import LocalTarget, Target

WAIT_S = 60.0
"""Generous: other engineers' tests share the two cores."""

APPEND = "import sys; f = open(sys.argv[1], 'ab'); f.write(sys.stdin.buffer.read()); f.close()"

# Writes `count` numbered lines in writes of varying size (splitting lines across writes),
# optionally pausing between writes, and prints the sha256 of every byte written.
BURST = """
import hashlib, sys, time
path, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
digest = hashlib.sha256()
with open(path, 'ab', buffering=0) as f:
    block = bytearray()
    sizes = (1, 7, 100, 4096, 65536, 333)
    for i in range(count):
        block += b'line %d %s\\n' % (i, b'x' * (i % 97))
        if len(block) >= sizes[i % len(sizes)]:
            cut = len(block) - (i % 5)
            f.write(block[:cut]); digest.update(block[:cut]); del block[:cut]
            if pause:
                time.sleep(pause)
    f.write(block); digest.update(block)
print(digest.hexdigest())
"""


async def python(code: str, *args: str, stdin: bytes = b"") -> str:
    """Run a real writer process to its end; its stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate(stdin)
    assert process.returncode == 0
    return out.decode()


async def append(path: Path, data: bytes) -> None:
    await python(APPEND, str(path), stdin=data)


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class Run:
    """A LogFollower running as a task, with everything it reported."""

    def __init__(self, target: Target, log: str, **options) -> None:
        self.lines: list[LogLine] = []
        self.batches = 0
        self.events: list[Event] = []
        self.follower = LogFollower(
            target, Config(run=RunConfig(log=log)), self._on_lines, on_event=self.events.append, **options
        )
        self.task: asyncio.Task | None = None

    def _on_lines(self, lines: list[LogLine]) -> None:
        self.batches += 1
        self.lines.extend(lines)

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines]

    def seen(self, ev: str) -> int:
        return sum(1 for event in self.events if event.data["ev"] == ev)

    async def __aenter__(self) -> Run:
        self.task = asyncio.create_task(self.follower.run())
        await until(lambda: self.follower.agent_pid is not None, "the agent to open the log")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    async def receive(self, texts: list[str]) -> None:
        """Wait until exactly `texts` arrived (and fail on anything else)."""
        await until(lambda: len(self.lines) >= len(texts), f"{len(texts)} lines (have {len(self.lines)})")
        await asyncio.sleep(0.2)  # anything extra (a duplicate) would have arrived by now
        assert self.texts == texts
        assert [line.number for line in self.lines] == list(range(1, len(texts) + 1))

    async def restarted(self, old_pid: int) -> None:
        await until(
            lambda: self.follower.agent_pid not in (None, old_pid), "the agent to be started again"
        )


@pytest.fixture(params=["local", "ssh"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    if request.param == "local":
        yield LocalTarget()
        return
    sshd = request.getfixturevalue("sshd")
    ssh_target = make_target(sshd.target_config())
    try:
        yield ssh_target
    finally:
        await ssh_target.close()


async def test_appended_lines_arrive_in_order(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"before 1\nbefore 2\n")
    async with Run(target, str(log)) as run:
        await run.receive(["before 1", "before 2"])
        await append(log, b"step 1 | loss 2.50 | 14200 tok/s\n")
        await append(log, b"step 2 | loss 2.40 | 14300 tok/s\nCUDA out of memory. Tried to allocate 2.00 GiB\n")
        await run.receive(
            ["before 1", "before 2", "step 1 | loss 2.50 | 14200 tok/s",
             "step 2 | loss 2.40 | 14300 tok/s", "CUDA out of memory. Tried to allocate 2.00 GiB"]
        )
        assert run.lines[2].info.loss == 2.5
        assert run.lines[4].info.kind is LineKind.OOM
        assert run.follower.path == str(log)
        assert run.follower.inode == log.stat().st_ino
        assert run.follower.offset == log.stat().st_size


async def test_a_slow_pace_gathers_the_lines_of_its_window_into_one_message(target: Target, tmp_path: Path) -> None:
    """A fleet's node (batch_s 2): ten writes within 0.3 s arrive in at most two messages, the first
    write at once (the agent had been quiet) and the rest together, in order."""
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    async with Run(target, str(log), poll_s=2.0, batch_s=2.0) as run:
        for step in range(10):
            await append(log, f"step {step}\n".encode())
            await asyncio.sleep(0.03)
        await run.receive([f"step {step}" for step in range(10)])
        assert run.batches <= 2


async def test_held_lines_come_together_each_dated_by_its_own_write(target: Target, tmp_path: Path) -> None:
    """A paced fleet's node (read at most every 0.1 s, sent every 3 s): writes 0.3 s apart arrive in
    one message, yet each line keeps its write's time, so the run's rhythm (how soon silence is a
    stall) is not the sending pace."""
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    delivered: list[float] = []
    async with Run(target, str(log), poll_s=0.1, batch_s=0.1, hold_s=3.0) as run:
        on_lines = run.follower.on_lines
        run.follower.on_lines = lambda lines: (delivered.append(time.monotonic()), on_lines(lines))
        for step in range(4):
            await append(log, f"step {step}\n".encode())
            await asyncio.sleep(0.3)
        await run.receive([f"step {step}" for step in range(4)])
    assert len(delivered) == 4 and delivered[-1] - delivered[0] < 0.2  # one message, four reads
    assert run.lines[-1].time - run.lines[0].time > 0.45  # written 0.9 s apart


async def test_frames_held_longer_than_the_silence_limit_do_not_read_as_a_dead_link(tmp_path: Path) -> None:
    """A large fleet's node holds its frames for its sampling interval (16 s at 1,024 nodes), longer
    than its heartbeat: the console's "no word for this long" limit counts the hold (or it would
    restart a healthy agent), and the agent does not heartbeat while it holds frames."""
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    async with Run(LocalTarget(), str(log), poll_s=0.1, batch_s=0.1, hold_s=6.0, heartbeat_s=0.1) as run:
        await append(log, b"step 1\n")
        await run.receive(["step 1"])  # held ~6 s: past 3 heartbeats + 5 s without the hold counted
    assert run.seen("disconnected") == 0, [e.data.get("reason") for e in run.events]
    assert run.seen("idle") < 10  # held frames stand for the heartbeat: no idle frame each pass meanwhile


def test_held_reads_go_out_as_one_frame_each_read_aged_when_written(tmp_path: Path) -> None:
    """Output with hold_s: nothing is written until flushed; then reads that continue one another are
    one data frame whose `ages` date each read, counted to that moment from its own mtime; a read that
    does not continue the last (another file) is a frame of its own."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    try:
        out = follow_agent.Output(write_fd, hold_s=60.0)
        now = time.time()
        data = {"ev": "data", "path": "/l", "inode": 7}
        out.frame({**data, "offset": 0, "len": 3}, b"a\nb", written_at=now - 2.0)
        out.frame({**data, "offset": 3, "len": 2}, b"c\n", written_at=now - 0.5)
        out.frame({**data, "inode": 8, "offset": 0, "len": 2}, b"d\n", written_at=now - 0.1)
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 1 << 16)
        assert 0 < out.due_in() <= 60.0
        out.flush(due_only=True)  # not due yet
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 1 << 16)
        out.flush()
        frames = _Frames().feed(os.read(read_fd, 1 << 16))
        assert [(h["inode"], h["offset"], h["len"], payload) for h, payload in frames] == [(7, 0, 5, b"a\nbc\n"), (8, 0, 2, b"d\n")]
        (first, _), (second, _) = frames
        (len_a, age_a), (len_c, age_c) = first["ages"]
        assert (len_a, len_c) == (3, 2) and age_a - age_c == pytest.approx(1.5, abs=0.01) and first["age"] == age_c
        assert "ages" not in second and second["age"] >= 0.1
        assert out.due_in() is None
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_partial_line_completed_later_comes_out_once_whole(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    async with Run(target, str(log)) as run:
        await append(log, b"first\nsecond ha")
        await run.receive(["first"])
        assert run.follower.pending_bytes == len(b"second ha")
        await append(log, b"lf\n")
        await run.receive(["first", "second half"])


async def test_backlog_starts_at_a_line_start(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"".join(b"old line %d\n" % i for i in range(1000)))
    async with Run(target, str(log), backlog_bytes=100) as run:
        await until(lambda: run.lines, "the backlog")
        await asyncio.sleep(0.2)
        # The last 100 bytes hold 7 whole lines and the end of another, which is skipped.
        assert run.texts == [f"old line {i}" for i in range(993, 1000)]


async def test_truncation_restarts_from_the_start(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"one long line of the old run\ntwo\n")
    async with Run(target, str(log)) as run:
        await run.receive(["one long line of the old run", "two"])
        await python("import sys; open(sys.argv[1], 'wb').write(b'fresh\\n')", str(log))
        await run.receive(["one long line of the old run", "two", "fresh"])
        assert run.seen("truncated") == 1


async def test_rotation_keeps_lines_written_to_the_old_file(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    rotate = """
import os, sys
path = sys.argv[1]
old = open(path, 'ab', buffering=0)
old.write(b'a1\\na2\\n')
os.rename(path, path + '.1')
old.write(b'a3 written after the rename\\n')
old.close()
new = open(path, 'ab', buffering=0)
new.write(b'b1\\n')
new.close()
"""
    async with Run(target, str(log)) as run:
        await python(rotate, str(log))
        await run.receive(["a1", "a2", "a3 written after the rename", "b1"])
        assert run.seen("rotated") == 1
        assert run.follower.inode == log.stat().st_ino
        await append(log, b"b2\n")
        await run.receive(["a1", "a2", "a3 written after the rename", "b1", "b2"])


async def test_deleted_then_recreated(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"a1\n")
    async with Run(target, str(log)) as run:
        await run.receive(["a1"])
        log.unlink()
        await until(lambda: run.seen("missing") == 1, "the missing event")
        assert not run.follower.status.exists
        await append(log, b"b1\n")
        await run.receive(["a1", "b1"])
        assert run.follower.status.exists


async def test_a_newer_log_matching_the_pattern_is_followed(target: Target, tmp_path: Path) -> None:
    first, second = tmp_path / "train_20240101-0900.log", tmp_path / "train_20240101-1000.log"
    first.write_bytes(b"run 1 line\n")
    log = str(tmp_path / "train_{started}.log")
    assert log_pattern(log) == str(tmp_path / "train_*.log")
    async with Run(target, log) as run:
        await run.receive(["run 1 line"])
        await append(first, b"run 1 unfinished")
        await run.receive(["run 1 line"])
        await append(second, b"run 2 line\n")
        await run.receive(["run 1 line", "run 1 unfinished", "run 2 line"])
        assert run.seen("replaced") == 1
        assert run.follower.path == str(second)
        # The old run writing once more must not pull the follower back to its log.
        await append(first, b"run 1 late\n")
        await append(second, b"run 2 next\n")
        await run.receive(["run 1 line", "run 1 unfinished", "run 2 line", "run 2 next"])


async def test_missing_at_start_then_created(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    run = Run(target, str(log))
    run.task = asyncio.create_task(run.follower.run())
    try:
        await until(lambda: run.seen("missing") == 1, "the missing event")
        await append(log, b"finally\n")
        await run.receive(["finally"])
    finally:
        await run.__aexit__()


async def burst(target: Target, tmp_path: Path, count: int) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    async with Run(target, str(log)) as run:
        written = await python(BURST, str(log), str(count), "0")
        await until(lambda: len(run.lines) >= count, f"{count} lines (have {len(run.lines)})")
        await asyncio.sleep(0.2)
        received = hashlib.sha256("".join(text + "\n" for text in run.texts).encode()).hexdigest()
        assert len(run.lines) == count
        assert received == written.strip()
        assert run.batches < count / 10  # lines come in batches, one call per chunk


async def test_burst_of_200k_lines_arrives_exactly(target: Target, tmp_path: Path) -> None:
    await burst(target, tmp_path, 200_000)


async def test_under_a_burst_a_chain_of_tasks_waits_behind_one_slice_of_line_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key reaches the screen through a chain of tasks, each ready only once the one before it
    has run (the app, the widget it changed, the screen, the screen's frame timer). Under a flood
    the line work yields long enough for such a chain to run whole between two of its slices."""
    slices = 0
    yield_turns = LogFollower._yield_turns

    async def counted(self: LogFollower) -> None:
        nonlocal slices
        slices += 1
        await yield_turns(self)

    monkeypatch.setattr(LogFollower, "_yield_turns", counted)
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    waits: list[int] = []
    async with Run(LocalTarget(), str(log)) as run:
        writer = asyncio.create_task(python(BURST, str(log), "200000", "0"))
        while len(run.lines) < 200_000:
            before = slices
            for _ in range(TURNS_PER_YIELD):  # a chain of that many tasks, one hop each
                await asyncio.sleep(0)
            waits.append(slices - before)
            await asyncio.sleep(0.003)
        await writer
    assert sum(waits) > 20  # chains ran while the line work was yielding
    assert max(waits) <= 1


@pytest.mark.soak
async def test_burst_of_a_million_lines_arrives_exactly(target: Target, tmp_path: Path) -> None:
    await burst(target, tmp_path, 1_000_000)


async def test_untrusted_bytes_become_safe_lines(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    async with Run(target, str(log)) as run:
        await append(
            log,
            b"bad utf-8 \xff\xfe here\n"
            b"\x1b]0;owned title\x07\x1b[31mred\x1b[0m\n"
            b"nul\x00inside\n"
            b"\x1b]52;c;cm0gLXJmIH4=\x07clipboard\n"
            b"\r 10%|#         | 10/100\r 20%|##        | 20/100\n",
        )
        await run.receive(["bad utf-8 \ufffd\ufffd here", "red", "nulinside", "clipboard", " 20%|##        | 20/100"])
        for text in run.texts:
            assert text.isprintable()


async def test_a_10mb_line_without_newline_is_cut_and_not_buffered(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    bound = 16 * 1024
    async with Run(target, str(log), max_line_bytes=bound) as run:
        await append(log, b"before\n" + b"x" * (10 * 1024 * 1024))
        await until(lambda: run.follower.offset == log.stat().st_size, "the 10 MB line to be read")
        assert run.follower.pending_bytes == 0
        assert [(line.text[:3], line.cut, len(line.text)) for line in run.lines] == [
            ("bef", False, 6), ("xxx", True, bound)
        ]
        # A reconnect in the middle of the long line neither reads it again nor cuts it twice.
        old_pid = run.follower.agent_pid
        os.kill(old_pid, signal.SIGKILL)
        await run.restarted(old_pid)
        await append(log, b"y" * (1024 * 1024) + b" end of the long line\nafter\n")
        await until(lambda: len(run.lines) >= 3, "the line after")
        await asyncio.sleep(0.2)
        assert run.texts[2:] == ["after"]


async def test_a_long_progress_bar_keeps_its_latest_redraw(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    redraws = b"".join(b"\r%3d%%|%s| %d/1000 [12.50it/s]" % (i // 10, b"#" * (i // 100), i) for i in range(1000))
    async with Run(target, str(log), max_line_bytes=1024) as run:
        await append(log, redraws)
        await until(lambda: run.follower.offset + run.follower.pending_bytes == log.stat().st_size, "the redraws")
        assert run.follower.pending_bytes <= 1024
        await append(log, b"\n")
        await run.receive([" 99%|#########| 999/1000 [12.50it/s]"])
        assert run.lines[0].info.it_per_s == 12.5


async def test_partial_line_across_a_restart_comes_out_once(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"done\nhalf")
    async with Run(target, str(log)) as run:
        await run.receive(["done"])
        old_pid = run.follower.agent_pid
        os.kill(old_pid, signal.SIGKILL)
        await run.restarted(old_pid)
        await append(log, b" and the rest\n")
        await run.receive(["done", "half and the rest"])
        assert run.seen("disconnected") == 1


async def test_resume_after_the_agent_is_killed_mid_stream(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    count = 30_000
    async with Run(target, str(log)) as run:
        writer = asyncio.create_task(python(BURST, str(log), str(count), "0.0005"))
        for threshold in (2_000, 8_000, 15_000):
            await until(lambda: len(run.lines) >= threshold or writer.done(), f"{threshold} lines")
            old_pid = run.follower.agent_pid
            os.kill(old_pid, signal.SIGKILL)
            await run.restarted(old_pid)
        written = await writer
        await until(lambda: len(run.lines) >= count, f"{count} lines (have {len(run.lines)})")
        await asyncio.sleep(0.2)
        assert [int(text.split()[1]) for text in run.texts] == list(range(count))
        received = hashlib.sha256("".join(text + "\n" for text in run.texts).encode()).hexdigest()
        assert received == written.strip()
        assert run.seen("disconnected") == 3


async def test_resume_after_the_ssh_connection_is_lost(sshd, tmp_path: Path) -> None:
    target = make_target(sshd.target_config())
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    count = 20_000
    try:
        async with Run(target, str(log)) as run:
            writer = asyncio.create_task(python(BURST, str(log), str(count), "0.0005"))
            await until(lambda: len(run.lines) >= 3_000, "3000 lines")
            old_pid = run.follower.agent_pid
            sshd.kill_connections()
            await run.restarted(old_pid)
            written = await writer
            await until(lambda: len(run.lines) >= count, f"{count} lines (have {len(run.lines)})")
            await asyncio.sleep(0.2)
            assert [int(text.split()[1]) for text in run.texts] == list(range(count))
            assert hashlib.sha256("".join(t + "\n" for t in run.texts).encode()).hexdigest() == written.strip()
    finally:
        await target.close()


ROTATE = """
import os, sys
path = sys.argv[1]
with open(path, 'ab') as old:
    old.write(b'a2 written while the follower was down\\n')
os.rename(path, path + '.1')
with open(path, 'ab') as new:
    new.write(b'b1\\n')
"""


async def test_rotation_while_the_agent_is_down_resumes_in_the_old_file(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"a1\n")
    async with Run(target, str(log)) as run:
        await run.receive(["a1"])
        old_pid = run.follower.agent_pid
        os.kill(old_pid, signal.SIGKILL)
        # Blocking on purpose: the follower cannot start its agent again before the rotation is done.
        subprocess.run([sys.executable, "-c", ROTATE, str(log)], check=True)
        await run.restarted(old_pid)
        await run.receive(["a1", "a2 written while the follower was down", "b1"])
        assert [e.data["lost"] for e in run.events if e.data["ev"] == "rotated"] == [False]


async def test_a_file_rewritten_while_the_agent_is_down_is_read_from_its_start(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"old run 1\nold run unfinished")
    async with Run(target, str(log)) as run:
        await run.receive(["old run 1"])
        old_pid = run.follower.agent_pid
        inode = log.stat().st_ino
        os.kill(old_pid, signal.SIGKILL)
        # Same inode, new content longer than the old offset: only the file's head tells them apart.
        subprocess.run(
            [sys.executable, "-c", "import sys; open(sys.argv[1], 'r+b').write(b'NEW RUN LINE 1\\nnew run line 2\\n')", str(log)],
            check=True,
        )
        assert log.stat().st_ino == inode
        await run.restarted(old_pid)
        await run.receive(["old run 1", "old run unfinished", "NEW RUN LINE 1", "new run line 2"])
        assert [e.data["lost"] for e in run.events if e.data["ev"] == "rotated"] == [True]


async def test_a_silent_link_is_noticed_and_the_follower_resumes(sshd, tmp_path: Path) -> None:
    """No frame (not even a heartbeat) for a while means a dead link even if TCP has not said so."""
    target = make_target(sshd.target_config())
    log = tmp_path / "train.log"
    log.write_bytes(b"before\n")
    try:
        async with Run(target, str(log), heartbeat_s=0.5) as run:
            await run.receive(["before"])
            sshd.pause()
            try:
                await until(lambda: run.seen("disconnected") == 1, "the silence to be noticed")
                await append(log, b"during\n")
            finally:
                sshd.resume()
            await append(log, b"after\n")
            await run.receive(["before", "during", "after"])
            assert "no word" in next(e for e in run.events if e.data["ev"] == "disconnected").data["reason"]
    finally:
        await target.close()


async def test_a_chatty_login_profile_does_not_break_the_framing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bash_profile").write_text("echo 'Welcome to the training box'\necho '{\"not\": \"a frame\"}'\n")
    monkeypatch.setenv("HOME", str(home))
    log = tmp_path / "train.log"
    log.write_bytes(b"line 1\n")
    async with Run(LocalTarget(), str(log)) as run:
        await run.receive(["line 1"])
        assert run.seen("disconnected") == 0


async def test_the_agent_exits_when_its_channel_closes(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"x\n")
    async with Run(target, str(log)) as run:
        pid = run.follower.agent_pid
        assert pid_alive(pid)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[5] == b"pulse-follow"
    await until(lambda: not pid_alive(pid), f"agent {pid} to exit")


def test_agent_line_start_before(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"aa\nbbbb\ncc")
    fd = os.open(log, os.O_RDONLY)
    try:
        assert [follow_agent.Follower.line_start_before(fd, p) for p in (0, 1, 3, 4, 8, 9)] == [0, 3, 3, 8, 8, 10]
    finally:
        os.close(fd)


class InProcessAgent:
    """follow_agent's Follower in a thread of this test, its frames read back from a pipe."""

    def __init__(self, pattern: str, watcher: follow_agent.Watcher | None, poll_s: float) -> None:
        self.frames_fd, out_fd = os.pipe()
        stdin_fd, self.stdin_w = os.pipe()
        self.follower = follow_agent.Follower(
            follow_agent.Source(pattern), follow_agent.Output(out_fd), poll_s, 3600.0, stdin_fd, watcher
        )
        self.parser = _Frames()
        self.events: list[str] = []
        self.data = b""
        self.thread = threading.Thread(target=self.follower.run, args=(0, 0), daemon=True)
        self._fds = [self.frames_fd, out_fd, stdin_fd]

    def __enter__(self) -> InProcessAgent:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.stdin_w)  # EOF: the agent's loop must end
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()
        for fd in self._fds:
            os.close(fd)

    def expect(self, events: list[str], data: bytes) -> None:
        """Wait until exactly `events` (besides data) and `data` arrived so far."""
        deadline = time.monotonic() + WAIT_S
        while [e for e in self.events if e != "data"] != events or self.data != data:
            if time.monotonic() > deadline:
                pytest.fail(f"have {self.events} {self.data!r}, want {events} {data!r}")
            if select.select([self.frames_fd], [], [], 0.1)[0]:
                for header, payload in self.parser.feed(os.read(self.frames_fd, 65536)):
                    self.events.append(header["ev"])
                    self.data += payload


def write(path: Path, data: bytes, mode: str = "ab") -> None:
    with open(path, mode) as handle:
        handle.write(data)


@pytest.fixture(params=["inotify", "polling"])
def agent_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """With inotify and no timed checks at all (a change is seen only if inotify reported it),
    or with no watcher, polling as where inotify is unavailable."""
    if request.param == "polling":
        return lambda pattern: InProcessAgent(pattern, None, 0.05)
    monkeypatch.setattr(follow_agent, "STAT_EVERY_S", 3600.0)
    monkeypatch.setattr(follow_agent, "RESCAN_S", 3600.0)

    def start(pattern: str) -> InProcessAgent:
        watcher = follow_agent.Watcher.open()
        assert watcher is not None, "inotify through libc is unavailable on this Linux box"
        return InProcessAgent(pattern, watcher, 3600.0)

    return start


def test_agent_sees_appends_truncation_rotation_and_recreation(agent_in_process, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    write(log, b"a1\n")
    with agent_in_process(str(log)) as agent:
        agent.expect(["open"], b"a1\n")
        write(log, b"a2\n")
        agent.expect(["open"], b"a1\na2\n")
        write(log, b"new\n", "wb")
        agent.expect(["open", "truncated"], b"a1\na2\nnew\n")
        with open(log, "ab", buffering=0) as old:
            os.rename(log, tmp_path / "train.log.1")
            old.write(b"a3\n")
            write(log, b"b1\n")
        agent.expect(["open", "truncated", "rotated", "open"], b"a1\na2\nnew\na3\nb1\n")
        log.unlink()
        agent.expect(["open", "truncated", "rotated", "open", "missing"], b"a1\na2\nnew\na3\nb1\n")
        write(log, b"c1\n")
        agent.expect(["open", "truncated", "rotated", "open", "missing", "rotated", "open"], b"a1\na2\nnew\na3\nb1\nc1\n")
        if agent.follower.watcher is not None:
            assert agent.follower.watcher.watching == (agent.follower.fd, log.stat().st_ino, str(tmp_path))


def test_agent_sees_a_glob_match_appear_and_a_newer_one_replace_it(agent_in_process, tmp_path: Path) -> None:
    first, second = tmp_path / "train_1.log", tmp_path / "train_2.log"
    (tmp_path / "other.txt").write_bytes(b"")
    with agent_in_process(str(tmp_path / "train_*.log")) as agent:
        agent.expect(["missing"], b"")
        write(tmp_path / "other.txt", b"not the log\n")
        write(first, b"run 1\n")
        agent.expect(["missing", "open"], b"run 1\n")
        write(second, b"run 2\n")
        agent.expect(["missing", "open", "replaced", "open"], b"run 1\nrun 2\n")
        write(second, b"run 2 next\n")
        agent.expect(["missing", "open", "replaced", "open"], b"run 1\nrun 2\nrun 2 next\n")


def test_the_agent_process_sleeps_in_inotify_on_the_file_and_its_folder(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    agent = subprocess.Popen(
        [sys.executable, follow_agent.__file__, f"--path={log}", "--offset=0", "--inode=0", "--poll=0.05"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert b'"ev":"hello"' in agent.stdout.readline()
        assert b'"ev":"open"' in agent.stdout.readline()

        def inotify_watches() -> int:
            fdinfo = Path(f"/proc/{agent.pid}/fdinfo")
            return sum(info.read_text().count("inotify wd:") for info in fdinfo.iterdir())

        deadline = time.monotonic() + WAIT_S
        while inotify_watches() != 2:
            assert time.monotonic() < deadline, "the agent never set its two inotify watches"
            time.sleep(0.05)
        agent.stdin.close()
        assert agent.wait(timeout=WAIT_S) == 0
    finally:
        agent.kill()
        agent.wait()
