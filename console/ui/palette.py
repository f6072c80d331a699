"""The command palette's Pulse commands: the wired actions of the action table, searchable by name.

Names are shown as plain content and help lines escaped (the palette parses help as markup):
a key such as `[` or a custom action's name from the config would otherwise be read as a tag.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Matcher, Provider
from textual.content import Content
from textual.markup import escape

from console.ui.keymap import ActionSpec
from console.ui.themes import ThemedApp


def highlighted(matcher: Matcher, name: str) -> Content:
    """`name` as plain content with the characters the query matched in the matcher's style."""
    content = Content(name)
    score, offsets = matcher.fuzzy_search.match(matcher.query, name)
    if score:
        for offset in offsets:
            if not name[offset].isspace():
                content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class PulseCommands(Provider):
    """Every wired, bound action of `app.action_specs`, with its key and help line."""

    @property
    def pulse_app(self) -> ThemedApp:
        """The console this palette belongs to (only Pulse's apps list these commands)."""
        assert isinstance(self.app, ThemedApp)
        return self.app

    def _entries(self) -> Iterator[tuple[str, ActionSpec]]:
        for spec in self.pulse_app.action_specs:
            if spec.action != "command_palette" and spec.bound:
                yield f"{spec.description}  ({spec.key_display})", spec

    async def discover(self) -> Hits:
        for name, spec in self._entries():
            yield DiscoveryHit(Content(name), partial(self.pulse_app.take_action, spec.action), text=name, help=escape(spec.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, spec in self._entries():
            score = max(matcher.match(name), matcher.match(spec.help) * 0.5)
            if score > 0:
                yield Hit(score, highlighted(matcher, name), partial(self.pulse_app.take_action, spec.action), text=name, help=escape(spec.help))
