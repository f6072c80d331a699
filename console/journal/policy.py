"""`pulse watch`'s restart policy: when a verdict has lasted long enough to restart the run. Pure.

`RestartPolicy.observe(name)` takes each verdict `pulse watch` earns. A stretch starts when the
verdict becomes one of `[watch] restart_on` and lasts while it stays one of them; once it has
lasted `restart_after_s` the policy answers:

- "restart" while fewer than `max_restarts` automatic restarts fall in the last `restart_window_s`
  and the backoff since the last one has passed (it doubles after each restart, from
  `restart_after_s` up to the window, jittered as every retry in Pulse: console.backoff). The
  caller saves the evidence, restarts, and calls `restarted()`: the stretch starts again, so the
  new run is judged from scratch;
- "limit" once per stretch when the window's restarts are used up: the caller says so and does
  nothing more; a later stretch, once a restart has left the window, may restart again.

Times are the wall clock (injectable), so the restarts a watch made before it was restarted itself
(`earlier`, read back from the journal) still count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from console.backoff import Backoff
from console.config import WatchConfig
from console.diagnose import Evidence, Verdict
from console.verdicts import VERDICTS, is_problem
from console.model import GpuReading
from console.units import format_duration


def policy_problem(watch: WatchConfig) -> str | None:
    """What makes `watch`'s restart policy unusable, as one line naming the flag or `file:line: key`; None when nothing."""
    if not watch.restart_on:
        return "--max-restarts needs --restart-on VERDICT (or [watch] restart_on)" if watch.max_restarts else None
    for name in watch.restart_on:
        if name not in VERDICTS:
            return f"{watch.restart_on_source}: {name!r} is not a verdict (verdicts: {', '.join(VERDICTS)})"
        if not is_problem(name):
            return f"{watch.restart_on_source}: {name!r} is no problem to restart a run for"
    if watch.max_restarts is None:
        return (f"{watch.restart_on_source}: needs --max-restarts N (or [watch] max_restarts): how many"
                " automatic restarts a window allows")
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy asks for now: "restart" or "limit", and one line that says why."""

    action: str
    verdict: str
    lasted_s: float
    text: str
    count: int
    """Automatic restarts in the window: with this one for "restart", so far for "limit"."""


class RestartPolicy:
    """The restart policy of one watch (see the module docstring)."""

    def __init__(
        self,
        watch: WatchConfig,
        *,
        earlier: Iterable[float] = (),
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.watch = watch
        self.clock = clock
        self.backoff = Backoff(watch.restart_after_s, max(watch.restart_after_s, watch.restart_window_s), rng=rng)
        self.restarts: list[float] = []
        """When each automatic restart in the window was made."""
        self._not_before = 0.0
        self._since: float | None = None
        self._limit_said = False
        for at in sorted(earlier):
            self.restarted(at)

    @property
    def active(self) -> bool:
        return bool(self.watch.restart_on)

    def in_window(self) -> int:
        """Automatic restarts within the last window."""
        start = self.clock() - self.watch.restart_window_s
        self.restarts = [at for at in self.restarts if at > start]
        return len(self.restarts)

    def observe(self, name: str) -> Decision | None:
        """Feed the verdict just earned; a Decision when the policy asks for something now."""
        now = self.clock()
        if name not in self.watch.restart_on:
            self._since, self._limit_said = None, False
            return None
        if self._since is None:
            self._since = now
        lasted = now - self._since
        if lasted < self.watch.restart_after_s:
            return None
        count, limit = self.in_window(), self.watch.max_restarts or 0
        window = format_duration(self.watch.restart_window_s)
        if count >= limit:
            if self._limit_said:
                return None
            self._limit_said = True
            return Decision("limit", name, lasted, f"{name} for {format_duration(lasted)}, but {count} automatic"
                            f" restart{'s' * (count != 1)} in the last {window} already (max {limit}): not"
                            " restarting; still watching", count)
        if now < self._not_before:
            return None  # backing off: asked again on the next verdict
        return Decision("restart", name, lasted, f"{name} for {format_duration(lasted)}: automatic restart"
                        f" {count + 1} of at most {limit} in {window}", count + 1)

    def due(self) -> bool:
        """A stretch under way has lasted `restart_after_s` (and the backoff has passed) and was not yet
        answered: the caller judges now rather than at its next turn, so a restart is not late by it."""
        if self._since is None or self._limit_said:
            return False
        return self.clock() >= max(self._since + self.watch.restart_after_s, self._not_before)

    def restarted(self, at: float | None = None) -> None:
        """An automatic restart was made (or tried) at `at` (now): it counts, the backoff grows, the stretch starts again."""
        at = self.clock() if at is None else at
        if not any(self.clock() - t < self.watch.restart_window_s for t in self.restarts):
            self.backoff.reset()  # the window held none: back to the first wait
        self.restarts.append(at)
        self._not_before = at + self.backoff.next()
        self._since, self._limit_said = None, False


#: What an automatic restart keeps of the run in its journal entry: lines of each kind at most, each cut to LINE_CHARS.
SAVED_LINES = 200
LOG_LINES = 30
LINE_CHARS = 300


def clipped(lines: Iterable[str], limit: int = SAVED_LINES) -> list[str]:
    """At most `limit` of `lines`, each cut to LINE_CHARS: what a journal entry keeps of a part of the evidence."""
    return [line[:LINE_CHARS] for line in list(lines)[:limit]]


def stack_lines(evidence: Evidence) -> list[str]:
    """Every dumped thread of every rank and worker, one line each: whose, which thread, what it did, where."""
    out = []
    for t in evidence.stacks:
        who = t.label or f"pid {t.pid}"
        fold = f" ×{t.count}" if t.count > 1 else ""
        what = f"waiting on {t.wait}" if t.wait else ("idle" if t.idle else "running")
        moved = f", {t.motion} while recorded" if t.motion else ""
        out.append(f'{who} (pid {t.pid}) thread "{t.name}"{fold} {what}{moved}: {t.where}')
    if evidence.stack_error:
        out.append(f"stacks not dumped: {evidence.stack_error}")
    out += [f"not dumped: {why}" for why in evidence.stacks_missing]
    return out


def gpu_lines(gpus: Iterable[GpuReading]) -> list[str]:
    """Each GPU's state as the look read it: utilisation, memory, power, temperature, its holders."""
    def figure(value: float | int | None, unit: str) -> str:
        return "?" if value is None else f"{value:.0f}{unit}"

    out = []
    for g in gpus:
        holders = " ".join(f"{p.pid}:{figure(p.used_mib, ' MiB')}" for p in g.processes)
        out.append(f"GPU {g.index} {g.name}: util {figure(g.utilization_pct, '%')}, memory"
                   f" {figure(g.memory_used_mib, '')}/{figure(g.memory_total_mib, ' MiB')}, power {figure(g.power_w, ' W')},"
                   f" {figure(g.temperature_c, ' °C')}" + (f"; held by {holders}" if holders else "")
                   + (f"; {g.error}" if g.error else ""))
    return out


def saved_evidence(verdict: Verdict, evidence: Evidence, log_tail: Iterable[str]) -> dict:
    """What an automatic restart saves in the journal before it acts: the verdict and the look it was earned on."""
    return {
        "verdict": verdict.name,
        "summary": verdict.summary,
        "evidence": clipped(verdict.evidence),
        "processes": clipped(f"PID {p.pid} {p.label or p.role or 'process'} state {p.state}"
                           f" cpu {'?' if p.cpu_pct is None else f'{p.cpu_pct:.0f}%'}: {p.cmdline}" for p in evidence.processes),
        "stacks": clipped(stack_lines(evidence)),
        "log_tail": clipped(list(log_tail)[-LOG_LINES:]),
        "gpus": clipped(gpu_lines(evidence.gpus) or [f"no GPU readings ({evidence.gpu_error or evidence.gpu_source})"]),
    }
