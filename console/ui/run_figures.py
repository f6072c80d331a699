"""What a run's screen says, computed from its RunState: no Textual here (the "pure" contract).

The panes and box titles of `RunScreen` draw these views and do no arithmetic on state, so a
title's words and how loud it is are tested without an app, and the single-run console and a
fleet node say the same things about a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size

from console.config import Config, MetricsConfig
from console.diagnose import Verdict
from console.model import ConnectionStatus, GpuReading, Sample, gpus_by_role
from console.observe.sampler import gpu_processes_unseen
from console.observe.textsafe import sanitize
from console.state import RATE_UNITS, RunState
from console.stall import Silence, is_stalled
from console.units import counted, format_duration, format_indices
from console.verdicts import level as verdict_level

if TYPE_CHECKING:  # console.slowness loads with the first diagnosis: the first frame does not wait for it
    from console.slowness import Baseline, Slowdown

#: The window of "current / average / min" throughput figures.
RATE_WINDOW_S = 300.0
#: Values kept for the sparklines (they summarise to their width).
SPARK_POINTS = 240
#: The last rate is shown as stale past this many usual intervals (and at least this long).
STALE_RATE_GAPS = 3
STALE_RATE_MIN_S = 10.0
#: Steps seen over this window give the ETA.
ETA_WINDOW_S = 600.0
ETA_LINES_SCANNED = 2000
#: A log that grew less than this long ago "grew just now".
JUST_NOW_S = 2.0


@dataclass(frozen=True, slots=True)
class BoxTitles:
    """A pane's border: its title, its subtitle and how loud the box is (`ok`, `warn`, `crit`)."""

    title: str
    subtitle: str = ""
    level: str = "ok"


@dataclass(frozen=True, slots=True)
class StatusView:
    """Everything the status bar says, already worded."""

    host: str
    container: str | None
    run: str
    status: ConnectionStatus
    connection: str
    """ConnectionState.describe(now): `connected`, `reconnecting in 4 s: …`, `failed: …`."""
    sample_age_s: int | None
    verdict: str | None = None
    verdict_summary: str = ""
    verdict_level: str = "ok"
    """`ok`, `warn` or `crit`: how bad the verdict is."""
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ThroughputView:
    """What the throughput pane shows (the pane does no arithmetic on state)."""

    unit: str | None
    """`tok/s`, `samples/s`, `it/s`; None before the log gave any rate."""
    rates: tuple[float, ...] = ()
    """Recent rate values, oldest first (the sparkline)."""
    current: float | None = None
    average: float | None = None
    minimum: float | None = None
    baseline: float | None = None
    losses: tuple[float, ...] = ()
    nonfinite_loss: float | None = None
    """The latest loss written, when it is nan or inf: shown instead of the last finite one."""
    step: int | None = None
    total_steps: int | None = None
    eta_s: float | None = None
    slow_fraction: float = 0.8
    stale_s: float | None = None
    """Seconds since the last rate was written when it is overdue: `current` is then history, not now."""
    per_iteration: bool = False
    """The bar prints seconds per iteration (`1.31s/it`): show the rate that way too."""
    lr: float | None = None
    grad_norm: float | None = None
    mfu: float | None = None
    learned: bool = False
    """The baseline is the run's best sustained rate (its journal's or its log's), not the config's."""
    slow_from: int | None = None
    """Where in `rates` the slowdown the diagnosis found began (0: before them); None when it found none."""
    slow_for_s: float | None = None
    """How long ago the slowdown's first rate was written."""


@dataclass(frozen=True, slots=True)
class ProgressBarView:
    """What the log's live progress line shows (the widget does no arithmetic)."""

    text: str | None = None
    """The bar's latest redraw, or None when no bar is drawing."""
    written_ago_s: float | None = None
    terminal_only: str | None = None
    """`<framework>: <the setting that puts progress into the log>` when the log cannot show progress."""


@dataclass(frozen=True, slots=True)
class LogReading:
    """Where the operator is in the log pane: what its titles are computed from."""

    filter_text: str = ""
    search_text: str = ""
    line_count: int = 0
    """Lines shown (under a filter: the lines that match)."""
    error: str | None = None
    """Why the filter or search regex does not compile."""
    following: bool = True
    unseen: int = 0
    """Lines arrived since following paused."""


@dataclass(frozen=True, slots=True)
class GpuGraph:
    """One figure of one GPU row over the readings held."""

    label: str
    """`util`, `mem`, `power` or `SM` (GPU_GRAPH_FIGURES)."""
    levels: tuple[float | None, ...]
    """Each reading's value as a share of the figure's scale (0–1), oldest first; None where it was not read."""
    latest: str
    """The newest value in words: `98%`, `640W`, `1980MHz`; `—` when it was not read."""


@dataclass(frozen=True, slots=True)
class GpuGraphRow:
    """One row of the GPU pane's graphs: a GPU, or in compact form the mean of a role's GPUs."""

    label: str
    """`3`, or `target 0-4` for a role."""
    role: str
    graphs: tuple[GpuGraph, ...]
    error: str | None = None
    """The GPU's fault in its newest reading (a role's row names none: its GPUs' figures are the mean of those read)."""


@dataclass(frozen=True, slots=True)
class GpuGraphsView:
    """What the GPU pane draws in its graph view: each row's figures over the same readings."""

    rows: tuple[GpuGraphRow, ...] = ()
    span_s: float = 0.0
    """From the oldest reading held to the newest (target clock)."""


#: The graphs of a GPU row, in order: (label, the reading's field, its unit); the SM clock only where the source reads it.
GPU_GRAPH_FIGURES = (("util", "utilization_pct", "%"), ("mem", "memory_pct", "%"), ("power", "power_w", "W"),
                     ("SM", "sm_clock_mhz", "MHz"))


def _graph_levels(gpu: GpuReading, figures: Sequence[tuple[str, str, str]], sm_scale: float | None) -> tuple[float | None, ...]:
    """A reading's figures as shares of their scales: 100 %, 100 %, its power limit, the highest SM clock held."""
    scales = {"utilization_pct": 100.0, "memory_pct": 100.0, "power_w": gpu.power_limit_w, "sm_clock_mhz": sm_scale}
    return tuple(None if (value := getattr(gpu, field)) is None or not scales[field] else value / scales[field]
                 for _, field, _ in figures)


def _latest_text(field: str, unit: str, gpus: tuple[GpuReading, ...]) -> str:
    """The newest figure of `gpus` (the mean, for a role) in words: `98%`, `640W`, `1980MHz`, `—` unread."""
    values = [value for gpu in gpus if not gpu.error and (value := getattr(gpu, field)) is not None]
    return f"{sum(values) / len(values):.0f}{unit}" if values else "—"


def _mean(values: list[float | None]) -> float | None:
    read = [value for value in values if value is not None]
    return sum(read) / len(read) if read else None


def gpu_graphs(history: Sequence[tuple[float, tuple[GpuReading, ...]]], roles: dict[int, str], *, by_role: bool) -> GpuGraphsView:
    """Each GPU's utilisation, memory, power and SM clock over `history` (RunState.gpu_history), as
    shares of their scales, one row a GPU of the newest reading; `by_role`: one row a role, the mean
    of its GPUs read. The SM clock is drawn only where a reading held gives it, against the highest held."""
    if not history:
        return GpuGraphsView()
    newest = history[-1][1]
    clocks: dict[int, float] = {}
    for _, gpus in history:
        for gpu in gpus:
            if gpu.sm_clock_mhz:
                clocks[gpu.index] = max(clocks.get(gpu.index, 0.0), gpu.sm_clock_mhz)
    top_clock = max(clocks.values(), default=None)
    figures = GPU_GRAPH_FIGURES if top_clock is not None else GPU_GRAPH_FIGURES[:-1]
    # Each reading of each GPU as levels, by GPU index; a reading of a GPU not in the newest sample is left out.
    series: dict[int, list[tuple[float | None, ...]]] = {gpu.index: [] for gpu in newest}
    blank = (None,) * len(figures)
    for _, gpus in history:
        read = {gpu.index: gpu for gpu in gpus}
        for index, levels in series.items():
            reading = read.get(index)
            sm_scale = clocks.get(index, top_clock)
            levels.append(blank if reading is None or reading.error else _graph_levels(reading, figures, sm_scale))
    if by_role:
        rows = []
        for group in gpus_by_role(newest, roles):
            members = [series[gpu.index] for gpu in group.gpus]
            means = [tuple(_mean([m[n][k] for m in members]) for k in range(len(figures))) for n in range(len(history))]
            graphs = tuple(GpuGraph(label, tuple(m[k] for m in means), _latest_text(field, unit, group.readable))
                           for k, (label, field, unit) in enumerate(figures))
            name = f"{group.role or 'GPUs'} {format_indices([gpu.index for gpu in group.gpus])}"
            rows.append(GpuGraphRow(name, group.role, graphs))
    else:
        rows = [
            GpuGraphRow(
                str(gpu.index), roles.get(gpu.index, ""),
                tuple(GpuGraph(label, tuple(levels[k] for levels in series[gpu.index]), _latest_text(field, unit, (gpu,)))
                      for k, (label, field, unit) in enumerate(figures)),
                gpu.error,
            )
            for gpu in newest
        ]
    return GpuGraphsView(tuple(rows), history[-1][0] - history[0][0])


def graph_columns(levels: Sequence[float | None], width: int) -> list[float | None]:
    """`levels` in `width` columns, the newest at the right: the mean of each of `width` equal slices
    (an idle dip shows, where a peak would hide it); with fewer levels than columns, one a column and
    blanks (None) before them. A slice with nothing read is None."""
    count = len(levels)
    if width <= 0:
        return []
    if count <= width:
        return [None] * (width - count) + list(levels)
    bounds = [count * n // width for n in range(width + 1)]
    return [_mean(list(levels[start:end])) for start, end in zip(bounds, bounds[1:])]


def gpu_titles(sample: Sample | None, node: str | None = None, *, graphs_span_s: float | None = None) -> BoxTitles:
    """The GPUs box: source, read errors, GPU faults and unseen processes, loudest first; in the
    graph view (`graphs_span_s`), the time the graphs cover."""
    title = f"GPUs · {node}" if node else "GPUs"
    if sample is None:
        return BoxTitles(title, "waiting for the first sample")
    if sample.gpu_error:
        return BoxTitles(title, f"GPU read failed: {sample.gpu_error}", "crit")
    parts = []
    if sample.gpus:
        names = {gpu.name for gpu in sample.gpus}
        parts.append(f"{len(sample.gpus)} × {names.pop()}" if len(names) == 1 else f"{len(sample.gpus)} GPUs")
    parts.append(sample.gpu_source)
    level = "ok"
    if any(gpu.error for gpu in sample.gpus):
        parts.append("GPU fault")
        level = "crit"
    if gpu_processes_unseen(sample):
        parts.insert(0, "processes unseen (PID namespace)")
        level = "warn" if level == "ok" else level
    if graphs_span_s is not None:
        parts.append(f"graphs of the last {format_duration(graphs_span_s)}")
    return BoxTitles(title, " · ".join(parts), level)


def process_titles(state: RunState, silence: Silence, now: float) -> BoxTitles:
    """The processes box: how many of the run's processes live, and when the log last grew
    (loud when the run is stalled as the verdict judges it, console.stall.is_stalled, or no process is alive)."""
    sample = state.latest
    # Counted from the sample: the pane folds a compile's helpers into one row.
    alive = sum(p.state not in ("Z", "X") for p in sample.processes) if sample is not None else 0
    if sample is None:
        title = "Processes"
    elif sample.process_error:
        title = f"Processes · {sample.process_error}"
    else:
        title = f"Processes · {alive} alive"
    stalled = is_stalled(silence, state.rate_silent_s(now), state.rate_interval_s())
    silent = silence.silent_s
    if silent is None:
        grew = "no log file" if sample is not None and sample.log is not None and not sample.log.exists else "log not read yet"
    else:
        # Under 2 s reads "just now": a run writing every second would flip 0s/1s, and each
        # flip repaints the whole box with the table in it. Never past the stall limit, though.
        just_now = silent < JUST_NOW_S and not stalled
        grew = "log grew just now" if just_now else f"log grew {format_duration(silent)} ago"
    level = "crit" if stalled else "warn" if sample is not None and alive == 0 else "ok"
    return BoxTitles(title, grew, level)


def log_titles(state: RunState, configured_log: str | None, reading: LogReading, *, extra: str = "") -> BoxTitles:
    """The log box: its path, then the filter, search, following and problems (`extra` last: a
    fleet node's pacing); loud when lines wait unseen."""
    # The path comes from the target (a file's name may hold escape sequences or markup).
    path = sanitize(state.log_path or configured_log or "no log configured", 300)[0]
    parts = []
    if reading.filter_text:
        parts.append(f"filter “{reading.filter_text}”: {reading.line_count} lines")
    if reading.search_text:
        parts.append(f"search “{reading.search_text}” · n/N")
    if reading.error:
        parts.append(reading.error)
    missing = missing_log_note(state)
    if missing is not None:
        parts.append(missing)
    elif reading.following:
        parts.append("following")
    else:
        parts.append(f"paused · {counted(reading.unseen, 'new line')} · f to follow" if reading.unseen else "paused · f to follow")
    problems = len(state.spans.problems)
    if problems:
        parts.append(f"{problems} problem{'s' if problems != 1 else ''} · {'[/]' if reading.search_text else 'n/N'} jump")
    if extra:
        parts.append(extra)
    level = "warn" if missing is not None or (not reading.following and reading.unseen > 0) else "ok"
    return BoxTitles(f"Log · {path}", " · ".join(parts), level)


def missing_log_note(state: RunState) -> str | None:
    """What the log box says while the latest sample finds no log file: that it is awaited, and where the
    run's stdout goes instead (what the agent read of its fd 1); None while the file is there or unknown."""
    sample = state.latest
    if sample is None or sample.log is None or sample.log.exists:
        return None
    live = [p for p in sample.processes if p.state not in ("Z", "X")]
    programs = [p for p in live if p.role in ("main", "rank")] or live
    outputs = sorted({p.stdout for p in programs if p.stdout})
    note = "no such file yet: waiting for it"
    if outputs:
        where = sanitize(outputs[0], 300)[0]
        note += f"; the run's stdout goes to {where}" + (f" (and {len(outputs) - 1} more)" if len(outputs) > 1 else "")
    return note


def status_view(config: Config, state: RunState, verdict: Verdict | None, *, read_only: bool, now: float) -> StatusView:
    """The status bar: where the run is, the link to it, the sample's age and the verdict."""
    target = config.target
    container = target.container.describe() if target.container else None
    connection = state.connection
    # Whole seconds rounded up: 0.2 s and 0.9 s both read 1 s, so at 1 Hz the line holds still.
    age = None if state.last_sample_at is None else math.ceil(max(0.0, now - state.last_sample_at))
    return StatusView(
        host=target.host or "this machine",
        container=container,
        run=config.run.name,
        status=connection.status,
        connection=connection.describe(now),
        sample_age_s=age,
        verdict=verdict.name if verdict else None,
        verdict_summary=verdict.summary if verdict else "",
        verdict_level=verdict_level(verdict.name) if verdict else "ok",
        read_only=read_only,
    )


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


def throughput_view(
    state: RunState, metrics: MetricsConfig, now: float, found: Slowdown | None = None, learned: Baseline | None = None,
) -> ThroughputView:
    """The throughput pane's figures: rate against baseline over RATE_WINDOW_S, loss, step and ETA; with
    the slowdown the diagnosis `found`, its baseline and where it began among the values shown (judged
    again on the newest values, console.slowness.slowdown: a rate back above the line ends it). Without
    a baseline in the config, the rate is shown against `learned`, the one the verdict measures it by
    (the run's best sustained rate), slow or not."""
    metric = state.rate_metric
    values = state.values(metric, newest=SPARK_POINTS) if metric else []
    recent = (state.values(metric, since_s=RATE_WINDOW_S) or values[-1:]) if metric else []
    bar = state.progress
    baseline = metrics.baseline(metric) if metric else metrics.baseline_tokens_per_s
    from_run = False
    if baseline is None and learned is not None and learned.source != "config":
        baseline, from_run = learned.rate, True
    slow_from = slow_for_s = None
    now_slow = None
    if found and metric:
        from console.slowness import slowdown  # the diagnosis that found it loaded it

        now_slow = slowdown(state.values(metric), found.baseline, found.fraction)
    if now_slow is not None and metric is not None:
        baseline = now_slow.baseline.rate
        slow_from = max(len(values) - now_slow.below_for, 0)
        slow_for_s = max(0.0, now - state.series[metric][-now_slow.below_for].time)
    return ThroughputView(
        unit=RATE_UNITS[metric] if metric else None,
        per_iteration=metric == "it_per_s" and bar is not None and bar.rate_unit == "s/it",
        rates=tuple(values),
        current=values[-1] if values else None,
        average=sum(recent) / len(recent) if recent else None,
        minimum=min(recent) if recent else None,
        baseline=baseline,
        learned=now_slow.baseline.source != "config" if now_slow is not None else from_run,
        slow_from=slow_from,
        slow_for_s=slow_for_s,
        stale_s=rate_stale_s(state, now) if metric else None,
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


def progress_bar_view(state: RunState, now: float) -> ProgressBarView:
    """The live progress line: the bar's redraw and its age, or why the log shows no progress."""
    bar = state.progress
    if bar is not None:
        return ProgressBarView(text=bar.text, written_ago_s=max(0.0, now - bar.time))
    hidden = state.terminal_only_progress
    return ProgressBarView(terminal_only=f"{hidden.framework}: {hidden.advice}" if hidden else None)


# -- fitting a line to its width ----------------------------------------------------------------
# A figure is drawn whole or not at all: a narrow terminal drops the least useful figures and
# elides prose (a verdict's reason, a link's detail), never the unit after a number.

#: The least room a piece of prose is elided into: below it, it is left out.
MIN_ELIDED = 12


def elide(text: str, room: int) -> str:
    """`text` in `room` cells: whole, or cut with an ellipsis; empty below MIN_ELIDED cells."""
    if cell_len(text) <= room:
        return text
    if room < MIN_ELIDED:
        return ""
    return set_cell_size(text, room - 1).rstrip() + "…"


def kept_parts(widths: Sequence[int], ranks: Sequence[int], room: int) -> tuple[bool, ...]:
    """Which parts of a line `room` cells wide to keep: parts are dropped whole, highest rank
    first (among equals, the last), until the rest fits; rank 0 is never dropped."""
    kept = [True] * len(widths)
    total = sum(widths)
    for _, index in sorted(((rank, index) for index, rank in enumerate(ranks) if rank), reverse=True):
        if total <= room:
            break
        kept[index] = False
        total -= widths[index]
    return tuple(kept)


#: The process table's columns (heading, key) and their drop ranks (0: always shown; the highest
#: goes first): a narrow pane shows fewer columns, each whole.
PROCESS_COLUMNS = (("", "mark"), ("PID", "pid"), ("role", "role"), ("state", "state"), ("CPU%", "cpu"), ("RSS", "rss"),
                   ("thr", "threads"), ("elapsed", "elapsed"), ("command", "command"))
PROCESS_COLUMN_RANKS = {"mark": 0, "pid": 0, "role": 0, "state": 0, "cpu": 1, "elapsed": 2, "rss": 3, "threads": 4, "command": 5}
#: Cells a column takes besides its text: a space either side.
COLUMN_PADDING = 2


def process_column_widths(widths: Sequence[int], room: int) -> tuple[int | None, ...]:
    """The width each process column (PROCESS_COLUMNS) is drawn at in a table `room` cells wide,
    None for a column left out. `widths` are the widest cells. The figures that fit are chosen
    with the role and the command at MIN_ELIDED cells; what is left widens the role (elided
    until then), then the command, last."""
    keys = [key for _, key in PROCESS_COLUMNS]
    role, command = keys.index("role"), keys.index("command")
    least = list(widths)
    least[role], least[command] = min(widths[role], MIN_ELIDED), min(widths[command], MIN_ELIDED)
    kept = kept_parts([width + COLUMN_PADDING for width in least], [PROCESS_COLUMN_RANKS[key] for key in keys], room)
    shown: list[int | None] = [width if keep else None for width, keep in zip(least, kept)]
    spare = room - sum(width + COLUMN_PADDING for width in shown if width is not None)
    for index in (role, command):
        if shown[index] is not None and spare > 0:
            grown = min(widths[index], least[index] + spare)
            spare -= grown - least[index]
            shown[index] = grown
    return tuple(shown)


def role_cell(label: str, gpus: Sequence[int]) -> str:
    """A process's role as the table shows it: its GPUs as runs (`main · GPU 0–7`, not `0,1,…,7`)."""
    listed = f" · GPU {','.join(map(str, gpus))}"
    return label.removesuffix(listed) + f" · GPU {format_indices(list(gpus))}" if gpus and label.endswith(listed) else label


#: A header run: its text and the style it is drawn in (`brand`, `ok`, `warn`, `crit`, `dim`, `bold`, "" plain).
Run = tuple[str, str]
HEADER_SEPARATOR: Run = (" │ ", "dim")
CONNECTION_LEVELS = {
    ConnectionStatus.CONNECTED: "ok",
    ConnectionStatus.CONNECTING: "warn",
    ConnectionStatus.RECONNECTING: "warn",
    ConnectionStatus.FAILED: "crit",
}


def header_runs(view: StatusView, width: int) -> list[Run]:
    """The header in `width` cells: the verdict, read-only, the link, the sample's age and where
    the run is. What does not fit goes in this order: the verdict's reason (elided, then left
    out), the link's detail (elided), the word `connected` (its green dot stays), the run's name
    (its host stays); the verdict's name, read-only, the link's state and the host stay."""
    runs: list[Run] = []
    for terse_link, with_run in ((False, True), (True, True), (True, False)):
        runs = _header(view, width, terse_link=terse_link, with_run=with_run)
        if sum(cell_len(text) for text, _ in runs) <= width:
            break
    return runs


def _header(view: StatusView, width: int, *, terse_link: bool, with_run: bool) -> list[Run]:
    connected = view.status is ConnectionStatus.CONNECTED
    state, _, detail = view.connection.partition(": ")
    if view.sample_age_s is None:
        age: Run = ("no sample yet", "dim")
    else:
        age = (f"sample {view.sample_age_s} s ago", "dim" if view.sample_age_s < 5 else "warn" if view.sample_age_s < 30 else "crit")
    where = view.host + (f" · {view.container}" if view.container else "")
    level = CONNECTION_LEVELS[view.status]
    head: list[Run] = [(" ◆ ", "brand"), (view.verdict, view.verdict_level) if view.verdict else ("pulse", "brand")]
    tail: list[Run] = [HEADER_SEPARATOR]
    if view.read_only:
        tail += [("read-only", "warn"), HEADER_SEPARATOR]
    link_at = len(tail)
    link = "●" if connected and terse_link else f"{'●' if connected else '○'} {state}"
    tail += [(link, level), HEADER_SEPARATOR, age, HEADER_SEPARATOR]
    tail += [(view.run, "bold"), (f" on {where}", "")] if with_run else [(where, "")]
    used = sum(cell_len(text) for text, _ in head + tail)
    if detail:
        shown = elide(f": {detail}", width - used)
        tail.insert(link_at + 1, (shown, level))
        used += cell_len(shown)
    if view.verdict and view.verdict_summary:
        head.append((elide(f": {view.verdict_summary}", width - used), ""))
    return [run for run in head + tail if run[0]]


#: A key hint: the key as shown (`?`, `^p`) and what it does.
KeyHint = tuple[str, str]
#: Cells between two hints on a line.
HINT_GAP = 2


def key_hint_lines(hints: Sequence[KeyHint], width: int) -> list[list[KeyHint]]:
    """The footer's hints wrapped to `width`: in order, as many to a line as fit whole (each
    `key description`, HINT_GAP apart, after a leading space); no hint is ever cut."""
    lines: list[list[KeyHint]] = []
    used = width
    for hint in hints:
        size = cell_len(f"{hint[0]} {hint[1]}")
        if lines and used + HINT_GAP + size <= width:
            lines[-1].append(hint)
            used += HINT_GAP + size
        else:
            lines.append([hint])
            used = 1 + size
    return lines
