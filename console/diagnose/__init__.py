"""The stall diagnosis, pure: what one look saw in (`evidence`), one verdict out (`rules`), the run's stacks
grouped (`stacks`), and the words (`explanation`), free of console keys; what the header and the journal say,
held steady (`steady`).

`console.evidence.gather` collects an `Evidence` from a target; `diagnose` names what is wrong, the
observations that say so, the next step, and the action that takes it (its `step`). The rules, in
order, are in console/diagnose/rules.py's docstring; each verdict's severity, display level and usual
step are in console/verdicts.py.
"""

from console.diagnose.evidence import DeadThread, Evidence, ProblemLine, RecoveredFamily, StackSummary, Verdict
from console.diagnose.rules import (
    BUFFER_BYTES,
    RECOVERABLE_KINDS,
    baseline_of,
    diagnose,
    log_proves,
    slow_look_due,
    slowdown_of,
    wants_slow_look,
    wants_stacks,
)
from console.diagnose.stacks import StackGroup, group_sentence, group_stacks, in_collective, stragglers
from console.diagnose.steady import SteadyVerdict

__all__ = [
    "BUFFER_BYTES", "RECOVERABLE_KINDS", "DeadThread", "Evidence", "ProblemLine", "RecoveredFamily", "StackGroup",
    "StackSummary", "SteadyVerdict", "Verdict", "baseline_of", "diagnose", "group_sentence", "group_stacks", "in_collective",
    "log_proves", "slow_look_due", "slowdown_of",
    "stragglers", "wants_slow_look", "wants_stacks",
]
