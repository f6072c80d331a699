"""The plan's guard rules as pure functions: which patterns select everything, which processes are
protected, when a whole process group may be signalled. No process is started or signalled here."""

from __future__ import annotations

import pytest

from console.actions.guards import ProcFacts, is_login_shell, matches_empty, parse_probe, protected_reason
from console.actions.restart import PlannedProcess, signal_targets
from console.remote.target import TargetError


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
    said = protected_reason(process, pulse_pids={7, 8})
    if reason is None:
        assert said is None
    else:
        assert reason in said
    assert is_login_shell(process) == (reason == "a login shell")


def test_pulse_and_its_ancestors_are_protected():
    assert protected_reason(facts(8, "python3", "-m", "console.cli", "restart"), pulse_pids={7, 8}).startswith(
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


def fact(kind: str, pid: int, argv: list[str]) -> dict:
    return {"ev": "process", "kind": kind, "pid": pid, "state": "S", "ppid": 1, "pgid": pid, "sid": 9,
            "start_ticks": 500 + pid, "started": 1796000000.0 + pid, "pulse": False, "comm": argv[0], "argv": argv}


def test_probe_records_are_read_by_kind():
    probe = parse_probe([
        fact("self", 9, ["bash", "-c", "x"]),
        fact("proc", 12, ["python3", "train.py"]),
        {"ev": "member", "pid": 12, "pgid": 12},
        {"ev": "pidfile", "status": "text", "text": "12", "mtime": 1796000100.0},
        {"ev": "lock", "status": "stale", "owner": {"pid": 77}},
        fact("named", 12, ["python3", "train.py"]),
    ])
    assert [p.pid for p in probe.own] == [9]
    assert list(probe.procs) == [12] and probe.procs[12].argv == ("python3", "train.py")
    assert probe.group_members == {12: (12,)}
    assert (probe.pidfile, probe.pidfile_text, probe.named.pid) == ("text", "12", 12)
    assert (probe.pidfile_mtime, probe.named.started) == (1796000100.0, 1796000012.0)
    assert (probe.lock, probe.lock_owner) == ("stale", {"pid": 77})


@pytest.mark.parametrize("broken", [{"ev": "member", "pid": 12}, {**fact("proc", 12, ["x"]), "pid": "twelve"},
                                    {**fact("proc", 12, ["x"]), "argv": None}])
def test_a_probe_record_of_another_shape_is_an_error_not_a_guess(broken):
    with pytest.raises(TargetError, match="the plan's probe answered a record it cannot read"):
        parse_probe([fact("self", 9, ["bash"]), broken])
