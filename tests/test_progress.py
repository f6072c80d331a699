"""Progress bars through the real follower: a real tqdm writing to a file, read locally and over a
real sshd; a bar's live redraw, the line kept when its newline comes, and rates dated by when they
were written (a backlog is history)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from console.config import Config, MetricsConfig, RunConfig
from console.model import LogLine, ProgressLine
from console.observe.follow import LogFollower
from console.observe.progress import LIGHTNING_RICH, bar_fields, is_redraw, progress_line
from console.remote.target import Target
from console.state import RunState
from console.ui.panes.progress_bar_line import ProgressBarLine
from console.ui.run_figures import progress_bar_view, throughput_view
from tests.snapshot_apps.scenarios import make_app
from tests.test_follow import WAIT_S, append, target, until  # noqa: F401  (target: the local/ssh fixture)

# A real tqdm bar in a file, as HF Trainer draws it: redraws after `\r`, a dict printed through
# tqdm.write at step 20 (which clears the bar, prints, and draws it again), then it waits on stdin
# with the bar unfinished (the live redraw), and closes the bar when stdin ends.
TQDM_WRITER = """
import sys
from tqdm import tqdm
with open(sys.argv[1], 'w') as log:
    bar = tqdm(total=100, file=log, mininterval=0, miniters=1, smoothing=0)
    for step in range(1, 41):
        bar.update(1)
        if step > 20:  # as Lightning's bar; HF's has none
            bar.set_postfix(loss=f'{3 - step / 100:.3f}', lr='3e-05', refresh=True)
        if step == 20:
            bar.write("{'loss': '8.996', 'grad_norm': '0.111', 'learning_rate': '4.9e-05'}", file=log)
        log.flush()
    print('drawn', flush=True)
    sys.stdin.read()
    bar.close()
"""


class ProgressRun:
    """A LogFollower task recording its lines and every progress report."""

    def __init__(self, target: Target, log: Path, **options) -> None:
        self.lines: list[LogLine] = []
        self.reports: list[ProgressLine | None] = []
        self.follower = LogFollower(
            target,
            Config(run=RunConfig(log=str(log))),
            self.lines.extend,
            on_progress=self.reports.append,
            **options,
        )

    async def __aenter__(self) -> ProgressRun:
        self.task = asyncio.create_task(self.follower.run())
        await until(lambda: self.follower.agent_pid is not None, "the agent to open the log")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_a_real_tqdm_bar_is_live_and_its_line_kept_with_what_followed(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", TQDM_WRITER, str(log), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    async with ProgressRun(target, log) as run:
        assert await asyncio.wait_for(writer.stdout.readline(), WAIT_S) == b"drawn\n"
        await until(lambda: run.reports and run.reports[-1] and run.reports[-1].info.step == 40, "the 40th redraw")
        live = run.reports[-1]
        assert live.text.startswith(" 40%|") and "40/100 [" in live.text
        assert (live.info.step, live.info.total_steps, live.info.loss) == (40, 100, 2.6)
        assert live.rate_unit == "it/s" and live.rate == live.info.it_per_s and live.rate > 0
        assert dict(live.postfix) == {"loss": "2.600", "lr": "3e-05"}
        assert live.elapsed_s is not None and live.eta_s is not None
        # The dict's line is the bar's last redraw before it plus the dict: step and rate stay with the loss.
        assert len(run.lines) == 1
        kept = run.lines[0]
        assert kept.text.startswith(" 20%|") and kept.text.endswith("'learning_rate': '4.9e-05'}")
        assert (kept.info.step, kept.info.total_steps, kept.info.loss) == (20, 100, 8.996)
        assert kept.info.it_per_s is not None
        # At most the latest redraw per chunk read: never one report per redraw.
        assert len(run.reports) <= 41

        writer.stdin.close()
        await writer.wait()
        await until(lambda: len(run.lines) == 2, "the bar's closing newline")
        assert run.lines[1].text.startswith(" 40%|") and run.lines[1].info.step == 40
        await until(lambda: run.reports[-1] is None, "the live line to be withdrawn")


async def test_a_bar_redrawn_forever_stays_bounded_and_reports_its_latest_redraw(
    target: Target, tmp_path: Path
) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    bar = b"\rEpoch 0: %3d%%|| %d/20000 [00:10<00:20, 15.73it/s, v_num=0]"
    redraws = b"".join(bar % (i // 200, i) for i in range(20000))
    async with ProgressRun(target, log, max_line_bytes=1024) as run:
        await append(log, redraws)
        await until(lambda: run.follower.offset + run.follower.pending_bytes == log.stat().st_size, "the redraws")
        assert run.follower.pending_bytes <= 1024
        await until(lambda: run.reports and run.reports[-1].info.step == 19999, "the last redraw")
        assert run.reports[-1].text == "Epoch 0:  99%|| 19999/20000 [00:10<00:20, 15.73it/s, v_num=0]"
        assert len(run.reports) < 100  # ~1 MB of redraws: a report per chunk, not per redraw
        assert run.lines == []


async def test_a_backlog_is_dated_by_when_it_was_written_not_when_it_was_read(target: Target, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"step 10 | loss 2.31 | 14.2K tok/s\nstep 20 | loss 2.30 | 14.1K tok/s\n")
    three_hours_ago = time.time() - 3 * 3600
    os.utime(log, (three_hours_ago, three_hours_ago))
    state = RunState()
    async with ProgressRun(target, log) as run:
        await until(lambda: len(run.lines) == 2, "the backlog")
        state.add_lines(run.lines)
        now = time.monotonic()
        assert all(now - line.time >= 3 * 3600 - 60 for line in run.lines)
        view = throughput_view(state, MetricsConfig(), now)
        assert view.current == 14100.0 and view.stale_s is not None and view.stale_s >= 3 * 3600 - 60
        # Lines written now are news: dated now, and the rate is current again.
        await append(log, b"step 30 | loss 2.29 | 14.3K tok/s\n")
        await until(lambda: len(run.lines) == 3, "the new line")
        state.add_lines(run.lines[2:])
        assert throughput_view(state, MetricsConfig(), max(time.monotonic(), run.lines[2].time)).stale_s is None


def test_the_live_bar_feeds_state_and_the_views() -> None:
    state = RunState(clock=lambda: 100.0)
    text = "Epoch 0:  34%|███▍      | 1020/3000 [01:04<02:05, 15.73it/s, loss=1.2, v_num=0]"
    from console.observe.progress import progress_line

    state.set_progress(progress_line(text, 99.0))
    assert (state.step, state.total_steps) == (1020, 3000)
    assert (state.values("it_per_s"), state.values("loss")) == ([15.73], [1.2])
    later = progress_line(text.replace("1020/3000", "1021/3000"), 99.5)
    state.set_progress(later)
    assert state.step == 1021 and state.values("it_per_s") == [15.73]  # a point per second of redraws
    view = throughput_view(state, MetricsConfig(), 100.0)
    assert view.unit == "it/s" and view.current == 15.73 and view.eta_s == pytest.approx(125 - 0.5)
    assert progress_bar_view(state, 100.0).text == later.text
    state.set_progress(None)
    assert progress_bar_view(state, 100.0).text is None


@pytest.mark.parametrize(
    ("text", "rate", "unit", "elapsed", "eta", "postfix"),
    [
        ("  2%|▏         | 2140/100000 [02:41<4:07:32,  6.59it/s]", 6.59, "it/s", 161, 14852, ()),
        ("  4%|4         | 32/782 [00:14<09:31,  1.31s/it]", 1.31, "s/it", 14, 571, ()),
        ("Map: 100%|██████████| 1000/1000 [00:00<00:00, 12345.67 examples/s]", 12345.67, "examples/s", 0, 0,
         ()),
        ("  0%|          | 0/782 [00:00<?, ?it/s]", None, "it/s", 0, None, ()),
        ("2140it [02:41,  6.59it/s]", 6.59, "it/s", 161, None, ()),
        ("Epoch 0:  34%|███▍      | 1020/3000 [01:04<02:05, 15.73it/s, loss=1.2, v_num=0]", 15.73, "it/s", 64,
         125,
         (("loss", "1.2"), ("v_num", "0"))),
    ],
)
def test_bar_fields(text: str, rate, unit, elapsed, eta, postfix) -> None:
    assert is_redraw(text)
    fields = bar_fields(text)
    assert (fields.rate, fields.rate_unit, fields.elapsed_s, fields.eta_s, fields.postfix) == (
        rate, unit, elapsed, eta, postfix
    )


@pytest.mark.parametrize("text", ["{'loss': '8.996', 'grad_norm': '0.111'}", "Saving model checkpoint to out/", ""])
def test_other_output_is_not_a_redraw(text: str) -> None:
    assert not is_redraw(text)


async def test_the_progress_row_shows_the_bar_then_why_the_log_has_none() -> None:
    app = make_app("bar")
    async with app.run_test(size=(120, 40)) as pilot:
        row = app.query_one(ProgressBarLine)
        assert row.has_class("-shown") and str(row.render()).startswith("▸ 2%|")
        app.state.set_progress(None)
        app.state.terminal_only_progress = LIGHTNING_RICH
        app.run_screen.flush_log()
        await pilot.pause()
        assert row.has_class("-terminal-only") and "TQDMProgressBar" in str(row.render())
        app.state.terminal_only_progress = None
        app.run_screen.flush_log()
        await pilot.pause()
        assert not row.has_class("-shown")
