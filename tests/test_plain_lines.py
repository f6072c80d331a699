"""The line-API panes hand their strips to the compositor without Textual's per-line styling
(console/ui/plain_lines.py): what they draw must be what Textual's own path draws, segment
for segment, in every state that changes a pane's style."""

from __future__ import annotations

from textual.geometry import Region
from textual.widget import Widget

from console.ui.gpu_pane import GpuPane
from console.ui.log_pane import LogPane
from console.ui.plain_lines import PlainLines
from console.ui.process_pane import ProcessPane
from console.ui.throughput_pane import CellSparkline, FigureLine
from tests.snapshot_apps.scenarios import make_app

SIZE = (120, 40)
PANES = (GpuPane, ProcessPane, LogPane, FigureLine, CellSparkline)


def segments(strips) -> list[list]:
    return [list(strip) for strip in strips]


def assert_drawn_as_textual_draws(app, crop_columns: tuple[int, int] | None = None) -> int:
    """Every plain pane's lines against Textual's own styling of the same lines; the panes compared."""
    compared = 0
    for cls in PANES:
        for pane in app.query(cls):
            assert isinstance(pane, PlainLines)
            width, height = pane.size
            x1, x2 = crop_columns or (0, width)
            crop = Region(x1, 0, x2 - x1, height)
            ours = pane.render_lines(crop)
            pane._styles_cache.clear()  # Textual's path restyles every line, as after a repaint
            theirs = Widget.render_lines(pane, crop)
            assert segments(ours) == segments(theirs), f"{type(pane).__name__}#{pane.id} differs"
            compared += 1
    return compared


async def test_the_panes_draw_a_real_hf_trainer_run_as_textual_styles_it():
    """The real HF Trainer capture (its log and its tqdm bar), in each state that restyles a pane."""
    app = make_app("bar")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert assert_drawn_as_textual_draws(app) == 9  # GPUs, processes, log, 4 figure lines, 2 sparklines
        app.query_one(LogPane).focus()  # a focused log is tinted
        await pilot.pause()
        assert_drawn_as_textual_draws(app)
        table = app.query_one(ProcessPane)
        table.focus()  # the cursor row
        await pilot.press("down")
        assert_drawn_as_textual_draws(app)
        app.theme = "textual-light"
        await pilot.pause()
        assert_drawn_as_textual_draws(app)
        assert_drawn_as_textual_draws(app, crop_columns=(3, 17))


async def test_a_problem_run_and_a_log_scrolled_sideways_draw_as_textual_styles_them():
    app = make_app("oom")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        log.focus()
        await pilot.press("end", "right", "right", "right")
        await pilot.pause()
        assert log.scroll_x > 0
        assert_drawn_as_textual_draws(app)


async def test_a_pane_given_padding_is_styled_by_textual():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        assert not log._styled()
        log.styles.padding = (0, 2)
        await pilot.pause()
        assert log._styled()
        line = log.render_lines(Region(0, 0, log.size.width, 1))[0]
        assert line.text.startswith("  ")  # the padding Textual draws
