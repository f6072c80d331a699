"""The py-spy runner with the real py-spy on real processes, locally and over the real sshd."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from console.observe.pyspy import classify_wait
from console.observe.pyspy_run import DumpError, dump, dump_tree
from console.remote.connect import make_target
from console.remote.target import LocalTarget
from tests.test_restart import Processes, alive, procs, wait_for  # noqa: F401  (procs is a fixture)

ROOT = Path(__file__).resolve().parents[1]
PY_SPY = str(ROOT / ".venv" / "bin" / "py-spy")
PROCS = ROOT / "tests" / "procs"


def start(procs: Processes, tmp_path: Path, program: str, ready: str) -> int:
    """Start a tests/procs program with stdout to a log and wait for its `ready` text there."""
    log = tmp_path / f"{program}.log"
    with log.open("w") as out:
        popen = procs.start([sys.executable, str(PROCS / program), "--tag", uuid.uuid4().hex], stdout=out)
    wait_for(lambda: ready in log.read_text(), f"{program} to print {ready!r}")
    return popen.pid


@pytest.fixture(params=["local", "ssh"])
async def target(request):
    if request.param == "local":
        made = LocalTarget()
    else:
        made = make_target(request.getfixturevalue("sshd").target_config())
    try:
        yield made
    finally:
        await made.close()


async def test_dump_finds_the_thread_waiting_on_the_queue(procs, tmp_path, target):
    pid = start(procs, tmp_path, "hung_queue.py", "step 1")
    process = await dump(target, pid, py_spy=PY_SPY)
    assert process.pid == pid
    main = next(t for t in process.threads if t.name == "MainThread")
    functions = [frame.function for frame in main.frames]
    assert "Queue.get" in functions and "pack_hidden" in functions
    assert classify_wait(main) == "queue get"
    helpers = [t for t in process.threads if (t.name or "").startswith("Helper-")]
    assert len(helpers) == 3 and all(classify_wait(t) == "lock/condition wait" for t in helpers)


async def test_text_dump_names_the_process(procs, tmp_path):
    pid = start(procs, tmp_path, "hung_queue.py", "step 1")
    process = await dump(LocalTarget(), pid, py_spy=PY_SPY, json_output=False)
    assert "hung_queue.py" in process.command
    assert process.python_version


async def test_dump_tree_includes_the_worker_processes(procs, tmp_path):
    pid = start(procs, tmp_path, "workers.py", "workers ready")
    dumps = await dump_tree(LocalTarget(), pid, py_spy=PY_SPY)
    assert dumps[0].pid == pid
    workers = dumps[1:]
    assert len(workers) >= 2
    for worker in workers:
        functions = [frame.function for t in worker.threads for frame in t.frames]
        assert "worker" in functions


async def test_vanished_pid_is_no_such_process(target):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(DumpError) as caught:
        await dump(target, gone.pid, py_spy=PY_SPY)
    assert caught.value.code == "no_such_process"
    assert "\n" not in str(caught.value)


async def test_missing_py_spy_says_how_to_install_it(target):
    with pytest.raises(DumpError) as caught:
        await dump(target, 1, py_spy="py-spy-not-installed")
    assert caught.value.code == "not_found"
    assert "pip install py-spy" in str(caught.value)


async def test_a_py_spy_path_that_is_not_there_is_named_not_blamed_on_an_install(target):
    """Issue 33: `dump --py-spy /nonexistent` blamed a missing install."""
    with pytest.raises(DumpError) as caught:
        await dump(target, 1, py_spy="/nonexistent/py-spy")
    assert caught.value.code == "not_found"
    assert "/nonexistent/py-spy was not found on the target" in str(caught.value)
    assert "pip install" not in str(caught.value)


async def test_timeout_kills_the_py_spy_it_started(procs, tmp_path, target):
    """A py-spy that never finishes (here it stops itself before becoming the real one) is killed by PID."""
    pid = start(procs, tmp_path, "hung_queue.py", "step 1")
    pid_file = tmp_path / "spy.pid"
    stuck = tmp_path / "bin" / "py-spy"
    stuck.parent.mkdir()
    stuck.write_text(f'#!/bin/bash\necho $$ > {pid_file}\nkill -STOP $$\nexec {PY_SPY} "$@"\n')
    stuck.chmod(0o755)
    with pytest.raises(DumpError) as caught:
        await dump(target, pid, py_spy=str(stuck), timeout=1.0)
    assert caught.value.code == "timeout"
    assert "--nonblocking" in str(caught.value)
    spy_pid = int(pid_file.read_text())
    wait_for(lambda: not alive(spy_pid), "the stuck py-spy to be killed")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
async def test_ptrace_denied_says_what_to_do(procs, tmp_path, target):
    pid = start(procs, tmp_path, "hung_queue.py", "step 1")
    unprivileged = tmp_path / "py-spy"
    unprivileged.write_text(f'#!/bin/bash\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {PY_SPY} "$@"\n')
    unprivileged.chmod(0o755)
    with pytest.raises(DumpError) as caught:
        await dump(target, pid, py_spy=str(unprivileged))
    assert caught.value.code == "permission_denied"
    assert "SYS_PTRACE" in str(caught.value) and "host PID" in str(caught.value)


async def test_a_process_that_is_not_python_is_unsupported(procs):
    sleeper = procs.start(["sleep", "60"])
    with pytest.raises(DumpError) as caught:
        await dump(LocalTarget(), sleeper.pid, py_spy=PY_SPY)
    assert caught.value.code == "unsupported_python"
