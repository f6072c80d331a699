"""Repainting only what changed: log lines drawn on the frame after they arrive (one batch for
what arrives before that frame), a GPU's new reading repaints its own row, unchanged titles cost
nothing, a changed title repaints the border rows that show it."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.geometry import Region

from console.model import LogLine
from console.observe.lines import classify_line
from console.ui.panes.gpu_pane import GpuPane
from console.ui.panes.log_pane import LogPane
from console.ui.panes.throughput_pane import ThroughputPane
from console.ui.panes.titled_box import TitledBox
from tests.snapshot_apps.scenarios import NOW, make_app

SIZE = (120, 40)


def report_lines(app, texts: list[str]) -> None:
    """What the Monitor does with a follower's batch: into the state, then the on-change callback."""
    first = app.state.lines_received + 1
    app.state.add_lines(LogLine(first + i, text, classify_line(text), time=NOW) for i, text in enumerate(texts))
    app.run_screen.mark_changed()


async def until_flushed(pilot, pane: LogPane) -> None:
    for _ in range(200):
        await pilot.pause(0.01)
        if pane.last_number == pilot.app.state.lines_received:
            return


async def test_a_reported_line_is_on_screen_after_one_turn_of_the_loop():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        report_lines(app, ["step 424242 | loss 0.4242 | frame-aligned"])
        await pilot.pause()
        assert "frame-aligned" in app.export_screenshot()


async def test_lines_reported_within_one_frame_reach_the_pane_as_one_batch():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        pane = app.query_one(LogPane)
        batches: list[int] = []
        append = pane.append
        pane.append = lambda lines: (batches.append(len(lines)), append(lines))
        report_lines(app, ["step 1 | loss 1.0"] * 3)
        report_lines(app, ["step 2 | loss 0.9"] * 4)
        await until_flushed(pilot, pane)
        assert batches == [7]
        report_lines(app, ["step 3 | loss 0.8"] * 2)  # the flush after: the next frame, on its own
        await until_flushed(pilot, pane)
        assert batches == [7, 2]


async def test_a_line_right_after_a_sample_is_not_held_back_as_if_under_load():
    """Only log lines drawn within a frame are load (a flood, drawn LOADED_UPDATE_S apart): a sample's
    update just before a line must not make the line wait."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        held: list[float] = []
        set_timer = app.set_timer
        app.set_timer = lambda delay, callback, *a, **k: (held.append(delay), set_timer(delay, callback, *a, **k))[1]
        sample = app.state.latest
        app.state.add_sample(dataclasses.replace(sample, time=sample.time + 1))
        app.run_screen.update_pending()  # the sample's update runs, and the line comes within the same frame
        report_lines(app, ["step 7 | loss 0.7 | right after a sample"])
        await until_flushed(pilot, app.query_one(LogPane))
        assert held == []


async def test_a_new_reading_of_one_gpu_repaints_its_row_and_keeps_the_others():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        pane = app.query_one(GpuPane)
        drawn = dict(pane._cache)
        assert len(drawn) == len(pane.gpus) == 8
        gpus = list(pane.gpus)
        gpus[3] = dataclasses.replace(gpus[3], utilization_pct=7.0)
        pane.show(tuple(gpus), roles=pane.roles, own_pids=pane.own_pids, thresholds=pane.thresholds)
        assert 3 not in pane._cache
        assert all(pane._cache[row] is drawn[row] for row in range(8) if row != 3)
        await pilot.pause()
        assert "   7%" in pane._cache[3].text and pane._cache[3] is not drawn[3]


async def test_a_title_change_repaints_the_border_rows_not_the_pane_in_the_box():
    """Unchanged titles cost nothing; a subtitle that counts seconds ("log grew 12s ago") repaints
    the box's two border rows, and they draw as Textual's repaint of the whole box does."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        box = app.query_one("#processes-box", TitledBox)
        repainted: list[Region] = []
        exchange = box._exchange_repaint_regions
        box._exchange_repaint_regions = lambda: (regions := exchange(), repainted.extend(regions))[0]
        app.run_screen.refresh_panes()
        await pilot.pause()
        assert repainted == []

        box.set_titles("Processes · 3 alive", Text("log grew 12s ago"))
        await pilot.pause()
        width, height = box.outer_size
        assert sorted(repainted) == [Region(0, 0, width, 1), Region(0, height - 1, width, 1)]
        drawn = [list(strip) for strip in box.render_lines(box.outer_size.region)]
        box.refresh()
        assert [list(strip) for strip in box.render_lines(box.outer_size.region)] == drawn
        assert "log grew 12s ago" in "".join(segment.text for segment in drawn[-1])


async def test_a_new_sample_is_drawn_on_the_next_frame_not_the_next_tick():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        sample = app.state.latest
        gpus = (dataclasses.replace(sample.gpus[0], utilization_pct=3.0), *sample.gpus[1:])
        app.state.add_sample(dataclasses.replace(sample, time=sample.time + 1, gpus=gpus))
        app.run_screen.mark_changed()
        await pilot.pause()
        assert app.query_one(GpuPane).gpus == gpus


async def test_a_sparkline_repaints_only_when_a_cell_would_change():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        pane = app.query_one(ThroughputPane)
        values = [5.0, 1.0] * (2 * pane.size.width)  # four values a cell: each bucket is 5, 1, 5, 1
        pane.show_sparkline("rate-spark", values)
        shown = pane.sparklines["rate-spark"]
        # A last value that moves no bucket's maximum and neither end of the scale: no repaint.
        pane.show_sparkline("rate-spark", [*values[:-1], 2.0])
        assert pane.sparklines["rate-spark"] is shown
        pane.show_sparkline("rate-spark", [*values[:-1], 9.0])  # a new maximum: every bar rescales
        assert pane.sparklines["rate-spark"][-1] == 9.0


async def test_the_second_s_tick_draws_nothing_a_sample_just_drew_and_draws_the_bar_when_none_came():
    """Samples each second draw the ages, the figures and the bar's latest redraw: the tick then
    costs no frame of its own (one frame a second, not two); a second without a sample, it draws them."""
    from console.observe.progress import progress_line
    from console.ui.panes.progress_bar_line import ProgressBarLine
    from console.ui.screens import run_screen

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen, bar = app.run_screen, app.query_one(ProgressBarLine)
        sample = app.state.latest
        app.state.add_sample(dataclasses.replace(sample, time=sample.time + 1))
        screen.mark_changed()
        await pilot.pause()
        redraw = " 12%|█▏        | 120/1000 [00:12<01:30,  9.80it/s]"
        app.state.set_progress(progress_line(redraw, NOW))  # a redraw alone wakes no frame (Monitor._progress)
        screen.tick()
        assert "120/1000" not in str(bar.content)
        app.clock.advance(run_screen.TICK_AFTER_SAMPLE_S)
        screen.tick()
        assert "120/1000" in str(bar.content)


def new_sample(app, utilization_pct: float):
    """A sample one second on, GPU 0 at `utilization_pct`, into the state (not yet marked changed)."""
    sample = app.state.latest
    gpus = (dataclasses.replace(sample.gpus[0], utilization_pct=utilization_pct), *sample.gpus[1:])
    app.state.add_sample(dataclasses.replace(sample, time=sample.time + 1, gpus=gpus))
    return gpus


async def log_writing(pilot) -> None:
    """The log writes a line, drawn at once: from now on it is writing lines."""
    report_lines(pilot.app, ["step 1 | loss 1.0"])
    await until_flushed(pilot, pilot.app.query_one(LogPane))


async def test_a_sample_while_the_log_writes_lines_is_drawn_in_the_next_lines_frame():
    """A log writing a line a second or more often costs a frame per line, not one per line and one
    per sample: the sample waits for the next line, which is drawn at once as ever."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        pane, gpu_pane, screen = app.query_one(LogPane), app.query_one(GpuPane), app.run_screen
        await log_writing(pilot)
        shown = gpu_pane.gpus
        gpus = new_sample(app, 3.0)
        screen.mark_changed()
        await pilot.pause(0.1)  # past a loaded update's wait, within the sample's
        assert gpu_pane.gpus == shown and screen._held_sample is not None  # held: a line is due
        updates: list[bool] = []
        flush = screen.flush_log
        screen.flush_log = lambda: (updates.append(gpu_pane.gpus == shown), flush())[1]
        report_lines(app, ["step 2 | loss 0.9"])
        await until_flushed(pilot, pane)
        assert gpu_pane.gpus == gpus and updates == [True]  # one update drew the line and the sample


async def test_a_held_sample_is_drawn_by_its_deadline_when_no_line_comes(monkeypatch):
    from console.ui.screens import run_screen

    monkeypatch.setattr(run_screen, "SAMPLE_WAITS_FOR_LINE_S", 0.5)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await log_writing(pilot)
        screen = app.run_screen
        gpus = new_sample(app, 4.0)
        screen.mark_changed()
        await pilot.pause()
        held = screen._held_sample
        assert held is not None and app.query_one(GpuPane).gpus != gpus
        gpus = new_sample(app, 5.0)  # a second sample while the first waits: the deadline is the first's
        screen.mark_changed()
        await pilot.pause()
        assert screen._held_sample is held
        for _ in range(200):  # the deadline, then its frame (on a loaded box, later)
            await pilot.pause(0.02)
            if screen._held_sample is None:
                break
        assert app.query_one(GpuPane).gpus == gpus


async def test_a_sample_with_news_is_drawn_at_once_while_the_log_writes_lines():
    """Only a sample alone waits: a lost connection or another event beside it is drawn as it comes."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await log_writing(pilot)
        gpus = new_sample(app, 6.0)
        app.state.add_event("sampler", "nvidia-smi took 3.2 s")
        app.run_screen.mark_changed()
        await pilot.pause(0.1)  # past a loaded update's wait, within a held sample's
        assert app.query_one(GpuPane).gpus == gpus
