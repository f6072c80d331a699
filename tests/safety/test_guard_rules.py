"""The plan's guard rules as pure functions: which patterns select everything, which processes are
protected, when a whole process group may be signalled. No process is started or signalled here."""

from __future__ import annotations

import pytest

from console.actions.guards import ProcFacts, is_login_shell, matches_empty, parse_probe, protected_reason
from console.actions.restart import PlannedProcess, signal_targets


def facts(pid: int, *argv: str, comm: str = "python3", pulse: bool = False) -> ProcFacts:
    return ProcFacts(pid, "S", 1, pid, pid, 100 + pid, pulse, comm, argv)


@pytest.mark.parametrize("pattern", [".*", "", "x*", "(train)?", "^", "a|"])
def test_patterns_that_match_the_empty_string_select_everything(pattern):
    assert matches_empty(pattern)


@pytest.mark.parametrize("pattern", ["train\\.py", "sleep", "python3.*train_dflash", "(", ".+"])
def test_patterns_that_need_text_do_not(pattern):
    assert not matches_empty(pattern)  # "(" is invalid: the agent reports it, the guard lets it pass


@pytest.mark.parametrize(
    ("process", "reason"),
    [
        (facts(1, "/sbin/init"), "PID 1"),
        (facts(40, "python3", "-c", "import sys;n=int(sys.argv[1]);src=sys.stdin.buffer.read(n)", pulse=True),
         "a program Pulse runs"),
        (facts(41, "sshd: root@pts/0", comm="sshd"), "sshd"),
        (facts(42, "sshd: root@notty", comm="sshd-session"), "sshd"),
        (facts(43, "-bash", comm="bash"), "a login shell"),
        (facts(44, "bash", "-l", comm="bash"), "a login shell"),
        (facts(45, "/bin/zsh", "--login", comm="zsh"), "a login shell"),
        (facts(46, "bash", "-lc", "cd /w && python3 train.py", comm="bash"), "a login shell"),
        (facts(50, "bash", "train.sh", "-l", comm="bash"), None),  # -l belongs to the script
        (facts(51, "python3", "-u", "train.py", "-l"), None),
    ],
)
def test_protected_processes(process, reason):
    said = protected_reason(process, own_pids={7, 8})
    if reason is None:
        assert said is None
    else:
        assert reason in said
    assert is_login_shell(process) == (reason == "a login shell")


def test_pulse_and_its_ancestors_are_protected():
    assert protected_reason(facts(8, "python3", "-m", "console.cli", "restart"), own_pids={7, 8}).startswith(
        "Pulse itself or one of its ancestors"
    )


def planned(pid: int, pgid: int) -> PlannedProcess:
    return PlannedProcess(pid, pgid, 100 + pid, "S", "python3 train.py", None)


def test_a_group_is_signalled_only_when_all_of_it_is_planned_and_pulse_is_outside():
    run, worker = planned(10, 10), planned(11, 10)
    assert [s.dest for s in signal_targets([run, worker], {10: (10, 11)}, own_groups={3})] == ["-10"]
    # a member the plan does not know (a shell, a decoy, Pulse) keeps the group from being signalled
    assert [s.dest for s in signal_targets([run, worker], {10: (10, 11, 12)}, own_groups={3})] == ["10", "11"]
    # Pulse's (or an ancestor's) group is never signalled, even when every member seen is planned
    assert [s.dest for s in signal_targets([run, worker], {10: (10, 11)}, own_groups={10})] == ["10", "11"]
    # a group led by something that is not planned: each PID alone
    assert [s.dest for s in signal_targets([worker], {10: (10, 11)}, own_groups=set())] == ["11"]


def test_probe_lines_of_any_other_shape_are_ignored():
    probe = parse_probe(
        "self 9 S 1 9 9 500 - bash bash\x01-c\x01x\n"
        "proc 12 R 9 12 9 700 - python3 python3\x01train.py\x01\n"
        "proc twelve R 9 12 9 700 - python3 forged\n"
        "member 12 12\n"
        "pidfile text 12\n"
        "named 12 R 9 12 9 700 - python3 python3\x01train.py\n"
        "garbage\n"
    )
    assert [p.pid for p in probe.own] == [9]
    assert list(probe.procs) == [12] and probe.procs[12].argv == ("python3", "train.py")
    assert probe.group_members == {12: (12,)}
    assert (probe.pidfile, probe.pidfile_text, probe.named.pid) == ("text", "12", 12)
