"""Fixtures of the fault suite: an sshd of each test's own (tests stop, kill and freeze it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import SshServer, start_sshd


@pytest.fixture
def own_sshd(tmp_path: Path) -> Iterator[SshServer]:
    """A server this test may stop, restart, kill the connections of, or SIGSTOP; stopped by PID after."""
    folder = tmp_path / "sshd"
    folder.mkdir()
    server = start_sshd(folder)
    try:
        yield server
    finally:
        server.resume()
        server.stop()
