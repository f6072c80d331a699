"""The console and its journal: what one console saw, the next one opens with."""

from __future__ import annotations

import dataclasses

from console.journal.store import Journal
from console.journal.watch import RunWatch
from console.state import RunState
from console.ui.app import PulseApp
from tests.snapshot_apps.scenarios import FakeClock, build_state, make_config

SIZE = (120, 40)


def console(config, state: RunState, path, **kwargs) -> PulseApp:
    app = PulseApp(config, state, watch=lambda app: RunWatch(config, state, Journal(path), []), **kwargs)
    app.animation_level = "none"
    return app


async def test_a_console_reopened_on_a_run_gets_its_verdict_and_throughput_back(tmp_path):
    config = make_config()
    path = tmp_path / "run.sqlite3"
    clock = FakeClock()
    seen = build_state("hang", clock)
    state = RunState(clock=clock)
    first = console(config, state, path, clock=clock)
    async with first.run_test(size=SIZE) as pilot:
        # What a monitor would have fed it since the console opened.
        state.add_lines(seen.lines)
        state.add_sample(seen.latest)
        state.add_sample(dataclasses.replace(seen.latest, time=seen.latest.time + 1))  # a diagnosis compares two
        first.watch.observe()
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

    second = console(config, RunState(), path)  # nothing sampled yet: all it shows comes from the journal
    async with second.run_test(size=SIZE) as pilot:
        assert second.verdict.name == "hung"
        assert second.throughput_view().rates == tuple(m.median for m in minutes)
        assert [e.kind for e in second.state.events] == ["verdict"]
        await pilot.press("q")
