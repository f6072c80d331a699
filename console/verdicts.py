"""The verdicts: one table, read by every module that judges, announces, shows or ranks a verdict. Pure.

A verdict is a closed set of names. What each name means elsewhere — how loudly it is announced,
how it is shown, whether the run's stacks can change it, whether a node's last throughput is still
its rate, which action takes its usual next step — is a column here, never a tuple of names in the
module that needs it (docs/design.md, "One table of verdicts").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: How loudly a verdict is shown: the header's and the diagnosis frame's colour, a toast's severity.
Level = Literal["ok", "warn", "crit"]

#: What a verdict's next step may be: dump the stacks, read the log at the problem, restart, warm up,
#: send SIGCONT to what was stopped. The console binds each to a key (console.ui.keymap.STEP_ACTIONS);
#: the core never writes the key.
NEXT_STEPS = ("dump", "log", "restart", "warmup", "continue")


@dataclass(frozen=True, slots=True)
class VerdictKind:
    """One verdict's row of the table."""

    name: str
    severity: int
    """Notification order: a verdict of higher severity deserves a louder alert (healthy is 0)."""
    level: Level
    stacks_decide: bool
    """The run's stacks can change this verdict (a quiet log may wait or work): a look takes them."""
    rate_is_history: bool
    """Under this verdict the last throughput line is history, not the run's rate now."""
    step: str | None
    """The next step it usually offers (one of NEXT_STEPS); a rule may offer another of them."""


_TABLE = (
    #           name                   sev  level   stacks rate_is_history  step
    VerdictKind("healthy",               0, "ok",   False, False, None),
    VerdictKind("slow",                  4, "warn", False, False, "dump"),
    VerdictKind("buffered",              5, "warn", True,  False, "restart"),
    VerdictKind("hung",                  7, "crit", True,  True,  "dump"),
    VerdictKind("dead",                  9, "crit", False, True,  "log"),
    VerdictKind("oom",                 10, "crit", True,  True,  "restart"),
    VerdictKind("diverged",              6, "warn", False, False, "log"),
    VerdictKind("launch_failed",         8, "crit", False, True,  "restart"),
    VerdictKind("gpu_contexts_unseen",   1, "warn", False, False, None),
    VerdictKind("stopped",               2, "warn", False, True,  "continue"),
    VerdictKind("unknown",               3, "warn", True,  True,  "dump"),
)

#: Every verdict by name.
KINDS: dict[str, VerdictKind] = {kind.name: kind for kind in _TABLE}
#: The verdict names, in the table's order (the metrics' and the config errors' order).
VERDICTS: tuple[str, ...] = tuple(KINDS)


def kind(name: str) -> VerdictKind:
    """The table's row for verdict `name` (KeyError for a name that is no verdict)."""
    return KINDS[name]


def severity(name: str) -> int:
    """How loudly a verdict deserves to be announced (healthy is 0)."""
    return KINDS[name].severity


def worse(a: str, b: str) -> bool:
    """True when verdict `a` is more severe than verdict `b`."""
    return severity(a) > severity(b)


def is_problem(name: str) -> bool:
    """Every verdict but healthy asks the operator to look."""
    found = KINDS.get(name)
    return found is None or found.level != "ok"


def level(name: str) -> Level:
    """`ok`, `warn` or `crit` for a verdict name (how loudly to show it)."""
    return KINDS[name].level
