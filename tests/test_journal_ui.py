"""The console and its journal: what one console saw, the next one opens with."""

from __future__ import annotations

import dataclasses
import re

from console.journal.store import Journal
from console.journal.watch import RunWatch
from console.state import RunState
from console.ui.run_figures import throughput_view
from console.ui.app import PulseApp
from console.ui.dialogs.timeline_screen import BAND_MARKER, TimelinePlot, TimelineScreen
from tests.snapshot_apps.scenarios import FakeClock, build_state, make_config

SIZE = (120, 40)


def console(config, state: RunState, path, **kwargs) -> PulseApp:
    app = PulseApp(config, state, watch=lambda app: RunWatch(config, state, Journal(path), []), **kwargs)
    app.animation_level = "none"
    return app


def hung_run_console(path) -> tuple[PulseApp, RunState]:
    """A console on an empty state, and the state of a hung run (its lines, samples) to feed it."""
    clock = FakeClock()
    return console(make_config(), RunState(clock=clock), path, clock=clock), build_state("hang", clock)


async def open_timeline(pilot) -> TimelineScreen:
    """Press `h` and wait for the screen (the journal is read in a thread)."""
    await pilot.press("h")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, TimelineScreen)
    return screen


def plot_text(screen: TimelineScreen) -> str:
    """The timeline's plot as plotext draws it, without its colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", screen.query_one(TimelinePlot).plt.build())


async def test_a_console_reopened_on_a_run_gets_its_verdict_and_throughput_back(tmp_path):
    path = tmp_path / "run.sqlite3"
    first, seen = hung_run_console(path)
    state = first.state
    async with first.run_test(size=SIZE) as pilot:
        # What a monitor would have fed it since the console opened.
        state.add_lines(seen.lines)
        state.add_sample(seen.latest)
        state.add_sample(dataclasses.replace(seen.latest, time=seen.latest.time + 1))  # a diagnosis compares two
        first.run_watch.observe()
        first.cheap_diagnosis()
        assert first.verdict.name == "hung"
        seen_rates = first.state.values(first.state.rate_metric)
        await pilot.press("q")

    journal = Journal(path)
    verdicts = [e.data["verdict"] for e in journal.entries(kinds=("verdict",))]
    problems = journal.entries(kinds=("problem",))
    minutes = [m for m in journal.minutes() if m.metric == "tokens_per_s"]
    journal.close()
    assert verdicts == ["hung"]
    assert problems and all(p.data["problem"] for p in problems)
    assert minutes and min(m.min for m in minutes) == min(seen_rates) and max(m.max for m in minutes) == max(seen_rates)

    second = console(first.config, RunState(), path)  # nothing sampled yet: all it shows comes from the journal
    async with second.run_test(size=SIZE) as pilot:
        assert second.verdict.name == "hung"
        assert throughput_view(second.state, second.config.metrics, second.clock()).rates == tuple(m.median for m in minutes)
        assert [e.kind for e in second.state.events] == ["verdict"]
        await pilot.press("q")


async def test_a_journal_from_before_steps_restores_its_verdicts_key_as_a_step(tmp_path):
    """Journals written while a verdict carried its console key ("key": "R") reopen with that key's step."""
    path = tmp_path / "run.sqlite3"
    journal = Journal(path)
    journal.take_lease()
    old = {"verdict": "buffered", "summary": "stdout is block-buffered", "evidence": [], "next_step": "restart (R)", "key": "R"}
    journal.add("verdict", "buffered: stdout is block-buffered", old)
    journal.close()
    app = console(make_config(), RunState(), path)
    async with app.run_test(size=SIZE) as pilot:
        assert (app.verdict.name, app.verdict.step) == ("buffered", "restart")
        await pilot.press("q")


async def test_h_shows_the_timeline_and_enter_on_a_held_problem_jumps_the_log_there(tmp_path):
    from textual.widgets import OptionList

    app, seen = hung_run_console(tmp_path / "run.sqlite3")
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_lines(seen.lines)
        app.run_watch.observe()
        app.run_screen.flush_log()
        app.run_watch.journal.flush()
        screen = await open_timeline(pilot)
        problems = [i for i, e in enumerate(screen.window.entries) if e.kind == "problem"]
        assert problems
        first = screen.window.entries[problems[0]]
        assert screen.query_one(TimelinePlot).plt  # drawn by plotext
        events = screen.query_one(OptionList)
        events.highlighted = problems[0]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
        assert app.run_screen.log_pane.current_line == first.data["line"]
        assert not app.run_screen.log_pane.following


async def test_the_history_reads_in_clock_time_with_one_memory_line_for_the_gpus(tmp_path):
    """Issue 33, item 8: an x axis of "-0.0233 … 0.0000" with no unit, and sixteen GPU-memory
    high-water lines burying the verdicts."""
    from textual.widgets import OptionList

    from console.journal.report import clock_text

    app, seen = hung_run_console(tmp_path / "run.sqlite3")
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_lines(seen.lines)
        app.run_watch.observe()
        journal = app.run_watch.journal
        now = journal.clock()
        for n in range(8):  # two GPUs' memory climbing
            for gpu in (0, 1):
                journal.add("gpu_memory", f"GPU {gpu} memory high-water {40 + n} GiB",
                            {"gpu": gpu, "used_mib": (40 + n) * 1024}, at=now - 600 + n * 60)
        journal.flush()
        screen = await open_timeline(pilot)
        shown = [str(option.prompt) for option in screen.query_one(OptionList).options]
        memory = [text for text in shown if "gpu_memory" in text]
        assert len(memory) == 1 and "memory high-water GPU 0 47.0 GiB, GPU 1 47.0 GiB" in memory[0], memory
        plain = plot_text(screen)
        axis = next(row for row in plain.splitlines() if re.search(r"\d\d:\d\d", row))
        assert len(re.findall(r"\b\d\d:\d\d\b", axis)) >= 3, plain  # clock-time ticks, not hours before now
        assert clock_text(screen.window.end)[11:13] in axis or clock_text(screen.window.start)[11:13] in axis
        assert "UTC" in plain and "-0.0" not in plain
        assert not re.search(r"\d\.\d{4,}", plain), plain  # rounded axes: no five decimals of noise


async def test_h_plots_the_values_the_console_holds_and_the_bands_below_them(tmp_path):
    """A console open two minutes has two minutes in its journal: `h` drew a straight line through
    them, under a block where the verdict was slow. It draws each value it holds, the band over none."""
    from console.journal.report import timeline_view

    app, seen = hung_run_console(tmp_path / "run.sqlite3")
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_lines(seen.lines)
        app.run_watch.observe()
        journal = app.run_watch.journal
        held = app.run_watch.recorder.held_points()["tokens_per_s"]
        journal.add("verdict", "slow: 9.3K tok/s", {"verdict": "slow"}, at=held[len(held) // 2][0])  # over the second half
        journal.flush()
        screen = await open_timeline(pilot)
        rates = app.state.values("tokens_per_s")
        assert len(rates) == 120 and len({m.minute for m in screen.window.minutes}) <= 5
        view = timeline_view(screen.window, screen.held_points)
        assert view.rate[1] == tuple(rates)
        plain = plot_text(screen)
        strip = [row for row in plain.splitlines() if BAND_MARKER * 3 in row]
        assert len(strip) == 1 and "slow" in strip[0]  # the band, labelled with its verdict
        assert not re.search("[\u2801-\u28ff]", strip[0]), strip  # below the lines, none hidden under it
