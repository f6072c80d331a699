"""The console and its journal: what one console saw, the next one opens with."""

from __future__ import annotations

import dataclasses

from console.journal.store import Journal
from console.journal.watch import RunWatch
from console.state import RunState
from console.ui.run_figures import throughput_view
from console.ui.app import PulseApp
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

    from console.ui.dialogs.timeline_screen import TimelinePlot, TimelineScreen

    app, seen = hung_run_console(tmp_path / "run.sqlite3")
    async with app.run_test(size=SIZE) as pilot:
        app.state.add_lines(seen.lines)
        app.run_watch.observe()
        app.run_screen.flush_log()
        app.run_watch.journal.flush()
        await pilot.press("h")
        await app.workers.wait_for_complete()  # the journal is read in a thread
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
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
