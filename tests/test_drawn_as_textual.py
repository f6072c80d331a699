"""The line-API panes hand their strips to the compositor without Textual's per-line styling
(console/ui/panes/plain_lines.py), and the log's scrollbar is put together from rows it kept
(console/ui/render/kept_scrollbar.py): what they draw must be what Textual's own path draws,
segment for segment, in every state that changes their style."""

from __future__ import annotations

import re

from textual._compositor import Compositor
from textual.geometry import Region
from textual.scrollbar import ScrollBar
from textual.widget import Widget

from console.ui.render.cropped_screen import CroppedCompositor
from console.ui.panes.gpu_pane import GpuPane
from console.ui.render.kept_scrollbar import KeptScrollBar
from console.ui.panes.log_pane import LogPane
from console.ui.panes.plain_lines import PlainLines
from console.ui.panes.process_pane import ProcessPane
from console.ui.panes.throughput_pane import ThroughputPane
from tests.snapshot_apps.scenarios import make_app

SIZE = (120, 40)
PANES = (GpuPane, ProcessPane, LogPane, ThroughputPane)


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
        assert assert_drawn_as_textual_draws(app) == 4
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


def assert_bar_drawn_as_textual_draws(bar) -> None:
    full = Region(0, 0, *bar.size)
    ours = bar.render_lines(full)
    bar._styles_cache.clear()
    bar._dirty_regions.add(full)  # Textual's own path renders the bar again from its renderable
    theirs = ScrollBar.render_lines(bar, full)
    assert segments(ours) == segments(theirs)


async def test_the_log_scrollbar_kept_rows_draw_as_textual_draws_the_bar():
    """A log ending in a real CUDA OOM traceback: the thumb at every third position, hovered,
    grabbed, over a focused (tinted) log and in another theme."""
    app = make_app("oom")
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogPane)
        bar = log.vertical_scrollbar
        assert isinstance(bar, KeptScrollBar) and bar.display
        shown = list(log.shown_lines)
        for y in range(0, int(log.max_scroll_y) + 1, 3):
            log.scroll_to(y=y, animate=False, immediate=True)
            assert_bar_drawn_as_textual_draws(bar)
        kept = len(bar._kept)
        log.scroll_to(y=0, animate=False, immediate=True)
        assert bar.render_lines(Region(0, 0, *bar.size)) and len(bar._kept) == kept  # all rows known: none made anew
        bar.mouse_over = True
        assert_bar_drawn_as_textual_draws(bar)
        bar.grabbed = bar.region.offset
        assert_bar_drawn_as_textual_draws(bar)
        bar.grabbed = None
        bar.mouse_over = False
        log.focus()
        await pilot.pause()
        assert_bar_drawn_as_textual_draws(bar)
        app.theme = "textual-light"
        await pilot.pause()
        assert_bar_drawn_as_textual_draws(bar)
        assert len(shown) > 2 * log.size.height  # a log long enough to scroll


def writes(terminal_sequence: str) -> list[tuple[str, str]]:
    """What a frame writes where: (cursor position, text with its styles). A move with nothing
    written after it changes nothing on the screen (Textual moves to a region's end column and
    writes an empty strip there): it is left out."""
    parts = re.split(r"\x1b\[(\d+;\d+)H", terminal_sequence)
    return [(at, text.rstrip("\n")) for at, text in zip(parts[1::2], parts[2::2]) if text.rstrip("\n")]


async def test_a_cropped_frame_writes_what_textuals_compositor_writes_and_asks_only_what_it_shows():
    """The main screen's frames (console/ui/render/cropped_screen.py) against Textual's own compositor over
    the same screen: the same output for each set of changed regions, on the real HF Trainer run."""
    app = make_app("bar")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen._compositor, CroppedCompositor)
        textuals = Compositor()
        textuals.reflow(screen, screen.size)
        region = {name: app.query_one(f"#{name}").region for name in ("status", "gpus", "processes", "throughput", "log", "log-box")}
        changes = [
            *([one] for one in region.values()),
            [region["status"], region["log"]],  # the box around them is the whole screen
            [region["gpus"], region["throughput"]],
            [Region(0, 15, SIZE[0], 10)],  # across box borders and two panes
            [Region(1, 39, 5, 1)],  # part of the footer
            [Region(70, 12, 12, 3), Region(10, 30, 4, 2)],
        ]
        for regions in changes:
            for compositor in (screen._compositor, textuals):
                compositor._dirty_regions.clear()  # what the reflow or the last frame left
            screen._compositor._dirty_regions.update(regions)
            textuals._dirty_regions.update(regions)
            ours = screen._compositor.render_partial_update().render_segments(app.console)
            theirs = textuals.render_partial_update().render_segments(app.console)
            assert writes(ours) == writes(theirs), regions

        asked: list[str] = []
        for widget in screen.walk_children(with_self=True):
            widget.render_lines = lambda crop, widget=widget, render=widget.render_lines: asked.append(widget.id) or render(crop)
        screen._compositor._dirty_regions.add(region["log"])
        screen._compositor.render_partial_update()
        assert "log" in asked and not {"status", "gpus", "gpus-box", "processes", "throughput"} & set(asked)
        assert "keys" not in asked  # nor the footer's key grid

        # A stalled run's second: the status line's age and the processes box's subtitle. The
        # panes between them are inside the box around the two, and are not asked.
        asked.clear()
        box = app.query_one("#processes-box").region
        screen._compositor._dirty_regions.update([region["status"], Region(box.x, box.bottom - 1, box.width, 1)])
        screen._compositor.render_partial_update()
        assert {"status", "processes-box"} <= set(asked) and not {"gpus", "processes", "throughput", "log"} & set(asked)
