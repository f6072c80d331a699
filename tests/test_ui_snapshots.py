"""Whole-screen snapshots of the console per scenario, size and theme (pytest-textual-snapshot).

Regenerate after a deliberate change with `pytest tests/test_ui_snapshots.py --snapshot-update`
and look at the SVGs before committing them.
"""

from __future__ import annotations

import pytest

from console.model import LogLine
from console.observe.lines import classify_line
from tests.snapshot_apps.scenarios import NOW, diagnosed, launched_twice, make_app

LARGE = (120, 40)
MEDIUM = (100, 30)
SMALL = (80, 24)
#: Every scenario a run screen shows (the live progress bar's has a test of its own).
SCREENED = ["healthy", "hang", "slow", "buffered", "oom", "nan", "dead"]


async def with_verdict(pilot):
    """The header as it is once the cheap diagnosis has run: the verdict leads it."""
    diagnosed(pilot.app)
    await pilot.pause()


class TestScenarios:
    """One screen per diagnosed situation, as an operator would first see it."""

    @pytest.mark.parametrize("scenario", SCREENED)
    def test_large(self, snap_compare, scenario):
        """120×40, diagnosed: every GPU on its own line, every process column whole with its unit,
        the verdict's reason elided before the host, every key in the footer's grid."""
        assert snap_compare(make_app(scenario), run_before=with_verdict, terminal_size=LARGE)

    @pytest.mark.parametrize("scenario", SCREENED)
    def test_small(self, snap_compare, scenario):
        """80×24, compact: one GPU line per role with every unit, the process columns that fit
        (each whole), the throughput figures that fit, the footer's keys wrapped, none cut."""
        assert snap_compare(make_app(scenario), run_before=with_verdict, terminal_size=SMALL)

    def test_before_a_verdict(self, snap_compare):
        """120×40 before the first diagnosis: the header says pulse where the verdict will be."""
        assert snap_compare(make_app("healthy"), terminal_size=LARGE)

    @pytest.mark.parametrize("scenario", ["healthy", "hang"])
    def test_medium(self, snap_compare, scenario):
        """100×30: every GPU on its own line, nothing overflows, the verdict first in the header."""
        assert snap_compare(make_app(scenario), run_before=with_verdict, terminal_size=MEDIUM)

    def test_read_only_badge_at_120(self, snap_compare):
        """The verdict and the read-only badge both whole at 120 columns; R, w and k not offered."""
        from console.remote.target import LocalTarget

        app = make_app("hang", read_only=True, target=LocalTarget())
        assert snap_compare(app, run_before=with_verdict, terminal_size=LARGE)

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

    def test_timeline_of_a_short_slow_run(self, snap_compare, tmp_path):
        """`h` after two minutes: 60 rate and loss values each drawn, the slow band a labelled strip
        below them, clock-time ticks, one high-water line for the eight GPUs, both verdicts in view."""
        from tests.snapshot_apps.timeline import TimelineApp

        assert snap_compare(TimelineApp(tmp_path / "run.sqlite3"), terminal_size=LARGE)

    def test_help(self, snap_compare):
        """`?` lists the wired keys by group."""
        assert snap_compare(make_app(), press=["question_mark"], terminal_size=LARGE)

    def test_filter(self, snap_compare):
        """`\\` then text: only matching lines, the match highlighted."""

        async def run_before(pilot):
            await pilot.press("backslash")
            pilot.app.query_one("#search").cursor_blink = False
            await pilot.press(*"error")
            await pilot.pause()

        assert snap_compare(make_app("nan"), run_before=run_before, terminal_size=LARGE)

    def test_search_with_line_numbers(self, snap_compare):
        """`#` numbers the lines; `/` a regex: its matches highlighted, Enter on the nearest one above."""

        async def run_before(pilot):
            await pilot.press("number_sign", "slash")
            pilot.app.query_one("#search").cursor_blink = False
            await pilot.press(*r"loss 2\.4[0-4]", "enter")
            await pilot.pause()

        assert snap_compare(make_app("healthy"), run_before=run_before, terminal_size=LARGE)

    def test_diagnosis_at_80x24(self, snap_compare):
        """The hung run's diagnosis: the next step (one key, said once) above the evidence, alike GPUs on one line."""
        from console.ui.dialogs.diagnosis_screen import DiagnosisScreen

        async def run_before(pilot):
            diagnosed(pilot.app)
            await pilot.app.push_screen(DiagnosisScreen(pilot.app.verdict))
            await pilot.pause()

        assert snap_compare(make_app("hang"), run_before=run_before, terminal_size=SMALL)

    def test_paused_with_new_lines_and_a_problem_selected(self, snap_compare):
        """`N` from the end while following selects the last problem (at its OOM line); new lines are
        counted, not scrolled to."""

        async def run_before(pilot):
            await pilot.pause()
            await pilot.press("N")
            state = pilot.app.state
            first = state.lines_received + 1
            texts = [f"step {3000 + i}/50000 | loss 2.1 | 14.1K tok/s" for i in range(12)]
            state.add_lines(LogLine(first + i, text, classify_line(text), time=NOW) for i, text in enumerate(texts))
            pilot.app.run_screen.flush_log()
            await pilot.pause()

        assert snap_compare(make_app("oom"), run_before=run_before, terminal_size=LARGE)

    @pytest.mark.parametrize("size", [LARGE, SMALL], ids=["120x40", "80x24"])
    def test_tree_picker(self, snap_compare, size):
        """R when the match finds two trees: each tree's root, processes, GPU memory, age and what marks
        the run, then all roots; the cursor on the tree that alone looks like the run."""
        from console.ui.dialogs.tree_picker_screen import TreePickerScreen

        async def run_before(pilot):
            await pilot.app.push_screen(TreePickerScreen(launched_twice()))
            await pilot.pause()

        assert snap_compare(make_app("healthy"), run_before=run_before, terminal_size=size)

    @pytest.mark.parametrize("size", [LARGE, SMALL], ids=["120x40", "80x24"])
    def test_gpu_graphs(self, snap_compare, size):
        """`g` on a run slowed 160 s ago: each GPU's utilisation, memory, power and SM clock over the last
        5 min (at 80×24 one row per role, the mean of its GPUs, the clock giving way), and the throughput
        graph with the slowdown's start and its baseline's line."""

        async def run_before(pilot):
            diagnosed(pilot.app)
            await pilot.press("g")
            await pilot.pause()

        assert snap_compare(make_app("slow", gpu_seconds=300), run_before=run_before, terminal_size=size)
