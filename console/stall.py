"""The one judgement of a log's silence: progressing, quiet, or stalled. Pure: numbers in, a judgement out.

Every surface asks this module (the header, the processes box, `d`, `pulse check`, `pulse watch`, its
alerts and the fleet), so a log is never "stalled" in one place and "progressing" in another.

- **progressing**: the log wrote within its rhythm: at most QUIET_SHOWN_INTERVALS of its usual gap
  between writes (at least QUIET_SHOWN_S), or, while no rhythm is known, within QUIET_FLOOR_S.
  This is evidence of progress.
- **quiet**: not progressing. Past QUIET_FLOOR_S of quiet (and past its rhythm's expected gap) the
  log alone no longer shows progress: the run's stacks must (`needs_stacks`).
- **stalled**: quiet past the stall limit: QUIET_INTERVALS usual gaps, at least QUIET_FLOOR_S, or
  UNLEARNED_QUIET_S while no rhythm is known; `[stall] log_silent_s` (`--stall-after`) sets it.
  `is_stalled` adds the throughput lines' own silence (RATE_GAPS of their gap): the one stall.
  A stalled log and an idle run are a hang even when no stack can be taken.

The rhythm is learned while a follower reads the log (console.state), or estimated from one look
(`lifetime_write_interval_s`: the run's writing time over the writes its log holds).
"""

from __future__ import annotations

from dataclasses import dataclass

from console.units import format_duration

#: Silent for this many of the run's usual intervals between writes (or progress updates) is a stall.
QUIET_INTERVALS = 20
#: A log quiet this long says nothing more about progress: the stacks must show it. Also the least
#: stall limit: a run that writes many times a second may pause a moment (a GC, a save).
QUIET_FLOOR_S = 10.0
#: Without a learned rhythm (a run that logs rarely) a stall starts here.
UNLEARNED_QUIET_S = 300.0
#: After this many usual intervals without a write the log is quiet rather than progressing...
QUIET_SHOWN_INTERVALS = 3
#: ...and never before this many seconds.
QUIET_SHOWN_S = 2.0
#: A throughput line this many usual intervals late is missing, not just slow to come (also past an explicit limit).
RATE_GAPS = 3
#: Write boundaries a tail needs before it says anything about the log's rhythm.
MIN_TAIL_WRITES = 20


@dataclass(frozen=True, slots=True)
class Silence:
    """How long a log has been silent, against its own rhythm."""

    silent_s: float | None
    """Seconds since the log last grew; None when it was never read (no log, or not yet)."""
    usual_s: float | None = None
    """The run's usual gap between writes; None until learned or estimated."""
    estimated: bool = False
    """usual_s was estimated from one look at the log, not learned by following it."""
    override_s: float | None = None
    """`[stall] log_silent_s` / `--stall-after`: the stall limit, set by the operator."""
    grew: bool = False
    """The log grew while it was being looked at: never stalled then, whatever its mtime says (a
    file written from a host whose clock differs)."""

    @property
    def limit_s(self) -> float:
        """Seconds of silence that make a stall."""
        if self.override_s is not None:
            return self.override_s
        if self.usual_s is None:
            return UNLEARNED_QUIET_S
        return max(QUIET_FLOOR_S, QUIET_INTERVALS * self.usual_s)

    @property
    def expected_gap_s(self) -> float:
        """The longest silence that is still the log's own rhythm."""
        if self.usual_s is None:
            return QUIET_FLOOR_S
        return max(QUIET_SHOWN_S, QUIET_SHOWN_INTERVALS * self.usual_s)

    @property
    def progressing(self) -> bool:
        """The log wrote within its rhythm: evidence of progress. By its last write's age alone: growth
        seen over a window (the cheap verdict's spans ten seconds) may be older than the rhythm."""
        return self.silent_s is not None and self.silent_s < self.expected_gap_s

    @property
    def needs_stacks(self) -> bool:
        """Quiet past the floor and past its rhythm: only the run's stacks can show progress now."""
        return not self.progressing and self.silent_s is not None and self.silent_s >= QUIET_FLOOR_S

    @property
    def stalled(self) -> bool:
        return not self.grew and self.silent_s is not None and self.silent_s > self.limit_s

    def rhythm_text(self) -> str:
        """'usually writes every 0.3 s', or that no rhythm is known yet."""
        return rhythm_text(self.usual_s)

    def quiet_text(self) -> str:
        """'quiet 1m 12s, usually writes every 0.3 s'."""
        return f"quiet {format_duration(self.silent_s or 0.0)}, {self.rhythm_text()}"

    def limit_text(self) -> str:
        """How the stall limit was set: 'a stall after 6 s, from its rhythm'."""
        if self.override_s is not None:
            how = "set by [stall] log_silent_s"
        elif self.usual_s is None:
            how = "until its rhythm is learned"
        elif self.estimated:
            how = "from its rhythm, estimated from the log's size over the run's life"
        else:
            how = "from its rhythm"
        return f"a stall after {format_duration(self.limit_s)}, {how}"


def rate_limit_s(rate_interval_s: float | None, override_s: float | None = None) -> float:
    """Seconds without a throughput line that make a stall: its own rhythm's limit, or the operator's
    `[stall] log_silent_s`, never under RATE_GAPS of the usual gap between rate lines."""
    if override_s is not None:
        return max(override_s, RATE_GAPS * (rate_interval_s or 0.0))
    return Silence(None, rate_interval_s).limit_s


def is_stalled(log: Silence, rate_silent_s: float | None = None, rate_interval_s: float | None = None) -> bool:
    """The one stall, for every surface (the processes box, the verdict): the log silent past its limit, or
    its throughput lines missing past theirs (a run that prints only warnings has stopped training)."""
    return log.stalled or (rate_silent_s is not None and rate_silent_s > rate_limit_s(rate_interval_s, log.override_s))


def rhythm_text(interval_s: float | None) -> str:
    """'usually writes every 0.3 s', or that no rhythm is known yet."""
    if interval_s is None:
        return "its rhythm not learned yet"
    return f"usually writes every {format_duration(interval_s, tenths=True)}"


def writes_in(data: bytes) -> int:
    """The writes a stretch of log holds: its line ends and its redraws (a lone `\r`)."""
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def interval_from_density(writes: int, sampled_bytes: int, log_size: int, written_for_s: float | None) -> float | None:
    """The log's usual gap between writes, from one look: the time the run has been writing
    (`written_for_s`) over the writes the whole log holds, at the density of a sample of it
    (`writes` in `sampled_bytes`). None when the sample is too thin to say."""
    if writes < MIN_TAIL_WRITES or sampled_bytes <= 0 or log_size <= 0 or written_for_s is None or written_for_s <= 0:
        return None
    return written_for_s / (log_size * writes / sampled_bytes)


def lifetime_write_interval_s(tail: str, log_size: int, written_for_s: float | None) -> float | None:
    """interval_from_density over a tail of the log as read (`pulse check`'s one look)."""
    data = tail.encode("utf-8", "replace")
    return interval_from_density(writes_in(data), len(data), log_size, written_for_s)
