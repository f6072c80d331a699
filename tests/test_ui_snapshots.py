"""Whole-screen snapshots of the console per scenario, size and theme (pytest-textual-snapshot).

Regenerate after a deliberate change with `pytest tests/test_ui_snapshots.py --snapshot-update`
and look at the SVGs before committing them.
"""

from __future__ import annotations

import pytest

from console.model import LogLine
from console.observe.lines import classify_line
from tests.snapshot_apps.scenarios import NOW, make_app

LARGE = (120, 40)
SMALL = (80, 24)


class TestScenarios:
    """One screen per diagnosed situation, as an operator would first see it."""

    @pytest.mark.parametrize("scenario", ["healthy", "oom", "hang"])
    def test_large(self, snap_compare, scenario):
        """120×40: every pane with room to spare."""
        assert snap_compare(make_app(scenario), terminal_size=LARGE)

    @pytest.mark.parametrize("scenario", ["healthy", "oom", "hang"])
    def test_small(self, snap_compare, scenario):
        """80×24: all eight GPUs still fit; the log gets what is left."""
        assert snap_compare(make_app(scenario), terminal_size=SMALL)

    @pytest.mark.parametrize("scenario", ["slow", "nan", "buffered", "dead"])
    def test_other_scenarios(self, snap_compare, scenario):
        """The remaining verdicts' screens at 120×40."""
        assert snap_compare(make_app(scenario), terminal_size=LARGE)

    def test_live_progress_bar(self, snap_compare):
        """A real HF Trainer log: its tqdm bar live under the log, the throughput pane reading it."""
        assert snap_compare(make_app("bar"), terminal_size=LARGE)


class TestThemes:
    """The healthy run in each shipped theme (pulse-dark, the default, is TestScenarios.test_large)."""

    @pytest.mark.parametrize("theme", ["pulse-light", "pulse-high-contrast"])
    def test_theme(self, snap_compare, theme):
        """Colours and bars readable in this theme."""
        assert snap_compare(make_app("healthy", theme=theme), terminal_size=LARGE)

    @pytest.mark.parametrize("theme", ["pulse-light", "pulse-high-contrast"])
    def test_problem_lines(self, snap_compare, theme):
        """Each problem kind stands out in this theme too."""
        assert snap_compare(make_app("nan", theme=theme), terminal_size=LARGE)


class TestInteractions:
    """Screens reached by keys."""

    def test_help(self, snap_compare):
        """`?` lists the wired keys by group."""
        assert snap_compare(make_app(), press=["question_mark"], terminal_size=LARGE)

    def test_filter(self, snap_compare):
        """`/` then text: only matching lines, the match highlighted."""

        async def run_before(pilot):
            await pilot.press("slash")
            pilot.app.query_one("#search").cursor_blink = False
            await pilot.press(*"error")
            await pilot.pause()

        assert snap_compare(make_app("nan"), run_before=run_before, terminal_size=LARGE)

    def test_paused_with_new_lines_and_a_problem_selected(self, snap_compare):
        """`N` from the end selects the last problem line; new lines are counted, not scrolled to."""

        async def run_before(pilot):
            await pilot.pause()
            await pilot.press("N")
            state = pilot.app.state
            first = state.lines_received + 1
            texts = [f"step {3000 + i}/50000 | loss 2.1 | 14.1K tok/s" for i in range(12)]
            state.add_lines(LogLine(first + i, text, classify_line(text), time=NOW) for i, text in enumerate(texts))
            pilot.app.flush_log()
            await pilot.pause()

        assert snap_compare(make_app("oom"), run_before=run_before, terminal_size=LARGE)
