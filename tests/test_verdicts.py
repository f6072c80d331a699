"""The one table of verdicts: every column other modules used to list on their own, read from it."""

from console.verdicts import KINDS, NEXT_STEPS, VERDICTS, is_problem, level, severity


def test_each_verdict_has_one_row_with_a_step_the_console_can_bind():
    assert len(set(VERDICTS)) == len(VERDICTS) == len(KINDS)
    assert len({k.severity for k in KINDS.values()}) == len(KINDS)  # a strict order for alerts
    assert all(k.step is None or k.step in NEXT_STEPS for k in KINDS.values())


def test_levels_follow_severity_and_only_healthy_is_no_problem():
    assert [n for n in VERDICTS if not is_problem(n)] == ["healthy"]
    crit = {n for n in VERDICTS if level(n) == "crit"}
    assert crit == {n for n in VERDICTS if severity(n) >= severity("hung")}
    assert is_problem("a name from a newer journal")  # an unknown name is never taken for healthy


def test_the_stuck_sets_are_one_table_not_two_tuples():
    # What the stacks decide and what makes a rate history differ on purpose: a buffered run's last rate is
    # old but it works; a hung or unknown one's is history, and its stacks decide both.
    assert {n for n, k in KINDS.items() if k.stacks_decide} == {"hung", "unknown", "buffered", "oom"}
    assert {n for n, k in KINDS.items() if k.rate_is_history} == {"hung", "dead", "oom", "launch_failed", "unknown", "stopped"}
