"""RunState's series windows: read back from the newest point, equal to filtering the whole series."""

from __future__ import annotations

from dataclasses import replace

from console.config import MetricsConfig
from console.model import LogLine
from console.observe.lines import classify_line
from console.state import SAMPLE_WINDOW_S, RunState
from tests.real_captures import Capture


def fed_state(count: int, every_s: float = 1.0) -> tuple[RunState, list[float]]:
    """A state that received `count` Lightning-style throughput lines, one every `every_s`."""
    now = [0.0]
    state = RunState(max_points=50, clock=lambda: now[0])
    patterns = MetricsConfig().patterns
    rates = []
    for n in range(count):
        rate = 1000.0 + n
        text = f"Epoch 0:  {n}%| {n}/100 [00:{n:02d}<00:10, {rate:.1f}it/s, loss={2.0 - n / 100:.3f}]"
        state.add_lines([LogLine(n + 1, text, classify_line(text, patterns), time=n * every_s)])
        rates.append(rate)
        now[0] = n * every_s
    return state, rates


def test_windows_equal_the_whole_series_filtered():
    state, rates = fed_state(80)
    metric = state.rate_metric
    held = rates[-50:]  # max_points
    assert state.values(metric) == held
    assert state.values(metric, newest=7) == held[-7:]
    assert state.values(metric, newest=500) == held
    assert state.values(metric, since_s=9.5) == held[-10:]  # points at 70..79 s, now 79 s
    assert state.values(metric, since_s=9.5, newest=3) == held[-3:]
    assert state.values(metric, since_s=0.0) == held[-1:]
    assert state.latest_value(metric) == held[-1]
    assert state.latest_value("loss") == state.values("loss")[-1]


def test_an_empty_series_has_no_values():
    state = RunState()
    assert state.values("loss", newest=5) == [] and state.values("loss", since_s=60) == []
    assert state.latest_value("loss") is None


def test_the_samples_held_are_the_verdicts_window_not_an_hour():
    """The verdicts compare the newest sample with one ~10 s older; an hour of them at 1 Hz held
    ~25 MB that nothing read. A pause in sampling still leaves the two newest to compare."""
    _, sample = Capture("torchrun_hang").samples()  # two H200s and a torchrun tree, as captured
    state = RunState()
    for second in range(3600):
        state.add_sample(replace(sample, time=sample.time + second))
    assert state.samples_received == 3600
    assert [held.time - sample.time for held in state.samples] == [float(s) for s in range(3599 - int(SAMPLE_WINDOW_S), 3600)]
    state.add_sample(replace(sample, time=sample.time + 3599 + 10 * SAMPLE_WINDOW_S))
    assert len(state.samples) == 2 and state.latest.time == sample.time + 3599 + 10 * SAMPLE_WINDOW_S


def _step_lines(steps: range, time_of, total: int) -> list[LogLine]:
    patterns = MetricsConfig().patterns
    texts = [f"step {n}/{total} | loss 2.5000 | 500 tok/s" for n in steps]
    return [LogLine(n, text, classify_line(text, patterns), time=time_of(n)) for n, text in zip(steps, texts)]


def test_the_eta_is_the_step_rate_over_write_times_not_the_backlogs_arrival():
    """Issue 33: at 0.5 s/step, step 621 of 100,000 showed "ETA 23m49s": the backlog, all dated by
    the log's mtime at start-up, was counted as 620 steps written in the seconds since."""
    from console.ui.run_figures import step_eta_s

    state = RunState(max_points=50, clock=lambda: 0.0)
    state.add_lines(_step_lines(range(1, 621), lambda n: 1000.0, 100_000))  # the backlog: one mtime
    assert step_eta_s(state, 1000.0) is None  # one write: no rate yet, the pane says "ETA —"
    state.add_lines(_step_lines(range(621, 641), lambda n: 1000.0 + (n - 620) * 0.5, 100_000))
    eta = step_eta_s(state, 1010.0)
    assert eta is not None and abs(eta - (100_000 - 640) * 0.5) < 1.0  # ~13.8 h


def test_the_eta_reads_the_relaunched_runs_steps_only():
    from console.ui.run_figures import step_eta_s

    state = RunState(max_points=50, clock=lambda: 0.0)
    state.add_lines(_step_lines(range(1, 301), lambda n: n * 0.5, 10_000))  # the old run, 2 steps/s
    relaunch = [replace(line, number=line.number + 300)
                for line in _step_lines(range(1, 21), lambda n: 200.0 + n * 2.0, 10_000)]  # 0.5 step/s
    state.add_lines(relaunch)
    eta = step_eta_s(state, 240.0)
    assert eta is not None and abs(eta - (10_000 - 20) * 2.0) < 1.0
