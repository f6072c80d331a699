"""Real H200 captures (tests/data/real, see its README) replayed through the real log follower.

A writer process appends each capture's run.log to a fresh file in the sizes its
write_times.jsonl recorded, pausing where the capture shows a bar half-way through its line; the
follower (locally, and for HF Trainer also through the test sshd) feeds a RunState, and the
tests check what the console would show: the live bar, the lines kept, the throughput figures,
and a Lightning run whose progress bar draws only on a terminal.
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
from pathlib import Path

import pytest

from console.config import Config, MetricsConfig, RunConfig
from console.model import LogLine, ProgressLine
from console.observe.follow import LogFollower
from console.observe.progress import LIGHTNING_RICH
from console.observe.textsafe import sanitize
from console.remote.target import LocalTarget, Target
from console.state import RunState
from console.ui.run_figures import progress_bar_view, throughput_view
from tests.test_follow import WAIT_S, target, until  # noqa: F401  (target: the local/ssh fixture)

REAL = Path(__file__).parent / "data" / "real"

# Appends SRC to DST in the recorded write sizes; at PAUSE bytes it says so and waits for a line on stdin.
REPLAY = """
import json, sys
src, dst, times, pause = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
data = open(src, 'rb').read()
offsets = [json.loads(line)['offset'] for line in open(times) if line.strip()] + [len(data)]
done = 0
with open(dst, 'ab', buffering=0) as out:
    for offset in offsets:
        if offset <= done:
            continue
        if done < pause <= offset:
            out.write(data[done:pause]); done = pause
            print('paused', flush=True); sys.stdin.readline()
        out.write(data[done:offset]); done = offset
print('done', flush=True)
"""


class Replay:
    """A capture written again by a real process, followed by a real LogFollower into a RunState."""

    def __init__(
        self, target: Target, name: str, folder: Path, *, pause: int | None = None, bar_after: int = 0
    ) -> None:
        """Pause at `pause` bytes, or where the file first ends inside a bar after `bar_after` bytes."""
        self.name, self.log = name, folder / "train.log"
        self.pause = pause if pause is not None else pause_inside_a_bar(name, bar_after)
        self.state = RunState()
        self.lines: list[LogLine] = []
        self.reports: list[ProgressLine | None] = []
        config = Config(run=RunConfig(log=str(self.log)))
        self.follower = LogFollower(target, config, self._lines, on_progress=self._progress, max_line_bytes=16384)

    def _lines(self, lines: list[LogLine]) -> None:
        self.lines.extend(lines)
        self.state.add_lines(lines)

    def _progress(self, progress: ProgressLine | None) -> None:
        self.reports.append(progress)
        self.state.set_progress(progress)

    async def __aenter__(self) -> Replay:
        self.log.write_bytes(b"")
        self.task = asyncio.create_task(self.follower.run())
        await until(lambda: self.follower.agent_pid is not None, "the agent to open the log")
        folder = REAL / self.name
        self.writer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", REPLAY, str(folder / "run.log"), str(self.log), str(folder / "write_times.jsonl"),
            str(self.pause), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        return self

    async def until_written(self, size: int, said: bytes) -> None:
        assert await asyncio.wait_for(self.writer.stdout.readline(), WAIT_S) == said
        await until(lambda: self.follower.offset + self.follower.pending_bytes == size, f"{size} bytes read")
        await asyncio.sleep(0.1)  # the last chunk's report is made right after its lines

    async def live_bar_at_the_pause(self) -> ProgressLine:
        """The bar reported once the writer paused inside it: its latest redraw."""
        await self.until_written(self.pause, b"paused\n")
        live = self.reports[-1]
        assert live is not None and live.text == last_redraw(self.name, self.pause)
        return live

    async def resume(self) -> None:
        self.writer.stdin.write(b"go\n")
        await self.writer.stdin.drain()
        await self.until_written((REAL / self.name / "run.log").stat().st_size, b"done\n")

    async def __aexit__(self, *exc: object) -> None:
        if self.writer.returncode is None:
            self.writer.kill()
            await self.writer.wait()
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def pause_inside_a_bar(name: str, after: int) -> int:
    """A recorded write size past `after` bytes at which the file ends inside a bar's redraws."""
    data = (REAL / name / "run.log").read_bytes()
    for line in (REAL / name / "write_times.jsonl").read_text().splitlines():
        offset = json.loads(line)["offset"]
        in_a_bar = data.rfind(b"\r", 0, offset) > data.rfind(b"\n", 0, offset)
        if offset > after and in_a_bar and data[offset - 1 : offset] == b"]":
            return offset
    raise AssertionError(f"{name}: no write ends inside a bar after {after} bytes")


def last_redraw(name: str, size: int) -> str:
    """The bar's latest redraw in the first `size` bytes, as sanitize keeps it."""
    data = (REAL / name / "run.log").read_bytes()[:size]
    return sanitize(data[data.rfind(b"\n") + 1 :])[0]


async def test_hf_trainer_bar_is_live_and_its_dicts_keep_the_step(target: Target, tmp_path: Path) -> None:
    name = "hf_healthy"
    async with Replay(target, name, tmp_path, bar_after=20_000) as replay:
        live = await replay.live_bar_at_the_pause()
        assert live.info.total_steps == 100_000 and live.rate_unit == "it/s" and live.rate == live.info.it_per_s
        assert replay.follower.pending_bytes <= 16384
        # the state and the panes read the live bar: step, total, its rate in it/s, its ETA
        view = throughput_view(replay.state, MetricsConfig(), replay.state.clock())
        assert (view.step, view.total_steps, view.unit) == (live.info.step, 100_000, "it/s")
        assert view.eta_s is not None and view.eta_s <= live.eta_s
        assert progress_bar_view(replay.state, replay.state.clock()).text == live.text

        dicts = [line for line in replay.lines if "{'loss'" in line.text]
        assert len(dicts) >= 5
        for logged_at, line in enumerate(dicts, 1):
            logged = ast.literal_eval(line.text[line.text.index("{") :])
            assert line.text.startswith(("  0%|", "  1%|"))  # the bar's last redraw first
            # a dict every 100 steps; the bar's last redraw before it is within a few steps of it
            assert 100 * logged_at - 10 <= line.info.step <= 100 * logged_at and line.info.total_steps == 100_000
            assert line.info.it_per_s is not None
            assert (line.info.loss, line.info.grad_norm, line.info.lr) == (
                float(logged["loss"]), float(logged["grad_norm"]), float(logged["learning_rate"])
            )
        assert replay.state.values("loss")[-1] == dicts[-1].info.loss
        await replay.resume()
        assert replay.reports[-1] is not None and replay.reports[-1].info.step is not None
        assert replay.reports[-1].text == last_redraw(name, (REAL / name / "run.log").stat().st_size)


async def test_lightning_tqdm_bar_gives_its_postfix_loss(tmp_path: Path) -> None:
    async with Replay(LocalTarget(), "lightning_tqdm", tmp_path, bar_after=100_000) as replay:
        live = await replay.live_bar_at_the_pause()
        assert live.text.startswith("Epoch ") and live.info.total_steps == 1000
        postfix = dict(live.postfix)
        assert float(postfix["train_loss"]) == live.info.loss
        assert replay.state.step == live.info.step and replay.state.values("loss")
        assert replay.state.terminal_only_progress is None


async def test_accelerate_bar_and_the_line_glued_to_it(tmp_path: Path) -> None:
    async with Replay(LocalTarget(), "accelerate_tqdm", tmp_path, bar_after=20_000) as replay:
        live = await replay.live_bar_at_the_pause()
        assert live.text.startswith("train:") and live.info.total_steps == 100_000
        assert live.info.loss is not None and dict(live.postfix)["loss"] == f"{live.info.loss:.4f}"
        await replay.resume()
        # SIGTERM's warning was written right after the last redraw: the line kept holds both
        glued = next(line for line in replay.lines if "death signal" in line.text)
        assert glued.text.startswith("train:") and glued.info.step is not None
        assert replay.reports[-1] is None  # the line is finished: no live bar any more


async def test_lightning_rich_bar_is_known_to_draw_only_on_a_terminal(tmp_path: Path) -> None:
    name = "lightning_rich"
    data = (REAL / name / "run.log").read_bytes()
    pause = data.index(b"[rank: 0] Received SIGTERM")  # before SIGTERM makes rich print its last frame
    async with Replay(LocalTarget(), name, tmp_path, pause=pause) as replay:
        await replay.until_written(pause, b"paused\n")
        assert replay.reports == []
        assert replay.state.terminal_only_progress is LIGHTNING_RICH
        said = progress_bar_view(replay.state, replay.state.clock()).terminal_only
        assert said is not None and "TQDMProgressBar" in said and "RichProgressBar" in said
        assert throughput_view(replay.state, MetricsConfig(), replay.state.clock()).unit is None


async def test_a_traceback_glued_to_a_bar_is_one_problem_through_the_follower(tmp_path: Path) -> None:
    """HF Trainer's OOM: the traceback starts right after the bar's last redraw, on the same line."""
    name = "hf_oom"
    size = (REAL / name / "run.log").stat().st_size
    async with Replay(LocalTarget(), name, tmp_path, pause=size) as replay:
        await replay.until_written(size, b"paused\n")
        (problem,) = replay.state.spans.problems
        by_number = {line.number: line.text for line in replay.lines}
        assert by_number[problem.first].endswith("it/s]Traceback (most recent call last):")
        assert problem.name.text.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB.")
        assert problem.kind.value == "oom" and problem.last == problem.name.number
