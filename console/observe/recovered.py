"""Problems that say themselves they are handled: known families of recoverable problem lines. Pure.

A problem line (out of memory, a CUDA or NCCL error) is judged by what the run did next
(console.diagnose): progress after it makes it a recovered warning, not a verdict. Some
frameworks say so in the problem itself, before any progress can follow, and go on:

| family | what the framework does | a real line |
| --- | --- | --- |
| autotune | inductor's autotuner drops a Triton config the GPU cannot run (shared memory, registers) and benchmarks the rest | `E… select_algorithm.py:3924] [0/0] Runtime error during autotuning: … out of resource: triton_mm Required: 262144 Hardware limit:232448 … Ignoring this choice.` |
| loss scale | fp16 training skips a step whose gradients overflowed and lowers the loss scale (apex, DeepSpeed, fairseq) | `[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768` |
| allocator | DeepSpeed ZeRO-3 flushes PyTorch's allocator cache under memory pressure and retries | `3 pytorch allocator cache flushes since last step. this happens when there is high memory pressure …` |

Such a problem is recovered while the run lives and makes progress; it is fatal when the
process or thread died, or progress stopped after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    """A kind of problem line that the framework handles itself."""

    name: str
    pattern: re.Pattern[str]
    one: str
    """What one occurrence is: 'autotune config skipped'."""
    many: str
    """...and several: 'autotune configs skipped'."""


FAMILIES = (
    Family(
        "autotune",
        re.compile(r"Runtime error during autotuning|Ignoring this choice|select_algorithm\.py.*No valid triton configs"),
        "autotune config skipped",
        "autotune configs skipped",
    ),
    Family(
        "loss scale",
        re.compile(r"OVERFLOW!.*[Ss]kipping step|Gradient overflow\.\s+Skipping step|[Rr]educing loss scale|loss scale.*reducing to"),
        "fp16 step skipped (loss scale lowered)",
        "fp16 steps skipped (loss scale lowered)",
    ),
    Family(
        "allocator",
        re.compile(r"pytorch allocator cache flushes since last step"),
        "allocator cache flush under memory pressure",
        "allocator cache flushes under memory pressure",
    ),
)

#: Why an autotune config failed, when its lines say.
_AUTOTUNE_REASONS = (
    (re.compile(r"out of resource: .*(?:shared memory|Required: \d+ Hardware limit)", re.I), "out of shared memory"),
    (re.compile(r"out of resource: .*registers", re.I), "out of registers"),
)


def family_of(lines: Iterable[str]) -> Family | None:
    """The family a problem's lines belong to, if any."""
    for text in lines:
        for family in FAMILIES:
            if family.pattern.search(text):
                return family
    return None


def reason_of(family: Family, lines: Iterable[str]) -> str | None:
    """Why, in a few words, when the family's lines say ('out of shared memory')."""
    if family.name != "autotune":
        return None
    for text in lines:
        for pattern, reason in _AUTOTUNE_REASONS:
            if pattern.search(text):
                return reason
    return None


def count_text(family: Family, count: int, reason: str | None) -> str:
    """'23 autotune configs skipped: out of shared memory'."""
    return f"{count} {family.one if count == 1 else family.many}" + (f": {reason}" if reason else "")
