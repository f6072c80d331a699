"""Stacks grouped: ranks (here or across nodes) whose main threads are the same stack, the straggler
outside the collective the others wait in, and the sentence that says so. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from console.diagnose.evidence import StackSummary


@dataclass(frozen=True, slots=True)
class StackGroup:
    """Processes (ranks, here or across nodes) whose main threads have the identical stack."""

    count: int
    ranks: tuple[str, ...]
    """Who is in the group: 'rank 1 (pid 1165)' on one host, 'node:pid' in a fleet."""
    wait: str | None
    """What the stack waits on (queue get, NCCL collective, ...), None when it runs."""
    where: str
    """The innermost frame worth reading."""
    collective: str | None = None
    cpu_pct: float | None = None
    """The highest CPU% among the group's processes, when known (a spinning wait)."""
    idle: bool = False
    """py-spy saw the thread off the CPU."""


def group_stacks(members: Iterable[tuple[str, StackSummary]]) -> list[StackGroup]:
    """Main threads grouped by identical stack: (who, summary) pairs in, biggest group first.

    The one grouping for both a host's ranks and a fleet's: N ranks on one host are the same
    problem as one rank on each of N hosts.
    """
    groups: dict[tuple, list[tuple[str, StackSummary]]] = {}
    for who, summary in members:
        groups.setdefault(summary.signature or (summary.where,), []).append((who, summary))
    out = []
    for found in groups.values():
        first = found[0][1]
        cpus = [s.cpu_pct for _, s in found if s.cpu_pct is not None]
        out.append(
            StackGroup(
                count=len(found),
                ranks=tuple(who for who, _ in found),
                wait=first.wait,
                where=first.where,
                collective=first.collective,
                cpu_pct=max(cpus) if cpus else None,
                idle=first.idle,
            )
        )
    out.sort(key=lambda g: (-g.count, g.ranks))
    return out


def in_collective(group: StackGroup | StackSummary) -> bool:
    """Waiting on its peers or its device: in a collective, a Work.wait, a CUDA synchronize."""
    return group.collective is not None or group.wait in ("NCCL collective", "CUDA synchronize")


def stragglers(groups: list[StackGroup]) -> list[StackGroup]:
    """The odd ones out: the groups not in a collective while others are; else a lone smallest group."""
    if len(groups) < 2:
        return []
    waiting = [g for g in groups if in_collective(g)]
    if waiting and len(waiting) < len(groups):
        return [g for g in groups if not in_collective(g)]
    smallest = min(g.count for g in groups)
    lone = [g for g in groups if g.count == smallest]
    return lone if len(lone) == 1 and smallest < max(g.count for g in groups) else []


def group_sentence(group: StackGroup) -> str:
    """'rank 0 (pid 1164) waits in all_reduce (NCCL collective), spinning at 100% CPU in synchronize (…)',
    'rank 1 (pid 1165) stopped in read_batch (train.py:13)'."""
    many = group.count > 1
    who = ", ".join(group.ranks) if group.count <= 3 else f"{group.count} ranks ({', '.join(group.ranks[:3])}, …)"
    if in_collective(group):
        call = call_text(group.collective)
        named = group.collective not in (None, "synchronize")
        doing = f"{'wait' if many else 'waits'} in {call}" + (f" ({group.wait})" if named and group.wait else "")
        if group.cpu_pct is not None and group.cpu_pct > 50:
            doing += f", spinning at {group.cpu_pct:.0f}% CPU"
    elif group.wait or group.idle:
        on = f" on {group.wait}" if group.wait else ""
        return f"{who} stopped{on} in {group.where}"
    else:
        doing = "run" if many else "runs"
    return f"{who} {doing} in {group.where}"


def call_text(collective: str | None) -> str:
    """'all_reduce', 'a CUDA synchronize', or 'a collective' when the stack does not say which."""
    if collective == "synchronize":
        return "a CUDA synchronize"
    return collective or "a collective"
