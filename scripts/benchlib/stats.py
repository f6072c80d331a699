"""Summaries of repeated measurements: median and tail percentiles, and ratios between them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def summary(values: Sequence[float], digits: int = 2) -> dict:
    """{"n", "median", "p95", "p99", "max"} of `values`, rounded."""

    def r(value: float | None) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "n": len(values),
        "median": r(statistics.median(values)) if values else None,
        "p95": r(percentile(values, 95)),
        "p99": r(percentile(values, 99)),
        "max": r(max(values)) if values else None,
    }


def ratio(numerator: float | None, denominator: float | None, digits: int = 1) -> float | None:
    """numerator ÷ denominator, None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(numerator / denominator, digits)


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of y on x over (x, y) points; None for fewer than two distinct x."""
    if len(points) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
