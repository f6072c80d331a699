"""A vertical scrollbar drawn from rows kept between frames.

Following a log, every new line moves the scrollbar's thumb, and Textual draws a scrollbar
by rendering its Rich renderable and styling each row again (~0.3 ms for 17 rows: a third of
a log line's frame). Yet a vertical bar has few kinds of row: the track above the thumb, the
track below it, the thumb, and an eighth-block at each end of the thumb. Each row is kept by
what it is (its segment: its colours and its mouse action) and the bar's own style, and goes
to the compositor as the line-API panes' rows do (PlainLines).
"""

from __future__ import annotations

from typing import Any

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.strip import Strip

from console.ui.panes.plain_lines import PlainLines

#: Rows kept at most (kinds of row × the bar's styles: hover, grab, themes); then they start over.
MAX_ROWS = 256


class KeptScrollBar(PlainLines, ScrollBar):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: dict[tuple[Segment, Style, int], Strip] = {}
        self._rows: list[Strip] = []

    def render_lines(self, crop: Region) -> list[Strip]:
        bar = self.render()
        if not self.vertical or not isinstance(bar, ScrollBarRender):
            self._rows = []  # render_line falls back to Textual's own rendering
            return ScrollBar.render_lines(self, crop)
        width, height = self.size
        bar_style = bar.style if isinstance(bar.style, Style) else Style.parse(bar.style)
        # The arguments Textual's ScrollBarRender gives itself when Rich renders it at this size.
        segments = bar.render_bar(
            size=height,
            virtual_size=bar.virtual_size,
            window_size=bar.window_size,
            position=bar.position,
            thickness=width,
            vertical=True,
            back_color=bar_style.bgcolor or Color.parse("#555555"),
            bar_color=bar_style.color or Color.parse("bright_magenta"),
        ).segments
        base = self.visual_style.rich_style
        if len(self._kept) > MAX_ROWS:
            self._kept.clear()
        self._rows = [self._row(segment, base, width) for segment in segments]
        return super().render_lines(crop)

    def _row(self, segment: Segment, base: Style, width: int) -> Strip:
        """A row as Textual renders it: the bar's segment over the widget's own style."""
        key = (segment, base, width)
        row = self._kept.get(key)
        if row is None:
            row = self._kept[key] = Strip([Segment(segment.text, base + segment.style)]).adjust_cell_length(width, base)
        return row

    def render_line(self, y: int) -> Strip:
        return self._rows[y] if y < len(self._rows) else super().render_line(y)


class KeptScrollBars:
    """Mixed into a scroll view (before it): its vertical scrollbar is a KeptScrollBar. Textual
    makes its scrollbars in this property, with no other way to choose their class."""

    _vertical_scrollbar: ScrollBar | None

    @property
    def vertical_scrollbar(self: Any) -> ScrollBar:
        if self._vertical_scrollbar is None:
            bar = self._vertical_scrollbar = KeptScrollBar(vertical=True, name="vertical", thickness=self.scrollbar_size_vertical)
            bar.display = False
            self.app._start_widget(self, bar)
        return self._vertical_scrollbar
