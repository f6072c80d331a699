"""The tests' PID namespace (scripts/test): pytest runs in one of its own, whose init (tests/pid1.py)
reaps orphans and passes SIGTERM on; outside one, conftest refuses every signal to another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest
from tests.test_restart import children, procs, wait_for  # noqa: F401  (procs is a fixture)

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


def test_outside_a_pid_namespace_a_signal_to_another_process_is_refused_and_it_lives(procs):
    sleeper = procs.start(["sleep", "60"])
    kill = conftest.refused_outside_a_pid_namespace(os.kill)
    with pytest.raises(conftest.SignalOutsidePidNamespace, match=rf"kill\({sleeper.pid}, 15\) refused: .*scripts/test"):
        kill(sleeper.pid, signal.SIGTERM)
    kill(sleeper.pid, 0)  # a probe sends nothing
    assert sleeper.poll() is None


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
