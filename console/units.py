"""How Pulse writes a duration for people: one format everywhere (panes, action steps, the fleet)."""

from __future__ import annotations


def format_duration(seconds: float, *, compact: bool = False) -> str:
    """`2d 4h`, `5h 12m`, `7m 03s`, `42s` (largest two units); `compact` drops the space: `7m03s`."""
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
