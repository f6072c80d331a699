"""Regexes from the config, run so that none can hang Pulse: a time budget per line, lines capped.

The built-in rules (observe/lines.py) are Pulse's own and stay on the fast `re` path. A pattern from
the config runs through the `regex` package with its timeout: one that exceeds its budget on a
line (catastrophic backtracking such as `(a|aa)+$` on a long run of `a`) is disabled for the rest
of its reader's life (`MetricPatterns`: the follower's lasts as long as the console), and a notice
naming it goes to whoever the reader was given (the console's state, `pulse classify`'s stderr).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from console.model import METRIC_NAMES, MetricPattern

if TYPE_CHECKING:
    import regex

#: A line is matched on its first this-many characters (lines are untrusted and can be long).
USER_PATTERN_CHARS = 4096
#: Seconds one pattern may take on one line: a real pattern needs microseconds.
USER_PATTERN_BUDGET_S = 0.1


class PatternError(ValueError):
    """A config pattern that is not a valid regular expression."""


def compile_user_pattern(pattern: str) -> regex.Pattern:
    """The compiled pattern (callers cache it); PatternError when it is not a valid regular expression."""
    import regex  # here: a config without patterns (the demo's) does not pay its import at every start

    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise PatternError(str(exc)) from None


class MetricPatterns:
    """The config's metric patterns, as one reader of a log runs them: each within its time budget, and
    one that runs past it disabled from then on, said once to `on_disabled`."""

    __slots__ = ("patterns", "disabled", "on_disabled")

    def __init__(self, patterns: Sequence[MetricPattern] = (), *, on_disabled: Callable[[str], None] | None = None) -> None:
        self.patterns = tuple(patterns)
        self.disabled: dict[str, str] = {}
        """Pattern text → the notice that disabled it, oldest first."""
        self.on_disabled = on_disabled

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def search(self, compiled: regex.Pattern, label: str, text: str) -> regex.Match | None:
        """`compiled.search` on the capped line within the budget; None when it does not match or is disabled."""
        if compiled.pattern in self.disabled:
            return None
        try:
            return compiled.search(text, 0, USER_PATTERN_CHARS, timeout=USER_PATTERN_BUDGET_S)
        except TimeoutError:
            notice = self.disabled[compiled.pattern] = (
                f"{label} {compiled.pattern!r} took more than {USER_PATTERN_BUDGET_S * 1000:g} ms on one line: "
                "disabled until Pulse restarts (fix the pattern)"
            )
            if self.on_disabled is not None:
                self.on_disabled(notice)
            return None


#: No patterns: what a line is classified with when the config gives none.
NO_PATTERNS = MetricPatterns()


@lru_cache(maxsize=256)
def compile_metric_pattern(pattern: str, name: str):
    """The compiled regex of a config pattern (run with a time budget); raises ValueError saying what is wrong."""
    if name not in METRIC_NAMES:
        raise ValueError(f"metric pattern for {name!r}: the metric must be one of {', '.join(METRIC_NAMES)}")
    try:
        compiled = compile_user_pattern(pattern)
    except PatternError as exc:
        raise ValueError(f"metric pattern {pattern!r}: {exc}") from None
    if "value" not in compiled.groupindex and name not in compiled.groupindex:
        raise ValueError(f"metric pattern {pattern!r} needs a named group (?P<value>...) or (?P<{name}>...)")
    return compiled
