"""One run's four panes (GPUs, processes, throughput, log): their layout and what they show.

Shared by the single-run console (`PulseApp`) and the fleet console's node screen, so both
compute a run's figures from its RunState the same way.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input

from console.config import MetricsConfig
from console.model import Sample
from console.state import RATE_UNITS, RunState
from console.ui.gpu_pane import GpuPane
from console.ui.log_pane import LogPane
from console.ui.process_pane import ProcessPane
from console.ui.progress_bar_line import ProgressBarLine, ProgressBarView
from console.ui.throughput_pane import ThroughputPane, ThroughputView
from console.ui.titled_box import TitledBox

#: The window of "current / average / min" throughput figures.
RATE_WINDOW_S = 300.0
#: New log lines and samples go to the panes at most once a frame (Textual draws at most 60 a
#: second): they are on screen the frame after they arrive, and a flood is written in batches.
FRAME_S = 1 / 60
#: Under load (an update less than a frame after the last), updates are spaced this far apart
#: instead: a flood is drawn 20 times a second, so drawing it does not starve the keys.
LOADED_UPDATE_S = 0.05
#: Values kept for the sparklines (they summarise to their width).
SPARK_POINTS = 240
#: The last rate is shown as stale past this many usual intervals (and at least this long).
STALE_RATE_GAPS = 3
STALE_RATE_MIN_S = 10.0
#: Steps seen over this window give the ETA.
ETA_WINDOW_S = 600.0
ETA_LINES_SCANNED = 2000


def compose_run_panes(max_lines: int, *, search: bool = False) -> ComposeResult:
    """The four boxed panes (ids `gpus`, `processes`, `throughput`, `log`, with the live progress line
    `progress-line` under the log); `search` adds the log filter box."""
    with TitledBox(id="gpus-box", classes="box"):
        yield GpuPane(id="gpus")
    with Horizontal(id="middle"):
        with TitledBox(id="processes-box", classes="box"):
            yield ProcessPane(id="processes")
        with TitledBox(id="throughput-box", classes="box"):
            yield ThroughputPane(id="throughput")
    with TitledBox(id="log-box", classes="box"):
        if search:
            yield Input(placeholder="show only lines containing…  (Enter keeps, Esc clears)", id="search")
        yield LogPane(id="log", max_lines=max_lines)
        yield ProgressBarLine(id="progress-line")


def own_pids(sample: Sample) -> frozenset[int]:
    """The run's PIDs as any namespace may number them (a driver in a container reports host PIDs)."""
    pids: set[int] = set()
    for process in sample.processes:
        pids.add(process.pid)
        pids.update(process.nspid)
    return frozenset(pids)


def step_eta_s(state: RunState, now: float) -> float | None:
    """Seconds until total_steps: the live bar's own estimate, else the step rate over the write
    times of the last ETA_WINDOW_S of lines held; None until two writes give a rate.

    Lines dated alike were one write (a backlog read at start-up is dated by the log's mtime): the
    step of a write is its last line's, so a backlog's hundreds of steps are not taken as written
    in the seconds since. A step that goes back (a relaunch) ends the window: before it, another run."""
    if state.step is None or not state.total_steps or state.step >= state.total_steps:
        return None
    bar = state.progress
    if bar is not None and bar.eta_s is not None:
        return max(0.0, bar.eta_s - max(0.0, now - bar.time))
    newest: tuple[float, int] | None = None
    oldest: tuple[float, int] | None = None
    for scanned, line in enumerate(reversed(state.lines)):
        step = line.info.step
        if scanned >= ETA_LINES_SCANNED:
            break
        if step is None:
            continue
        if newest is None or oldest is None:
            newest = oldest = (line.time, step)
        elif newest[0] - line.time > ETA_WINDOW_S or step > oldest[1]:
            break
        elif line.time != oldest[0]:
            oldest = (line.time, step)
    if newest is None or oldest is None or newest[0] <= oldest[0] or newest[1] <= oldest[1]:
        return None
    steps_per_s = (newest[1] - oldest[1]) / (newest[0] - oldest[0])
    return (state.total_steps - state.step) / steps_per_s


def rate_stale_s(state: RunState, now: float) -> float | None:
    """Seconds since the last rate line when that is well past the run's usual interval, else None:
    a hung run's last figure is not its current rate."""
    if state.last_rate_at is None:
        return None
    age = now - state.last_rate_at
    usual = state.rate_interval_s() or 1.0
    return age if age > max(STALE_RATE_MIN_S, STALE_RATE_GAPS * usual) else None


def throughput_view(state: RunState, metrics: MetricsConfig, now: float) -> ThroughputView:
    """The throughput pane's figures: rate against baseline over RATE_WINDOW_S, loss, step and ETA."""
    base = dict(
        losses=tuple(state.values("loss", newest=SPARK_POINTS)),
        nonfinite_loss=state.nonfinite_loss,
        step=state.step,
        total_steps=state.total_steps,
        eta_s=step_eta_s(state, now),
        slow_fraction=metrics.slow_fraction,
        lr=state.latest_value("lr"),
        grad_norm=state.latest_value("grad_norm"),
        mfu=state.latest_value("mfu"),
    )
    metric = state.rate_metric
    if metric is None:
        return ThroughputView(unit=None, baseline=metrics.baseline_tokens_per_s, **base)
    values = state.values(metric, newest=SPARK_POINTS)
    recent = state.values(metric, since_s=RATE_WINDOW_S) or values[-1:]
    bar = state.progress
    return ThroughputView(
        unit=RATE_UNITS[metric],
        per_iteration=metric == "it_per_s" and bar is not None and bar.rate_unit == "s/it",
        rates=tuple(values),
        current=values[-1],
        average=sum(recent) / len(recent),
        minimum=min(recent),
        baseline=metrics.baseline(metric),
        stale_s=rate_stale_s(state, now),
        **base,
    )


def progress_bar_view(state: RunState, now: float) -> ProgressBarView:
    """The live progress line: the bar's redraw and its age, or why the log shows no progress."""
    bar = state.progress
    if bar is not None:
        return ProgressBarView(text=bar.text, written_ago_s=max(0.0, now - bar.time))
    hidden = state.terminal_only_progress
    return ProgressBarView(terminal_only=f"{hidden.framework}: {hidden.advice}" if hidden else None)
