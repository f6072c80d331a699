"""Rich styles from a widget's component classes, blended against the theme.

A partial component style drops the alpha of `$text-muted` or `$accent 40%`; the full one
blends it but also carries the widget's own background. These keep one half of the full
style, so a component can colour text or a background without painting over the other.
"""

from __future__ import annotations

from functools import lru_cache
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.ansi import AnsiDecoder
from rich.style import Style
from textual.widget import Widget


def text_style(widget: Widget, component: str) -> Style:
    """The colour and attributes of `component`, blended, with no background."""
    full = widget.get_component_rich_style(component)
    return Style(
        color=full.color,
        bold=full.bold,
        dim=full.dim,
        italic=full.italic,
        underline=full.underline,
        reverse=full.reverse,
    )


def background_style(widget: Widget, component: str) -> Style:
    """The background of `component`, blended, and nothing else."""
    return Style(bgcolor=widget.get_component_rich_style(component).bgcolor)


@lru_cache(maxsize=256)
def sgr_style(parameters: str) -> Style:
    """The Rich style of SGR `parameters` (`1;31`, `38;5;208`), as a terminal would show them,
    except that a log may not hide its text (conceal) or blink at the operator."""
    decoded = AnsiDecoder().decode_line(f"\x1b[{parameters}m.")
    style = decoded.spans[0].style if decoded.spans else Style()
    if isinstance(style, str):  # a Text's span may hold a style's name; the decoder gives Styles
        style = Style.parse(style)
    return style + Style(conceal=False, blink=False, blink2=False)


if TYPE_CHECKING:
    _WidgetMixin = Widget  # what the mixin is mixed into, for the type checker
else:
    _WidgetMixin = object


class KeptStyles(_WidgetMixin):
    """Mixed into a line-API widget: its own Rich style (`rich_style` walks the ancestors'
    backgrounds, ~60 µs, and a pane asked for it once a row every frame) and its component
    styles, kept until Textual says its styles changed (`notify_style_update`): when its own
    rules change, by a theme, or a class or pseudo-class on it or an ancestor. A change an
    ancestor makes only to its background, or only to this widget's component styles, is not
    said: none of our CSS does the first; the sparklines look their colours up each time."""

    _kept_base: Style | None = None
    _kept_components: dict[str, Style] | None = None

    @property
    def base_style(self: Any) -> Style:
        if self._kept_base is None:
            self._kept_base = self.rich_style
        return self._kept_base

    def kept_style(self: Any, name: str, make: Callable[[str], Style]) -> Style:
        """The style of component `name`, made by `make(name)` once until the styles change."""
        if self._kept_components is None:
            self._kept_components = {}
        style = self._kept_components.get(name)
        if style is None:
            style = self._kept_components[name] = make(name)
        return style

    def notify_style_update(self: Any) -> None:
        super().notify_style_update()
        self._kept_base = self._kept_components = None
