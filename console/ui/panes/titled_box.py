"""A bordered box whose titles change as the run goes (ages, counts, the log's state).

Setting a widget's `border_title` or `border_subtitle` repaints the whole widget, and a box's
region holds its pane: a subtitle that counts seconds ("log grew 12s ago" between a slow run's
writes) redrew and rewrote the box and every line of the pane in it each second. The titles are
drawn in the box's top and bottom border rows, and a change now repaints those two.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.geometry import Region


class TitledBox(Vertical):
    #: The titles last given. Textual hands a title back as markup, never equal to the Text it was
    #: given: comparing with that set them again every tick.
    _shown: tuple[Text | str | None, Text | str | None] = (None, None)
    _titles_changing = False

    def set_titles(self, title: Text | str, subtitle: Text | str) -> None:
        """Show `title` and `subtitle` on the border, repainting its rows only when they changed."""
        shown_title, shown_subtitle = self._shown
        self._shown = (title, subtitle)
        self._titles_changing = True
        try:
            if shown_title != title:
                self.border_title = title
            if shown_subtitle != subtitle:
                self.border_subtitle = subtitle
        finally:
            self._titles_changing = False

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False) -> TitledBox:
        if self._titles_changing and not regions:
            # Regions are given in content coordinates: the border rows lie outside the content.
            left, top = self.content_offset
            width, height = self.outer_size
            regions = (Region(-left, -top, width, 1), Region(-left, height - 1 - top, width, 1))
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
