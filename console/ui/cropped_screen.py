"""A screen whose frames draw only the lines they change.

Textual draws a frame from the widgets whose clip meets the frame's crop (the box around what
changed), each asked for all its lines in that box. A widget placed on the screen itself has the
whole screen as its clip, so every frame drew the header, the footer, each pane's box and the
screen beneath them; and a frame that changed the status line and a box's title drew every pane
between them too, though it writes three lines. `CroppedCompositor` asks a widget only for its
lines that the frame writes, and nothing of a widget with none. A frame writes the same. It
overrides private methods of Textual's compositor (Textual is pinned in the lock);
tests/test_drawn_as_textual.py compares its frames with Textual's own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class CroppedCompositor(Compositor):
    #: The partial frame being drawn: the spans it writes, (x1, x2) by line, and those lines in order.
    _spans: dict[int, list[tuple[int, int]]] | None = None
    _span_lines: list[int] = []

    def render_partial_update(self) -> ChopsUpdate | None:
        # Textual's own, keeping the spans for _get_renders.
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        crop = Region.from_union(update_regions).intersection(self.size.region)
        spans = list(self._regions_to_spans(update_regions))
        by_line: dict[int, list[tuple[int, int]]] = {}
        for y, x1, x2 in spans:
            by_line.setdefault(y, []).append((x1, x2))
        self._spans, self._span_lines = by_line, sorted(by_line)
        try:
            chops = self._render_chops(crop, by_line.__contains__)
        finally:
            self._spans, self._span_lines = None, []
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders()
            return
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown.overlaps(crop):
                continue
            # Whole lines of the widget's visible columns: a frame divides each line at the
            # widgets' edges, so a strip must span them.
            for top, bottom in self._written_lines(shown, crop):
                lines = Region(shown.x, top, shown.width, bottom - top)
                yield region, lines, widget.render_lines(lines.translate(-region.offset))

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


class CroppedScreen(Screen):
    """A Screen drawn by `CroppedCompositor`."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        self._compositor = CroppedCompositor()
