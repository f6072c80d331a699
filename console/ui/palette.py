"""The command palette's Pulse commands: the wired actions of the action table, searchable by name."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class PulseCommands(Provider):
    """Every wired action of `app.action_specs`, with its key and help line."""

    def _specs(self):
        return [spec for spec in self.app.action_specs if spec.action != "command_palette"]

    async def discover(self) -> Hits:
        for spec in self._specs():
            yield DiscoveryHit(
                f"{spec.description}  [{spec.key_display}]",
                partial(self.app.run_action, spec.action),
                help=spec.help,
            )

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for spec in self._specs():
            name = f"{spec.description}  [{spec.key_display}]"
            score = max(matcher.match(name), matcher.match(spec.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self.app.run_action, spec.action), help=spec.help)
