"""Numbers you can trust (issue 33, item 6): the loss pane says nan when the log does, and a
steady rate draws a flat line at mid height, not a floor that reads as zero."""

from __future__ import annotations

from console.config import MetricsConfig
from console.observe.lines import classify_line
from console.ui.panes.throughput_pane import ThroughputPane, sparkline_rows, steady_scale
from tests.snapshot_apps.scenarios import make_app


async def test_the_loss_pane_shows_nan_when_the_log_writes_nan():
    app = make_app("nan")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        shown = app.query_one(ThroughputPane).figures["loss"].plain
        assert shown.startswith("loss nan"), shown


def test_a_nan_loss_is_read_apart_from_the_finite_series():
    info = classify_line("step 7 | loss nan", MetricsConfig().patterns)
    assert info.loss is None and info.nonfinite_loss is not None and str(info.nonfinite_loss) == "nan"
    assert classify_line("step 8 | loss 2.5", MetricsConfig().patterns).nonfinite_loss is None


def _heights(rows: list[list[tuple[str, float | None]]]) -> set[float | None]:
    return {ratio for row in rows for _, ratio in row}


def test_a_steady_rate_is_a_flat_line_at_mid_height():
    steady = [500.0] * 60
    assert _heights(sparkline_rows(steady, 40, 2, steady_scale(steady))) == {0.5, None}
    assert sparkline_rows(steady, 40, 1, steady_scale(steady))[0] == [("▄", 0.5)] * 40


def test_a_few_percent_of_noise_is_a_few_percent_of_the_height():
    noisy = [14_000.0, 14_600.0] * 30
    heights = {ratio for row in sparkline_rows(noisy, 40, 2, steady_scale(noisy)) for _, ratio in row if ratio}
    assert max(heights) - min(heights) < 0.1  # min-max scaling drew it floor to ceiling


def test_a_real_change_still_spans_the_height_and_zeros_are_the_floor():
    assert steady_scale([100.0, 1000.0]) == (100.0, 1000.0)
    assert steady_scale([0.0, 0.0]) == (0.0, 1.0)
    assert sparkline_rows([0.0, 0.0], 4, 1, steady_scale([0.0, 0.0]))[0] == [("▁", 0.0)] * 4


async def test_without_a_baseline_in_the_config_the_rate_is_shown_against_its_best_sustained():
    from dataclasses import replace

    from tests.snapshot_apps.scenarios import make_config

    config = make_config()
    app = make_app("healthy", config=replace(config, metrics=replace(config.metrics, baseline_tokens_per_s=None)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        sample = app.state.latest
        app.clock.advance(2.0)
        app.state.add_sample(replace(sample, time=sample.time + 2.0))  # a verdict needs two samples
        app.cheap_diagnosis()
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert app.look.baseline is not None and app.look.baseline.source == "log"
        shown = app.query_one(ThroughputPane).figures["baseline"].plain
        assert " of its best sustained " in shown and "no baseline" not in shown, shown
