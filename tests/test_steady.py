"""What the header and the journal say holds steady (issue 33, item 5): a worse verdict at once, a better
one once it has held; and a log that grows only by warnings shows no progress."""

from __future__ import annotations

from console.diagnose import Evidence, SteadyVerdict, Verdict, log_proves
from console.diagnose.evidence import DeadThread
from console.diagnose.steady import RECOVER_S
from console.model import LineInfo, LineKind, LogLine
from console.state import RunState


def verdict(name: str, summary: str = "") -> Verdict:
    return Verdict(name, summary or f"{name} summary", [], "")


def test_a_worse_verdict_shows_at_once_and_a_better_one_once_it_holds():
    steady = SteadyVerdict()
    assert steady.observe(verdict("healthy"), 0.0).name == "healthy"
    assert steady.observe(verdict("buffered", "quiet 12s"), 5.0).summary == "quiet 12s"
    assert steady.observe(verdict("buffered", "quiet 17s"), 10.0).summary == "quiet 17s"  # a new word on it, at once
    held = steady.observe(verdict("healthy"), 11.0)
    assert (held.name, held.summary) == ("buffered", "quiet 17s (the looks say healthy for 0s)")
    assert steady.observe(verdict("healthy"), 11.0 + RECOVER_S - 1).name == "buffered"
    assert steady.observe(verdict("healthy"), 11.0 + RECOVER_S).name == "healthy"


def test_a_flapping_verdict_never_shows_its_better_moments():
    steady = SteadyVerdict()
    shown = []
    for second in range(0, 120, 5):  # a warning line makes one look in five say healthy
        fresh = verdict("healthy" if second % 25 == 10 else "buffered")
        shown.append(steady.observe(fresh, float(second)).name)
    assert set(shown) == {"buffered"}


def test_a_problem_follows_another_at_once_and_only_the_end_of_one_is_held():
    steady = SteadyVerdict(recover_s=10.0)
    steady.observe(verdict("dead"), 0.0)
    assert steady.observe(verdict("hung"), 1.0).name == "hung"  # relaunched, hung again: no hold between problems
    assert steady.observe(verdict("healthy"), 2.0).name == "hung"
    assert steady.observe(verdict("unknown"), 3.0).name == "unknown"
    assert steady.observe(verdict("healthy"), 4.0).name == "unknown"  # healthy since 4, not since 2
    assert steady.observe(verdict("healthy"), 13.0).name == "unknown"
    assert steady.observe(verdict("healthy"), 14.0).name == "healthy"


def test_what_the_log_proves_is_shown_without_waiting_for_the_stacks():
    died = Evidence(window_s=1.0, dead_threads=(DeadThread("loader", "RuntimeError: boom"),))
    assert log_proves(verdict("hung"), died)
    assert not log_proves(verdict("hung"), Evidence(window_s=1.0))  # a quiet log: the stacks decide
    assert log_proves(verdict("dead"), Evidence(window_s=1.0)) and log_proves(verdict("diverged"), Evidence(window_s=1.0))
    assert not log_proves(verdict("healthy"), died)


def line(number: int, text: str, kind: LineKind, at: float, continues: bool = False) -> LogLine:
    return LogLine(number, text, LineInfo(kind=kind, continues=continues), time=at)


def test_a_log_that_grows_only_by_warnings_shows_no_progress_since_its_last_step():
    state = RunState(clock=lambda: 100.0)
    state.add_lines([line(1, "step 1 | loss 2.3", LineKind.NORMAL, 10.0)])
    assert state.warnings_only_s(12.0) is None
    state.add_lines([line(2, "x.py:3: UserWarning: slow", LineKind.WARNING, 20.0),
                     line(3, "  warnings.warn(", LineKind.WARNING, 20.0, continues=True)])
    assert state.warnings_only_s(50.0) == 40.0  # since the step line, not since the warning
    state.add_lines([line(4, "step 2 | loss 2.2", LineKind.NORMAL, 51.0)])
    assert state.warnings_only_s(52.0) is None


def test_a_log_of_warnings_alone_has_shown_no_progress_since_it_was_first_read():
    state = RunState(clock=lambda: 100.0)
    state.add_lines([line(1, "W1202 dynamo hit config.recompile_limit (8)", LineKind.WARNING, 30.0)])
    assert state.warnings_only_s(45.0) == 15.0
    state.start_new_log("/tmp/next.log")
    assert state.warnings_only_s(46.0) is None
