"""The one remote-process primitive (process agent + remote_process) on real processes, locally and over the real sshd.

Start learns the identity before the process can write; a signal goes only while the PID is
still that process; a group is stopped whole, SIGKILL for what ignores SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest

from console.actions.audit import StepStatus
from console.actions.custom import stream_grouped
from console.observe.procfs import stat_of
from console.observe.remote_process import (
    AgentRefused,
    ProcessRef,
    SignalTarget,
    launch,
    probe,
    read_processes,
    send_signal,
    start,
    stop_group,
)
from console.remote.connect import make_target
from console.remote.target import LocalTarget, TargetError
from tests.test_restart import Processes, alive, procs, wait_for  # noqa: F401  (procs is a fixture)


@pytest.fixture(params=["local", "ssh"])
async def target(request):
    made = LocalTarget() if request.param == "local" else make_target(request.getfixturevalue("sshd").target_config())
    try:
        yield made
    finally:
        await made.close()


async def read_all(started) -> bytes:
    out = b""
    while chunk := await started.read():
        out += chunk
    return out


def start_ticks(pid: int) -> int:
    return stat_of(pid)["start_ticks"]


async def test_start_names_the_process_before_its_first_word_and_keeps_its_status(target):
    started = await start(target, ["bash", "-c", 'echo "pid $$"; echo oops >&2; exit 3'], merge_stderr=True)
    try:
        assert await read_all(started) == f"pid {started.ref.pid}\noops\n".encode()
        assert await started.wait() == 3
    finally:
        await started.aclose()


async def test_a_program_that_cannot_start_is_status_127_with_its_reason(target):
    started = await start(target, ["no-such-program-anywhere"])
    try:
        assert await read_all(started) == b""
        assert await started.wait() == 127
        assert "cannot run no-such-program-anywhere: No such file or directory" in started.stderr
    finally:
        await started.aclose()


async def test_a_signal_goes_only_while_the_pid_is_still_that_process(procs, target):
    run = procs.start(["sleep", "300"])
    real = ProcessRef(run.pid, start_ticks(run.pid))
    other_start = ProcessRef(run.pid, real.start_ticks + 1)
    assert await send_signal(target, "TERM", [SignalTarget(other_start)]) == {run.pid: "reused"}
    assert alive(run.pid)
    assert await send_signal(target, "TERM", [SignalTarget(real)]) == {run.pid: "sent"}
    run.wait(timeout=10)
    assert await send_signal(target, "KILL", [SignalTarget(real)]) == {run.pid: "gone"}


async def test_read_processes_gives_state_group_and_start_of_those_that_exist(procs, target):
    run = procs.start(["sleep", "300"])
    found = await read_processes(target, [run.pid, 0x3FFFFFFF])
    assert list(found) == [run.pid]
    assert (found[run.pid].pgid, found[run.pid].start_ticks) == (run.pid, start_ticks(run.pid))
    assert found[run.pid].state in "SR"


async def test_stop_ends_the_whole_group_and_kills_what_ignores_sigterm(procs, target, tmp_path: Path):
    # A shell that ignores SIGTERM, with a child that inherits the ignoring: only SIGKILL ends them.
    started = await start(target, ["bash", "-c", "trap '' TERM; sleep 300 & echo $!; wait"])
    try:
        line = b""
        while not line.endswith(b"\n"):
            line += await started.read()
        child = int(line)
        procs.adopt(child)
        procs.adopt(started.ref.pid)
        assert await stop_group(target, started.ref, grace_s=0.3) == "killed"
        wait_for(lambda: not alive(child) and not alive(started.ref.pid), "the group to be gone")
        assert await stop_group(target, started.ref, grace_s=0.3) == "gone"
    finally:
        await started.aclose()


async def test_launch_detaches_appends_to_its_log_and_writes_the_pidfile_by_rename(procs, target, tmp_path: Path):
    pidfile = tmp_path / "run.pid"
    os.mkfifo(pidfile)  # opened for writing, a FIFO would block the launch: it must be replaced, never opened
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.log").write_text("before\n")
    launched = await launch(target, [sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid())"],
                            cwd=str(tmp_path), log=str(tmp_path / "logs" / "run.log"),
                            pidfile=str(pidfile))
    procs.adopt(launched.ref.pid)
    log = tmp_path / "logs" / "run.log"
    wait_for(lambda: log.read_text() == "before\nTrue\n", "the launched program's line after the old one")
    assert launched.pidfile_error is None and pidfile.is_file() and pidfile.read_text() == f"{launched.ref.pid}\n"


async def test_a_launch_in_a_folder_that_is_not_there_is_refused_with_the_reason(target, tmp_path: Path):
    with pytest.raises(AgentRefused, match=r"pulse-process: cannot cd .*/nowhere: No such file or directory$"):
        await launch(target, ["true"], cwd=str(tmp_path / "nowhere"), log="run.log")


async def test_without_python_on_the_target_the_error_says_which_setting(tmp_path: Path):
    target = LocalTarget(python=str(tmp_path / "no-python"))
    with pytest.raises(TargetError, match=r"set \[target\] python"):
        await read_processes(target, [1])
    with pytest.raises(TargetError, match=r"set \[target\] python"):
        await start(target, ["true"])


async def test_probe_sees_its_own_ancestry_the_groups_and_the_pidfile_without_opening_a_fifo(procs, target, tmp_path: Path):
    leader = procs.start(["bash", "-c", "sleep 300 & wait"])
    wait_for(lambda: Path(f"/proc/{leader.pid}/task/{leader.pid}/children").read_text().strip(), "the group's child")
    fifo = tmp_path / "run.pid"
    os.mkfifo(fifo)
    records = await probe(target, [leader.pid], str(fifo), "no-such-mark")
    own = [r for r in records if r["ev"] == "process" and r["kind"] == "self"]
    if isinstance(target, LocalTarget):
        assert os.getpid() in {r["pid"] for r in own}  # locally: Pulse itself and its ancestors
    else:
        assert {r["comm"] for r in own} & {"sshd", "sshd-session"}  # over SSH: the session's chain up to sshd
    (proc,) = [r for r in records if r["ev"] == "process" and r["kind"] == "proc"]
    assert (proc["pid"], proc["pgid"], proc["argv"]) == (leader.pid, leader.pid, ["bash", "-c", "sleep 300 & wait"])
    assert len([r for r in records if r["ev"] == "member" and r["pgid"] == leader.pid]) == 2
    assert [r for r in records if r["ev"] == "pidfile"] == [{"ev": "pidfile", "status": "notregular", "text": "", "mtime": None}]


async def test_a_started_command_gets_sigpipe_back_as_a_shell_would_give_it(target):
    """Python ignores SIGPIPE and an ignored signal survives exec: `yes | head` would never end."""
    started = await start(target, ["bash", "-c", 'yes | head -1; echo "${PIPESTATUS[0]}"'])
    try:
        assert await read_all(started) == b"y\n141\n"
    finally:
        await started.aclose()


async def test_a_launchs_log_and_pidfile_are_where_every_other_reader_looks_not_under_its_folder(procs, tmp_path: Path, monkeypatch):
    """The run starts in `proj`; its log and pidfile are named as the follower, the agents and the
    verify step see them from where the target's shell starts (config puts a relative one under cwd)."""
    monkeypatch.chdir(tmp_path)  # where this machine's shell starts, as a remote one starts in the home
    (tmp_path / "proj").mkdir()
    old_umask = os.umask(0o022)
    try:
        launched = await launch(LocalTarget(), ["bash", "-c", "pwd"], cwd="proj", log="proj/logs/run.log",
                                pidfile="proj/run.pid")
    finally:
        os.umask(old_umask)
    procs.adopt(launched.ref.pid)
    log = tmp_path / "proj" / "logs" / "run.log"
    wait_for(lambda: log.exists() and log.read_text() == f"{tmp_path / 'proj'}\n", "the run's folder in its log")
    pidfile = tmp_path / "proj" / "run.pid"
    assert pidfile.read_text() == f"{launched.ref.pid}\n" and stat.S_IMODE(pidfile.stat().st_mode) == 0o644
    assert not (tmp_path / "proj" / "proj").exists()


def slow_python(tmp_path: Path, seconds: float) -> str:
    """A Python that takes `seconds` to start: a login profile that stalls (NFS home, a lock)."""
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(f'#!/bin/bash\nsleep {seconds}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def running_with(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tag.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


async def test_a_start_given_up_before_its_identity_came_leaves_nothing_running(tmp_path: Path):
    tag = f"pulse-abandoned-{os.getpid()}"
    target = LocalTarget(python=slow_python(tmp_path, 1.0))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await start(target, ["bash", "-c", f"exec sleep 300 # {tag}", tag])
    assert running_with(tag) == []


async def test_a_steps_timeout_counts_a_start_that_hangs(tmp_path: Path):
    target = LocalTarget(python=slow_python(tmp_path, 3.0))
    events = [event async for event in stream_grouped(target, "echo late", step="slow", timeout_s=0.5)]
    assert [(e.status, e.detail) for e in events] == [(StepStatus.FAILED, "timed out after 0.5 s before it started")]
