"""Fixtures of the fault suite: an sshd of each test's own (tests stop, kill and freeze it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import SESSION_PATH, SshServer, start_sshd


@pytest.fixture
def own_sshd(tmp_path: Path) -> Iterator[SshServer]:
    """A server this test may stop, restart, kill the connections of, or SIGSTOP; stopped by PID after."""
    folder = tmp_path / "sshd"
    home = folder / "home"
    home.mkdir(parents=True)
    # A home of its own: these tests SIGKILL login shells, and one killed inside the real home's
    # `pyenv rehash` would leave pyenv's lock behind and stall every login shell on the box for 60 s.
    server = start_sshd(folder, SetEnv=f"PATH={SESSION_PATH} HOME={home}")
    try:
        yield server
    finally:
        server.resume()
        server.stop()
