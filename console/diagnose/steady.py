"""What the header and the journal say: a verdict that holds steady. Pure: verdicts and times in, a verdict out.

Each diagnosis is a fresh look, and a run between two states can make consecutive looks disagree (a
buffered run whose stderr writes a warning, a link that drops for a moment). Shown as they come, the
header flips and the journal alternates. So, as the alerts do (console.alerts.AlertPolicy):

- a problem is shown at once (never held back), whichever it follows, and so is a new word on the same
  verdict (its summary: "quiet 48 s");
- the end of a problem (a verdict that is no problem: healthy) is shown once it has held for
  `recover_s`; until then the problem stays, its summary saying what the looks say now and for how long.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from console.diagnose.evidence import Verdict
from console.units import format_duration
from console.verdicts import is_problem

#: Seconds the end of a problem must hold before the header and the journal say it: longer than the
#: moment a warning line makes a buffered log look alive, shorter than a person's patience after a fix.
RECOVER_S = 15.0


@dataclass
class SteadyVerdict:
    """The verdict to show, from the stream of fresh ones (times in seconds, any clock)."""

    recover_s: float = RECOVER_S
    shown: Verdict | None = None
    """The verdict the header and the journal say now (its summary as it was last shown)."""
    _better: str | None = None
    _better_since: float = 0.0

    def observe(self, fresh: Verdict, now: float) -> Verdict:
        """Feed a fresh verdict; returns the one to show."""
        shown = self.shown
        if shown is None or fresh.name == shown.name or is_problem(fresh.name) or not is_problem(shown.name):
            return self._show(fresh)
        if fresh.name != self._better:
            self._better, self._better_since = fresh.name, now
        held_s = now - self._better_since
        if held_s >= self.recover_s:
            return self._show(fresh)
        return replace(shown, summary=f"{shown.summary} (the looks say {fresh.name} for {format_duration(held_s)})")

    def _show(self, verdict: Verdict) -> Verdict:
        self.shown, self._better = verdict, None
        return verdict
