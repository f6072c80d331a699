"""A screen whose frames draw only the lines they change.

Textual draws a frame from the widgets whose clip meets the frame's crop (the box around what
changed), each asked for all its lines in that box. A widget placed on the screen itself has the
whole screen as its clip, so every frame drew the header, the footer, each pane's box and the
screen beneath them; and a frame that changed the status line and a box's title drew every pane
between them too, though it writes three lines. `CroppedCompositor` asks a widget only for its
lines that the frame writes, and nothing of a widget with none. A frame writes the same. It
overrides private methods of Textual's compositor (Textual is pinned in the lock);
tests/test_drawn_as_textual.py compares its frames with Textual's own.

A followed log moves every line of its pane up a row for each new line, so its frame rewrote
the whole pane. When a `ScrolledLines` widget's lines only moved up, the frame scrolls the
terminal's rows under it instead (a scroll region, as VT100 defined it) and writes the new lines
and its scrollbar: one row for a log line, not the pane. tests/test_terminal_scroll.py draws the
frames in a terminal and compares the screen with Textual's own full frame.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


class ScrolledLines:
    """Mixed into a widget whose frames mostly move its lines up (a followed log): a frame that
    only did that is drawn by scrolling the terminal (`CroppedCompositor`)."""


class ScrollingChopsUpdate(ChopsUpdate):
    """A partial frame that first scrolls the terminal's rows `top` to `bottom` (exclusive) up by
    `rows`, then writes its chops."""

    def __init__(self, top: int, bottom: int, rows: int, *args) -> None:
        super().__init__(*args)
        self.top, self.bottom, self.rows = top, bottom, rows

    def render_segments(self, console: Console) -> str:
        # Margins (DECSTBM, 1-based and inclusive), a line feed at the bottom margin for each row,
        # margins reset; every write that follows moves the cursor itself.
        scroll = f"\x1b[{self.top + 1};{self.bottom}r\x1b[{self.bottom};1H" + "\n" * self.rows + "\x1b[r"
        return scroll + super().render_segments(console)


class CroppedCompositor(Compositor):
    #: The partial frame being drawn: the spans it writes, (x1, x2) by line, and those lines in order.
    _spans: dict[int, list[tuple[int, int]]] | None = None
    _span_lines: list[int] = []
    #: Widgets the partial frame being drawn has already rendered whole, and their strips.
    _rendered: dict[Widget, list[Strip]] = {}
    #: A ScrolledLines widget and its scrollbars as the terminal shows them: each one's region and
    #: strips, from the last frame that drew the widget. None when not known.
    _drawn_lines: dict[Widget, tuple[Region, list[Strip]]] | None = None
    #: `_scrolled_parts()` of the visible widgets mapping it was found for.
    _parts_of: dict | None = None
    _parts: dict[Widget, Region] | None = None

    def forget_drawn_lines(self) -> None:
        """The terminal may not show what this compositor drew last: scroll nothing until it has drawn again."""
        self._drawn_lines = None

    def render_full_update(self, simplify: bool = False) -> LayoutUpdate:
        self._drawn_lines = None
        return super().render_full_update(simplify)

    def render_partial_update(self) -> ChopsUpdate | None:
        # Textual's own, keeping the spans for _get_renders.
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        scroll = self._plan_scroll(update_regions)
        crop = Region.from_union(update_regions).intersection(self.size.region)
        spans = list(self._regions_to_spans(update_regions))
        by_line: dict[int, list[tuple[int, int]]] = {}
        for y, x1, x2 in spans:
            by_line.setdefault(y, []).append((x1, x2))
        self._spans, self._span_lines = by_line, sorted(by_line)
        try:
            chops = self._render_chops(crop, by_line.__contains__)
        finally:
            self._spans, self._span_lines, self._rendered = None, [], {}
        chop_ends = [cut_set[1:] for cut_set in self.cuts]
        if scroll is None:
            return ChopsUpdate(chops, spans, chop_ends)
        return ScrollingChopsUpdate(*scroll, chops, spans, chop_ends)

    def _plan_scroll(self, update_regions: set[Region]) -> tuple[int, int, int] | None:
        """(top, bottom, rows) when the frame is a ScrolledLines widget's lines moved up by `rows`
        and nothing else in its rows changed; `update_regions` then holds the new rows (the whole
        width: a scroll region moves whole rows) and its scrollbars' rows that the move got wrong."""
        parts = self._scrolled_parts()
        if parts is None:
            self._drawn_lines = None
            return None
        widget, region = next(iter(parts.items()))
        if region not in update_regions:
            if any(changed.overlaps(shown) for changed in update_regions for shown in parts.values()):
                self._drawn_lines = None  # drawn in part: not kept row by row
            return None
        drawn = self._drawn_lines
        now = self._drawn_lines = {part: (shown, part.render_lines(Region(0, 0, *shown.size))) for part, shown in parts.items()}
        self._rendered = {part: lines for part, (_, lines) in now.items()}
        if drawn is None or drawn.keys() != now.keys() or any(drawn[part][0] != shown for part, (shown, _) in now.items()):
            return None
        rows = moved_up(drawn[widget][1], now[widget][1])
        band = Region(0, region.y, self.size.width, region.height)
        if not rows or any(changed.overlaps(band) and changed not in parts.values() for changed in update_regions):
            return None
        redrawn = [Region(0, region.bottom - rows, band.width, rows)]
        for part, (shown, lines) in now.items():
            if part is not widget:  # a scrollbar: the rows whose new look is not the one moved onto them
                was = drawn[part][1]
                redrawn += [Region(shown.x, shown.y + y, shown.width, 1) for y in range(len(lines) - rows) if lines[y] is not was[y + rows]]
        update_regions.difference_update(parts.values())
        update_regions.update(redrawn)
        return region.y, region.bottom, rows

    def _scrolled_parts(self) -> dict[Widget, Region] | None:
        """The visible ScrolledLines widget (first) and its scrollbars, each with its region, when
        its rows may be scrolled: found again only when what is visible changes."""
        visible = self.visible_widgets
        if self._parts_of is not visible:
            self._parts_of, self._parts = visible, _scrolled_parts(visible, self.size.width)
        return self._parts

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders()
            return
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown.overlaps(crop):
                continue
            # The plan for a scroll has rendered a ScrolledLines widget and its scrollbars whole.
            rendered = self._rendered.get(widget) if shown == region else None
            # Whole lines of the widget's visible columns: a frame divides each line at the
            # widgets' edges, so a strip must span them.
            for top, bottom in self._written_lines(shown, crop):
                lines = Region(shown.x, top, shown.width, bottom - top)
                if rendered is None:
                    yield region, lines, widget.render_lines(lines.translate(-region.offset))
                else:
                    yield region, lines, rendered[top - region.y : bottom - region.y]

    def _written_lines(self, shown: Region, crop: Region) -> Iterator[tuple[int, int]]:
        """The runs (top, bottom) of `shown`'s lines inside `crop` that the frame writes within
        its columns: all of them in a full frame."""
        top, bottom = max(shown.y, crop.y), min(shown.bottom, crop.bottom)
        spans = self._spans
        if spans is None:
            yield top, bottom
            return
        left, right = shown.x, shown.right
        lines = self._span_lines
        run_top = run_bottom = -1
        for y in lines[bisect_left(lines, top) : bisect_left(lines, bottom)]:
            for x1, x2 in spans[y]:
                if x1 < right and x2 > left:
                    break
            else:
                continue
            if y != run_bottom:
                if run_bottom >= 0:
                    yield run_top, run_bottom
                run_top = y
            run_bottom = y + 1
        if run_bottom >= 0:
            yield run_top, run_bottom


def _scrolled_parts(visible: dict[Widget, tuple[Region, Region]], width: int) -> dict[Widget, Region] | None:
    found = next(
        ((widget, region) for widget, (region, clip) in visible.items() if isinstance(widget, ScrolledLines) and clip.contains_region(region)),
        None,
    )
    if found is None:
        return None
    widget, region = found
    band = Region(0, region.y, width, region.height)
    # Every row of the band moves: what else is in it must be the widget's own scrollbars or its
    # containers, whose rows beside it are alike (the sides of a border).
    parts: dict[Widget, Region] = {widget: region}
    containers = widget.ancestors
    for other, (other_region, clip) in visible.items():
        shown = other_region.intersection(clip)
        if other is widget or other in containers or not shown.overlaps(band):
            continue
        if other.parent is not widget or shown != other_region:
            return None  # another widget would move with the rows; a clipped scrollbar's rows are not its own
        parts[other] = shown
    return parts


def moved_up(before: list[Strip], after: list[Strip]) -> int:
    """By how many rows (0 < rows < the height) `after` is `before` moved up, the same strips
    (not equal ones: the same objects, as a widget keeps them); 0 when it is not."""
    height = len(after)
    if len(before) != height or height < 2:
        return 0
    first = after[0]
    for rows in range(1, height):
        if before[rows] is first:
            return rows if all(after[y] is before[y + rows] for y in range(1, height - rows)) else 0
    return 0


class CroppedScreen(Screen):
    """A Screen drawn by `CroppedCompositor`."""

    _compositor: CroppedCompositor

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        self._compositor = CroppedCompositor()

    def _compositor_refresh(self) -> None:
        super()._compositor_refresh()
        if self.app._batch_count:
            # Textual drops a frame drawn while it batches updates (an async batch, as a
            # recompose holds, spans frames): the terminal does not show this one.
            self._compositor.forget_drawn_lines()
