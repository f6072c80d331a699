"""The log tail: a line-API widget that renders only the visible lines, each styled by its kind.

Lines arrive in batches (`append`, called by the app on a ~10 Hz timer), never one at a
time. The pane follows the end of the log until the operator scrolls up or presses `f`;
while paused it counts the lines that arrived; `End` follows again. Problem lines are
coloured by kind and marked in a two-cell gutter. Jumps (to a problem, a search match,
a line number) start from the view: going up from its bottom, which is the end of the log
while following. A filter shows only the lines a regex matches; a search highlights its
matches. Both are case-insensitive; a pattern that is not a valid regex matches literally.
Text is never parsed as markup: lines are untrusted.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.model import LineKind, LogLine
from console.ui import render
from console.ui.render import KeptScrollBars, ScrolledLines
from console.ui.panes.plain_lines import PlainLines
from console.ui.panes.styles import KeptStyles, background_style, sgr_style, text_style

GUTTER = 2
#: Lines longer than this are drawn without the filter highlight (toolong does the same).
HIGHLIGHT_MAX_CHARS = 10_000
#: Gutter marks per problem kind, so the kind reads without colour too (NO_COLOR).
GUTTER_MARKS = {
    LineKind.OOM: "M",
    LineKind.NAN: "N",
    LineKind.TRACEBACK: "T",
    LineKind.NCCL_TIMEOUT: "C",
    LineKind.CUDA_ERROR: "G",
    LineKind.KILLED: "K",
}
#: The gutter's second cell for a line cut at the length bound.
CUT_MARK = "…"


def compile_pattern(text: str) -> tuple[re.Pattern[str] | None, str | None]:
    """`text` as a case-insensitive regex (None when empty), and why it was taken literally, if it was."""
    if not text:
        return None, None
    try:
        return re.compile(text, re.IGNORECASE), None
    except re.error as exc:
        return re.compile(re.escape(text), re.IGNORECASE), f"not a regex ({exc.msg}): matched literally"


def line_number(line: LogLine) -> int:
    return line.number


class LogPane(PlainLines, ScrolledLines, KeptStyles, KeptScrollBars, ScrollView, can_focus=True):
    """A bounded, styled, filterable tail of the run's log."""

    BINDINGS = [Binding("end", "follow", "Follow", show=False)]

    COMPONENT_CLASSES = {f"log-pane--{kind.value}" for kind in LineKind if kind is not LineKind.NORMAL} | {
        "log-pane--gutter",
        "log-pane--match",
        "log-pane--current",
    }

    DEFAULT_CSS = """
    LogPane {
        background: $surface;
        color: $foreground;
        overflow: auto;
        scrollbar-size-vertical: 1;
        scrollbar-size-horizontal: 0;
        &:focus { background-tint: $foreground 3%; }
        & > .log-pane--oom { color: $line-oom; text-style: bold; }
        & > .log-pane--nan { color: $line-nan; text-style: bold; }
        & > .log-pane--traceback { color: $line-traceback; }
        & > .log-pane--nccl_timeout { color: $line-nccl-timeout; text-style: bold; }
        & > .log-pane--cuda_error { color: $line-cuda-error; text-style: bold; }
        & > .log-pane--killed { color: $line-killed; text-style: bold reverse; }
        & > .log-pane--warning { color: $line-warning; }
        & > .log-pane--gutter { color: $text-muted; }
        & > .log-pane--match { background: $accent 40%; text-style: bold; }
        & > .log-pane--current { background: $primary 30%; }
    }
    """

    following: var[bool] = var(True)
    """True while the view sticks to the end of the log."""
    unseen: var[int] = var(0)
    """Lines that arrived while following was paused."""
    filter_text: var[str] = var("")
    """A regex: only the lines it matches are shown."""
    search_text: var[str] = var("")
    """A regex whose matches are highlighted; `next_match` jumps between them."""
    line_numbers: var[bool] = var(False)

    class FollowChanged(Message):
        """Following paused or resumed, or the count of unseen lines changed."""

        def __init__(self, pane: LogPane) -> None:
            super().__init__()
            self.pane = pane

    def __init__(self, *, max_lines: int = 10_000, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self._lines: list[LogLine] = []
        self._shown: list[LogLine] = self._lines
        self._width = 0
        self._current: int | None = None
        """Number of the line the operator jumped to (a problem, a match, a go-to): highlighted."""
        self._cache: LRUCache[int, list] = LRUCache(1024)
        """Per shown line: [its whole strip, a (scroll x, width), the part on screen there]."""
        self._programmatic_scroll = False
        self._filter: re.Pattern[str] | None = None
        self._search: re.Pattern[str] | None = None
        self.filter_error: str | None = None
        """Why the filter was taken literally (not a valid regex), else None."""
        self.search_error: str | None = None

    # -- data ------------------------------------------------------------------

    @property
    def last_number(self) -> int:
        """Number of the newest line held (0 when empty): the app appends what comes after."""
        return self._lines[-1].number if self._lines else 0

    @property
    def line_count(self) -> int:
        """Lines on show (after the filter)."""
        return len(self._shown)

    @property
    def shown_lines(self) -> Sequence[LogLine]:
        return self._shown

    def append(self, lines: Sequence[LogLine]) -> None:
        """Add a batch of lines at the end (one layout and one scroll per batch)."""
        if not lines:
            return
        digits = len(str(self.last_number))
        self._lines.extend(lines)
        if self.line_numbers and len(str(self.last_number)) != digits:
            self._cache.clear()  # the number column got wider
        if self._shown is not self._lines:
            matching = [line for line in lines if self._matches(line)]
            self._shown.extend(matching)
            added = len(matching)
        else:
            added = len(lines)
        self._width = max(self._width, max(self._cell_len(line.text) for line in lines) + GUTTER)
        self._prune()
        if not self.following and added:
            self.unseen += added
        self._update_virtual_size()
        if self.following:
            self._scroll_to_end()
        elif added:
            self.refresh()

    def clear(self) -> None:
        """Forget every line (a new log is followed)."""
        self._lines.clear()
        self._shown = self._lines if not self.filter_text else []
        self._width = 0
        self._current = None
        self._cache.clear()
        self.unseen = 0
        self._update_virtual_size()
        self.refresh()

    def _prune(self) -> None:
        # Prune in chunks of 10% so a full pane does not shift its list on every batch.
        excess = len(self._lines) - self.max_lines
        if excess <= 0:
            return
        excess = max(excess, self.max_lines // 10)
        first_kept = self._lines[excess].number
        del self._lines[:excess]
        if self._shown is not self._lines:
            dropped = 0
            while dropped < len(self._shown) and self._shown[dropped].number < first_kept:
                dropped += 1
            del self._shown[:dropped]
        else:
            dropped = excess
        self._cache.clear()
        if not self.following and dropped:
            self._set_scroll_y(max(0, self.scroll_y - dropped))

    @staticmethod
    def _cell_len(text: str) -> int:
        return len(text) if text.isascii() else cell_len(text)

    def _number_width(self) -> int:
        return len(str(self.last_number)) + 1 if self.line_numbers else 0

    def _update_virtual_size(self) -> None:
        size = Size(self._width + self._number_width(), len(self._shown))
        if size == self.virtual_size:
            return
        if not self.is_mounted:
            self.virtual_size = size
            return
        self._programmatic_scroll = True  # it clamps the scroll to the new size: not the operator's
        try:
            render.grow_virtual_size(self, size)
        finally:
            self._programmatic_scroll = False
        self.refresh()

    # -- following -------------------------------------------------------------

    def _set_scroll_y(self, y: float) -> None:
        self._programmatic_scroll = True
        try:
            self.scroll_to(y=y, animate=False, immediate=True)
        finally:
            self._programmatic_scroll = False

    def _scroll_to_end(self) -> None:
        # Not scroll_end: its closures cost a signature() and a callback after the next frame,
        # on every batch of lines; the virtual size is already up to date here.
        self._set_scroll_y(self.max_scroll_y)

    def on_resize(self) -> None:
        if self.following:
            self.call_after_refresh(self._scroll_to_end)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._programmatic_scroll:
            return
        if new_value < old_value and self.following and new_value < self.max_scroll_y:
            # (A scroll clamped to a taller pane's end is still at the end: still following.)
            self.following = False
        elif new_value > old_value and not self.following and new_value >= self.max_scroll_y:
            # Already at the end: resume without scrolling (this may run inside a scroll animation).
            self.unseen = 0
            self._current = None
            self.following = True

    def watch_following(self, following: bool) -> None:
        self.post_message(self.FollowChanged(self))

    def watch_unseen(self) -> None:
        self.post_message(self.FollowChanged(self))

    def follow(self) -> None:
        """Stick to the end of the log again."""
        self.unseen = 0
        self._current = None
        self.following = True
        self._scroll_to_end()
        self.refresh()

    def pause(self) -> None:
        """Stop following; new lines are counted instead of scrolled to."""
        self.following = False

    def toggle_follow(self) -> None:
        """Pause or resume."""
        if self.following:
            self.pause()
        else:
            self.follow()

    # -- jumps -----------------------------------------------------------------

    def _start_index(self, *, backwards: bool) -> int:
        """Where a jump starts looking: next to the line last jumped to, else from the view's top
        going down or its bottom going up (the last line while following)."""
        if self._current is not None:
            index = self._index_of(self._current)
            if index is not None:
                return index - 1 if backwards else index + 1
        if backwards:
            if self.following:
                return len(self._shown) - 1
            return min(int(self.scroll_y) + self.scrollable_content_region.height - 1, len(self._shown) - 1)
        return int(self.scroll_y)

    def _index_of(self, number: int) -> int | None:
        index = bisect_left(self._shown, number, key=line_number)
        return index if index < len(self._shown) and self._shown[index].number == number else None

    def _jump(self, wanted: Callable[[LogLine], bool], *, backwards: bool, start: int | None = None) -> LogLine | None:
        if start is None:
            start = self._start_index(backwards=backwards)
        indices = range(start, -1, -1) if backwards else range(max(start, 0), len(self._shown))
        for index in indices:
            if wanted(self._shown[index]):
                return self._show_index(index)
        return None

    def _show_index(self, index: int) -> LogLine:
        """Mark the line at `index`, pause, and scroll it to a third of the way down the view."""
        line = self._shown[index]
        self._current = line.number
        self.pause()
        self._set_scroll_y(max(0, index - self.scrollable_content_region.height // 3))
        self._cache.clear()
        self.refresh()
        return line

    def next_problem(self, names: Collection[int], *, backwards: bool = False) -> LogLine | None:
        """Move to the next (or previous) problem: `names` are the numbers of the lines that name
        problems (one per traceback, its exception line). None when there is none that way."""
        return self._jump(lambda line: line.number in names, backwards=backwards)

    def next_match(self, *, backwards: bool = False) -> LogLine | None:
        """Move to the next (or previous) line the search matches; None when there is none that way."""
        search = self._search
        if search is None:
            return None
        return self._jump(lambda line: search.search(line.text) is not None, backwards=backwards)

    def last_problem(self, names: Collection[int]) -> LogLine | None:
        """Move to the newest problem held (`names` as for next_problem), wherever the view is; None when there is none."""
        return self._jump(lambda line: line.number in names, backwards=True, start=len(self._shown) - 1)

    def go_to_line(self, number: int) -> LogLine | None:
        """Move to line `number`, or the first shown line after it; None when no line is at or after it."""
        index = bisect_left(self._shown, number, key=line_number)
        return self._show_index(index) if index < len(self._shown) else None

    @property
    def current_line(self) -> int | None:
        """Number of the line last jumped to (a problem, a match, a go-to)."""
        return self._current

    def action_follow(self) -> None:
        self.follow()

    # -- filter and search -------------------------------------------------------

    def _matches(self, line: LogLine) -> bool:
        return self._filter is None or self._filter.search(line.text) is not None

    def watch_filter_text(self, text: str) -> None:
        self._filter, self.filter_error = compile_pattern(text)
        self._shown = [line for line in self._lines if self._matches(line)] if text else self._lines
        self._cache.clear()
        self._update_virtual_size()
        self.unseen = 0
        if self.following:
            self._scroll_to_end()
        else:
            self._set_scroll_y(min(self.scroll_y, self.max_scroll_y))
        self.refresh()

    def watch_search_text(self, text: str) -> None:
        self._search, self.search_error = compile_pattern(text)
        self._cache.clear()
        self.refresh()

    def watch_line_numbers(self) -> None:
        self._cache.clear()
        self._update_virtual_size()
        self.refresh()

    # -- rendering -----------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def _style(self, name: str) -> Style:
        return self.kept_style(name, self._make_style)

    def _make_style(self, name: str) -> Style:
        component = f"log-pane--{name}"
        if name in ("match", "current"):
            style = background_style(self, component) + text_style(self, component)
            return Style(bgcolor=style.bgcolor, bold=style.bold)
        return text_style(self, component)

    def line_renderer(self) -> Callable[[int], Strip]:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        return lambda y: self._line_at(scroll_y + y, scroll_x, width)

    def render_line(self, y: int) -> Strip:
        return self.line_renderer()(y)

    def _line_at(self, index: int, scroll_x: int, width: int) -> Strip:
        if index >= len(self._shown):
            return Strip.blank(width, self.base_style)
        placement = (scroll_x, width)
        cached = self._cache.get(index)
        if cached is None:
            cached = self._cache[index] = [self._render_full_line(self._shown[index]), None, None]
        elif cached[1] == placement:
            return cached[2]  # following, each new line moves the others up a row: they are as they were
        # Updated in place: an LRUCache keeps the first value set for a key.
        cached[1:] = placement, cached[0].crop_extend(scroll_x, scroll_x + width, self.base_style).apply_offsets(scroll_x, index)
        return cached[2]

    def _render_full_line(self, line: LogLine) -> Strip:
        kind = line.info.kind
        text = Text(no_wrap=True, end="")
        if self.line_numbers:
            text.append(f"{line.number:>{self._number_width() - 1}} ", self._style("gutter"))
        mark = GUTTER_MARKS.get(kind)
        # A line cut at the length bound says so in the gutter: its tail is not on screen or anywhere.
        cut = CUT_MARK if line.cut else ""
        if mark:
            text.append(f"{mark}{cut or '▌'}", self._style(kind.value))
        else:
            text.append(f" {cut or ' '}", self._style("gutter"))
        body = Text(line.text, style=self._style(kind.value) if kind is not LineKind.NORMAL else "")
        for start, end, parameters in line.sgr:  # the log's own colours, over the kind's
            body.stylize(sgr_style(parameters), start, end)
        if len(line.text) <= HIGHLIGHT_MAX_CHARS:
            for pattern in (self._filter, self._search):
                if pattern is not None:
                    for match in pattern.finditer(line.text):
                        if match.end() > match.start():
                            body.stylize(self._style("match"), match.start(), match.end())
        text.append_text(body)
        if line.number == self._current:
            text.stylize(self._style("current"))
        text.stylize_before(self.base_style)
        return Strip(text.render(self.app.console), text.cell_len)
