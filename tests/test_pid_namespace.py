"""The tests' PID namespace (scripts/test): pytest runs in one of its own, whose init (tests/pid1.py)
reaps orphans and passes SIGTERM on; a session outside one is refused before any test runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest
from tests.test_restart import children, wait_for

PID1 = Path(__file__).resolve().parent / "pid1.py"
IN_A_NEW_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, str(PID1)]
#: Leaves an orphan (bash's background `true`, bash gone), waits until it is reaped or 10 s went by.
LEAVE_AN_ORPHAN = """
import os, subprocess, time
orphan = int(subprocess.run(["bash", "-c", "true & echo $!"], capture_output=True, text=True).stdout)
deadline = time.monotonic() + 10
while os.path.exists(f"/proc/{orphan}") and time.monotonic() < deadline:
    time.sleep(0.01)
print("left a zombie" if os.path.exists(f"/proc/{orphan}") else "reaped")
"""
#: Exits 7 on SIGTERM, once it said it is ready.
EXIT_7_ON_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_the_tests_run_in_a_pid_namespace_of_their_own():
    assert conftest.OWN_PID_NAMESPACE, conftest.OUTSIDE_PID_NAMESPACE


def test_a_session_outside_a_pid_namespace_of_its_own_is_refused_before_any_test():
    """A pytest started here shares this session's namespace, whose PID 1 is not its parent."""
    this_test = f"{__file__}::test_the_tests_run_in_a_pid_namespace_of_their_own"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", this_test],
                          cwd=PID1.parents[1], capture_output=True, text=True, timeout=60)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout
    assert f"Exit: {conftest.OUTSIDE_PID_NAMESPACE}" in done.stdout
    assert "passed" not in done.stdout and "failed" not in done.stdout


def test_the_init_reaps_the_orphans_the_tests_leave():
    done = subprocess.run([*IN_A_NEW_NAMESPACE, sys.executable, "-c", LEAVE_AN_ORPHAN], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "reaped\n"), done.stderr


def test_the_init_passes_sigterm_on_and_exits_with_the_tests_status():
    namespace = subprocess.Popen([*IN_A_NEW_NAMESPACE, sys.executable, "-c", EXIT_7_ON_SIGTERM], stdout=subprocess.PIPE, text=True)
    try:
        assert namespace.stdout.readline() == "ready\n"
        [init] = wait_for(lambda: children(namespace.pid), "the namespace's init")
        os.kill(init, signal.SIGTERM)  # to the init alone: it ignores what it does not handle
        assert namespace.wait(timeout=30) == 7
    finally:
        namespace.kill()  # unshare: --kill-child ends the namespace with it
        namespace.wait()
        namespace.stdout.close()
