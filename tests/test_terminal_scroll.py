"""A followed log's frames scroll the terminal (console/ui/render/cropped_screen.py): after every frame,
whatever it scrolled or wrote, the terminal must show what Textual's own compositor draws of the
same screen from scratch, cell for cell and style for style. The lines are a real torchrun run's
(NCCL watchdog errors and their tracebacks) arriving after a real HF Trainer run's log."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from textual._compositor import Compositor

from console.ui.render.cropped_screen import CroppedCompositor, ScrollingChopsUpdate
from console.ui.panes.log_pane import LogPane
from tests.snapshot_apps.scenarios import make_app
from tests.snapshot_apps.scrolling_log import BATCHES, torchrun_lines
from tests.tmux import TmuxSession, needs_tmux
from tests.vt_screen import VtScreen

ROOT = Path(__file__).resolve().parents[1]

SIZE = (120, 40)


class Terminal:
    """Every frame the app's main screen draws, written to a VtScreen as the driver would write it."""

    def __init__(self, app) -> None:
        self.app = app
        self.screen = app.screen
        self.vt = VtScreen(*SIZE)
        self.scrolled_frames = 0
        self.frame_bytes: list[tuple[bool, int]] = []
        compositor = self.screen._compositor
        assert isinstance(compositor, CroppedCompositor)
        draw = compositor.render_update

        def render_update(*args, **kwargs):
            update = draw(*args, **kwargs)
            # Only the top screen's frames reach the terminal (Screen._compositor_refresh), and
            # none drawn while updates are batched (App._display drops them).
            if update is not None and app.screen is self.screen and not app._batch_count:
                written = update.render_segments(app.console)
                self.vt.feed(written)
                scrolled = isinstance(update, ScrollingChopsUpdate)
                self.scrolled_frames += scrolled
                self.frame_bytes.append((scrolled, len(written)))
            return update

        compositor.render_update = render_update
        self.vt.feed(draw(full=True).render_segments(app.console))

    def assert_shows_textuals_frame(self, rows: range | None = None) -> None:
        """The terminal against Textual's own compositor drawing the same screen in full (`rows` of it)."""
        textuals = Compositor()
        textuals.reflow(self.screen, self.screen.size)
        truth = VtScreen(*self.screen.size)
        truth.feed(textuals.render_update(full=True).render_segments(self.app.console))
        for y in rows or range(truth.height):
            assert self.vt.cells[y] == truth.cells[y], f"row {y}:\n  terminal {self.vt.text()[y]!r}\n  textual  {truth.text()[y]!r}"


async def add(app, pilot, lines) -> None:
    app.state.add_lines(lines)
    app.run_screen.mark_changed()
    await pilot.pause()


async def test_lines_arriving_scroll_the_terminal_and_it_shows_what_textual_draws():
    app = make_app("bar")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = app.query_one(LogPane)
        terminal = Terminal(app)
        lines = torchrun_lines(app.state.lines_received)
        height = log.size.height
        assert log.following and len(log.shown_lines) > height
        # The first frame after a full one writes the pane: the compositor keeps what it drew.
        await add(app, pilot, lines[:1])
        del lines[:1]
        assert terminal.scrolled_frames == 0

        for batch in (1, 1, 2, 3, 1, height - 1, 1):
            before = terminal.scrolled_frames
            await add(app, pilot, lines[:batch])
            del lines[:batch]
            terminal.assert_shows_textuals_frame()
            assert terminal.scrolled_frames == before + 1, f"a batch of {batch} was not drawn by scrolling"
        assert terminal.vt.scrolls == 1 + 1 + 2 + 3 + 1 + height - 1 + 1

        # More lines than the pane holds: nothing on screen moved up, the pane is written anew.
        before = terminal.scrolled_frames
        await add(app, pilot, lines[: height + 5])
        del lines[: height + 5]
        terminal.assert_shows_textuals_frame()
        assert terminal.scrolled_frames == before

        # A line's frame scrolls and writes the new row and the scrollbar, not the pane.
        whole_pane = terminal.frame_bytes[-1][1]
        await add(app, pilot, lines[:1])
        del lines[:1]
        scrolled, size = terminal.frame_bytes[-1]
        assert scrolled and size * 4 < whole_pane, (size, whole_pane)

        # Lines with a sample in the same frame: the other panes are written where they are.
        sample = app.state.latest
        app.state.add_sample(dataclasses.replace(sample, time=sample.time + 1))
        before = terminal.scrolled_frames
        await add(app, pilot, lines[:2])
        del lines[:2]
        terminal.assert_shows_textuals_frame()
        assert terminal.scrolled_frames == before + 1


async def test_what_else_is_over_or_in_the_log_is_drawn_in_place_and_the_terminal_still_matches():
    """A toast over the log, a paused log, a filter, a modal screen and back, a resize: none of
    these frames is a scroll, and the next line after each is drawn right."""
    app = make_app("bar")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        log = app.query_one(LogPane)
        terminal = Terminal(app)
        lines = torchrun_lines(app.state.lines_received)

        async def one_line() -> None:
            await add(app, pilot, lines[:1])
            del lines[:1]
            terminal.assert_shows_textuals_frame()

        app.notify("a toast over the log's last rows", timeout=30)
        for _ in range(20):  # the toast rack mounts it a few messages later
            await pilot.pause()
            toasts = app.screen.query("Toast")
            if toasts:
                break
        toast = toasts.first()
        assert toast.region.overlaps(log.region)
        before = terminal.scrolled_frames
        await one_line()
        await one_line()
        assert terminal.scrolled_frames == before  # the toast would have moved with the rows
        app.clear_notifications()
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        await one_line()

        log.pause()
        await pilot.pause()
        log.scroll_to(y=log.scroll_y - 5, animate=False, immediate=True)
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        before = terminal.scrolled_frames
        await one_line()  # counted as unseen; the view stays
        assert terminal.scrolled_frames == before
        log.follow()
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        await one_line()

        log.filter_text = "rank"
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        log.filter_text = ""
        await pilot.pause()
        terminal.assert_shows_textuals_frame()

        # A frame drawn while Textual batches updates is dropped (App._display): a layout refresh
        # deferred into an async batch, as a recompose holds, draws one. The next line's frame
        # cannot scroll from it.
        async with log.batch():
            app.state.add_lines(lines[:2])
            del lines[:2]
            app.run_screen.mark_changed()
            await pilot.pause()
            app.screen._refresh_layout()
            await pilot.pause()
        before = terminal.scrolled_frames
        await add(app, pilot, lines[:1])
        del lines[:1]
        terminal.assert_shows_textuals_frame(rows=range(log.region.y, log.region.bottom))
        assert terminal.scrolled_frames == before

        await pilot.press("question_mark")  # the help screen over the main one
        await pilot.pause()
        await add(app, pilot, lines[:3])
        del lines[:3]
        await pilot.press("escape")
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        before = terminal.scrolled_frames
        await one_line()
        await one_line()
        assert terminal.scrolled_frames > before

        terminal.vt = VtScreen(120, 36)  # a resized terminal: Textual draws it in full
        await pilot.resize_terminal(120, 36)
        await pilot.pause()
        terminal.assert_shows_textuals_frame()
        await one_line()  # the first line's frame after a full one writes the pane
        await one_line()
        assert log.size.height < SIZE[1] - 20 and terminal.frame_bytes[-1][0]


@needs_tmux
def test_in_a_real_terminal_the_scrolled_screen_is_what_textual_draws(tmp_path):
    """tmux as the terminal: the console's own driver writes the frames, lines arrive every 50 ms;
    the screen tmux shows is then compared with Textual's full frame of the same screen."""
    out = tmp_path / "frame.json"
    command = f"cd {ROOT} && TEXTUAL_ANIMATIONS=none {sys.executable} -m tests.snapshot_apps.scrolling_log {out}"
    with TmuxSession(f"pulse-scroll-{tmp_path.name}", command, SIZE) as terminal:
        deadline = time.monotonic() + 60
        while not out.exists():
            assert time.monotonic() < deadline, "the app never wrote its frame"
            time.sleep(0.1)
        frame = json.loads(out.read_text())
        expected = [row.rstrip() for row in frame["rows"]]
        terminal.wait_for(lambda rows: rows == expected, 10, "tmux never showed Textual's frame:\n" + "\n".join(expected) + "\n")
        assert frame["scrolled_frames"] >= len(BATCHES) - 2  # the first line's frame after a full one writes the pane
