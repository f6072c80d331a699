"""The one retry schedule: waits that double from a first delay up to a limit, each jittered.

SSH reconnects, the log follower and the sampling agent restarts, and webhook retries all
wait by it. The jitter (each wait drawn from 75–100 % of its nominal value) keeps many
consoles that lost the same host at once from coming back in step.
"""

from __future__ import annotations

import random

#: A wait is drawn from [1 - JITTER, 1] times its nominal value.
JITTER = 0.25


class Backoff:
    """Waits between attempts at something that keeps failing: `next()` after a failure, `reset()` after a success."""

    def __init__(self, first: float, limit: float, *, rng: random.Random | None = None) -> None:
        if not 0 < first <= limit:
            raise ValueError(f"a backoff needs 0 < first <= limit, not first={first:g}, limit={limit:g}")
        self.first = first
        self.limit = limit
        self._nominal = first
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The wait before the next attempt (seconds); the one after it is twice as long, up to `limit`."""
        delay = self._nominal * self._rng.uniform(1 - JITTER, 1.0)
        self._nominal = min(self._nominal * 2, self.limit)
        return delay

    def reset(self) -> None:
        """It worked: the next failure starts again from `first`."""
        self._nominal = self.first
