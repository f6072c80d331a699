"""Shared fixtures: a real OpenSSH server on 127.0.0.1 and a stand-in container (see tests/sshd.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.observe.agent import in_pid_namespace
from tests.sshd import PidNamespace, SshServer, start_sshd

#: The project's rule: tests signal processes only inside a PID namespace of their own, where no
#: PID can name a process of the machine's and whatever they leave dies with it. scripts/test runs
#: pytest there as the child of tests/pid1.py, PID 1; anywhere else the session is refused up front
#: (refused later, at a signal, the processes a test started would outlive it).
def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


# pytest is PID 1's child; a pytest-xdist worker is the child of that pytest.
OWN_PID_NAMESPACE = in_pid_namespace() and (
    1 in (os.getpid(), os.getppid()) or ("PYTEST_XDIST_WORKER" in os.environ and _parent_of(os.getppid()) == 1)
)
OUTSIDE_PID_NAMESPACE = (
    "the tests signal the processes they start, so they run only in a PID namespace of their own: "
    "run scripts/test, or put `unshare --pid --fork --mount-proc --kill-child python3 tests/pid1.py` before pytest"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not OWN_PID_NAMESPACE:
        pytest.exit(OUTSIDE_PID_NAMESPACE, returncode=pytest.ExitCode.USAGE_ERROR)


# Tests kill login shells (fault injection, timeouts); one killed inside `pyenv rehash` leaves
# a lock that makes every later login shell of this user wait 60 s. Bound the wait for the
# shells the tests start locally (the test sshd sets the same for its sessions).
os.environ.setdefault("PYENV_REHASH_TIMEOUT", "2")

#: No single test may take longer: a hang fails that test instead of stalling the whole run.
TEST_LIMIT_S = 240


class TimeLimitExceeded(Exception):
    """Raised in the test's thread when it ran past TEST_LIMIT_S."""


def _time_out(signum, frame):
    raise TimeLimitExceeded(f"test ran past {TEST_LIMIT_S} s (a hang?)")


@pytest.fixture(autouse=True)
def test_time_limit() -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _time_out)
    signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """One sshd for the whole session; fault tests restart it, so check `.pid` rather than keep it."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pid_namespace() -> Iterator[PidNamespace]:
    """A fresh PID + mount namespace reachable as `pct exec <id> --` (its `.container`)."""
    namespace = PidNamespace()
    try:
        yield namespace
    finally:
        namespace.close()
