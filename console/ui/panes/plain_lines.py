"""A line-API pane's own strips handed to the compositor as they are.

Textual styles every line a widget draws (`StylesCache.render_line`): borders, padding,
outline, tint, opacity, then its line filters. A line of a widget that scrolled or changed is
styled again each frame: a new Strip, so the filters run again over every segment (~40 µs a
line; a log line's frame restyles the whole log pane). A pane with none of those styles adds
nothing to its own strips but the padding to its width and the filters, and a Strip keeps
both (`adjust_cell_length`, `apply_filter` are cached on it): our panes keep their strips
between frames, so their lines cost a lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rich.style import Style as RichStyle
from textual.color import Color
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.style import Style


@lru_cache(maxsize=64)
def padding_style(base_background: Color, background: Color) -> RichStyle:
    """The style Textual pads a line with: the widget's background over what is beneath it."""
    return Style(background=base_background + background).rich_style


if TYPE_CHECKING:
    _WidgetMixin = Widget  # what the mixin is mixed into, for the type checker
else:
    _WidgetMixin = object


class PlainLines(_WidgetMixin):
    """Mixed into a line-API widget (before Widget): `render_lines` without Textual's per-line
    styling while the widget has none (no border, padding, outline, tint, hatch or opacity);
    with any of them, Textual's own."""

    def _styled(self: Any) -> bool:
        styles = self.styles
        return bool(
            any(styles.gutter)
            or any(kind for kind, _ in styles.outline)
            or styles.tint.a
            or styles.text_opacity != 1.0
            or (styles.has_rule("hatch") and styles.hatch != "none")
            or self.opacity != 1.0
        )

    def line_renderer(self: Any) -> Callable[[int], Strip]:
        """What draws line y in one render_lines call: render_line, unless the widget's lines share
        a placement it works out once per call instead of once per line."""
        return self.render_line

    def render_lines(self: Any, crop: Region) -> list[Strip]:
        if self._styled():
            return super().render_lines(crop)
        base_background, background = self.background_colors
        pad = padding_style(base_background, background)
        width = self.size.width
        line_filters = self.get_line_filters()
        render_line = self.line_renderer()
        strips = []
        for y in crop.line_range:
            strip = render_line(y).adjust_cell_length(width, pad)
            for line_filter in line_filters:
                strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips
