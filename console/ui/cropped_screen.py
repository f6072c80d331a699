"""A screen whose frames draw only the widgets they change.

Textual draws a frame from the widgets whose clip meets the frame's crop (the box around what
changed). A widget placed on the screen itself has the whole screen as its clip, so every frame
drew the header, the footer, each pane's box and the screen beneath them, whole, whatever
changed: a tenth of what an idle console's frames cost. `CroppedCompositor` asks a widget
only for its lines in the crop, and nothing of a widget that shows nothing there. A frame
writes the same: only the changed regions, all inside the crop. It overrides a private
method of Textual's compositor (Textual is pinned in the lock); tests/test_drawn_as_textual.py
compares its frames with Textual's own.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class CroppedCompositor(Compositor):
    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders()
            return
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown.overlaps(crop):
                continue
            # Cut to the crop's lines only: a frame divides each line at the widgets' edges, so
            # a strip must span the widget's visible columns.
            top, bottom = max(shown.y, crop.y), min(shown.bottom, crop.bottom)
            lines = Region(shown.x, top, shown.width, bottom - top)
            yield region, lines, widget.render_lines(lines.translate(-region.offset))


class CroppedScreen(Screen):
    """A Screen drawn by `CroppedCompositor`."""

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        self._compositor = CroppedCompositor()
