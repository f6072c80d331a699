"""How Pulse writes durations and memory for people: one format everywhere (panes, action steps, the diagnosis, the fleet)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'90s', '30m', '6h', '2d', '1h30m' → seconds; ValueError saying what a duration looks like otherwise."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise ValueError("give a duration such as 90s, 30m, 6h, 2d or 1h30m")
    return sum(float(value) * _UNIT_S[unit] for value, unit in parts)


def format_duration(seconds: float, *, compact: bool = False, tenths: bool = False) -> str:
    """`2d 4h`, `5h 12m`, `7m 03s`, `42s` (largest two units); `compact` drops the space: `7m03s`;
    `tenths` keeps them below 10 s, `0.3s`, where they are the fact (a run that writes every 0.3 s)."""
    if tenths and 0 < seconds < 10:
        return f"{seconds:.1f}".removesuffix(".0") + "s"
    s = int(max(seconds, 0))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    gap = "" if compact else " "
    if days:
        return f"{days}d{gap}{hours}h"
    if hours:
        return f"{hours}h{gap}{minutes:02d}m"
    if minutes:
        return f"{minutes}m{gap}{s:02d}s"
    return f"{s}s"


def format_gib(mib: float, *, unit: bool = True) -> str:
    """Memory given in MiB, written in GiB as every pane and the diagnosis write it: `118.5 GiB`."""
    return f"{mib / 1024:.1f} GiB" if unit else f"{mib / 1024:.1f}"


def spread(values: list[float], form: str) -> str:
    """`lo–hi` of `values` written with `form` (`{:.1f}`), one figure when both ends read alike, `—` for none."""
    if not values:
        return "—"
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}–{high}"


def format_indices(indices: list[int]) -> str:
    """GPU indices, runs joined: `0–4, 6`."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)


def si(value: float) -> str:
    """A rate in three significant figures: 14.2K, 980, 1.05M."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def counted(count: int, noun: str) -> str:
    """`1 thread`, `3 threads`: a count with its noun, singular for one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
