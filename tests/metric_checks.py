"""What a reader got wrong on a line with known metrics: shared by the metric-format set and the corpus's rate lines."""

from __future__ import annotations

import math
from collections.abc import Iterable

from console.observe.lines import classify_line


def metric_misses(line: str, expected: dict, names: Iterable[str]) -> list[str]:
    """Each of `names` that `expected` gives must be read as given, and no other may be read."""
    got = classify_line(line).as_json()
    wrong = []
    for name in names:
        want, have = expected.get(name), got.get(name)
        if want is None and have is None:
            continue
        if want is None or have is None or not math.isclose(want, have, rel_tol=1e-6):
            wrong.append(f"{name}: want {want}, got {have}")
    return wrong
