"""Issue 30 row U8: `--ssh-config` and `--known-hosts` get the TOML config's rules.

`--ssh-config /dev/zero`, a FIFO or a 1 GiB file grew memory from 1.8 to 6.4 GB in 15 s with
SIGINT ignored (asyncssh read it in a thread Ctrl+C cannot stop), and the FIFO hung. Each is
now refused unread in one line, exit 2, for the flags and the config's keys alike; the SSH layer
checks every file asyncssh will read again at each connection (~/.ssh/config included), so a
target built without the flags (the console's, a fleet's) is held to the same rules.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from console.config import SSH_CONFIG_FILE, read_regular_file
from console.remote.ssh import SshTarget
from console.remote.target import TargetError
from tests.safety.namespace import HEALTHY, Scene, in_namespace

#: Far above what `pulse check` takes to refuse a file, far below what reading 1 GiB would take.
ENDS_WITHIN_S = 30
#: The CLI's own memory is ~40 MiB; reading /dev/zero took gigabytes.
MEMORY_BOUND_MIB = 200


def make_bad_file(path: Path, kind: str) -> None:
    """`path` made into what an operator might point a flag at by mistake."""
    if kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        with path.open("wb") as big:
            big.truncate(1 << 30)  # sparse: 1 GiB that takes no disk


def scene_pulse_check(folder: str, argv: list[str], bad: str, kind: str, home_ssh_config: bool = False) -> dict:
    """`pulse ARGV` beside a run, with `bad` made a `kind` file (or ~/.ssh/config, with `home_ssh_config`)."""
    scene = Scene(folder)  # its folder is $HOME
    if home_ssh_config:
        (scene.folder / ".ssh").mkdir()
    make_bad_file(scene.folder / bad, kind)
    scene.start([sys.executable, str(HEALTHY), "--tag", scene.tag])
    started = time.monotonic()
    seen = scene.pulse(*argv)
    seen["elapsed_s"] = time.monotonic() - started
    seen["max_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return seen


REFUSALS = {
    "/dev/zero": "not a regular file: {what} is a text file",
    "FIFO": "not a regular file: {what} is a text file",
    "1 GiB file": "larger than {mib} MiB: not {what}",
}
FLAGS = {"--ssh-config": ("an ssh_config", 1), "--known-hosts": ("a known_hosts file", 16)}


@pytest.mark.parametrize("flag", list(FLAGS))
@pytest.mark.parametrize("kind", list(REFUSALS))
def test_a_flag_naming_a_device_a_fifo_or_a_huge_file_is_one_line_exit_2(tmp_path: Path, flag: str, kind: str) -> None:
    path = str(tmp_path / "given")
    seen = in_namespace(scene_pulse_check, folder=str(tmp_path), bad="given", kind=kind,
                        argv=["check", "--host", "gpu-box", "--match", "train_pulse_safety", flag, path])
    what, mib = FLAGS[flag]
    assert seen["rc"] == 2, seen
    assert seen["err"] == f"{flag}: {path}: {REFUSALS[kind].format(what=what, mib=mib)}\n"
    assert seen["elapsed_s"] < ENDS_WITHIN_S and seen["max_rss_mib"] < MEMORY_BOUND_MIB, seen


@pytest.mark.parametrize("key", ["ssh_config", "known_hosts"])
def test_the_config_keys_are_held_to_the_same_rules(tmp_path: Path, key: str) -> None:
    config = tmp_path / "run.toml"
    config.write_text(f'[target]\nhost = "gpu-box"\n{key} = "{tmp_path / "given"}"\n[run]\nmatch = "train_pulse_safety"\n')
    seen = in_namespace(scene_pulse_check, folder=str(tmp_path), bad="given", kind="FIFO", argv=["check", str(config)])
    what = FLAGS[f"--{key.replace('_', '-')}"][0]
    assert seen["rc"] == 2, seen
    assert seen["err"] == f"{config}: target.{key}: {tmp_path / 'given'}: not a regular file: {what} is a text file\n"


def test_a_fifo_as_the_default_ssh_config_is_one_line_not_a_hang(tmp_path: Path) -> None:
    """No flag names it: asyncssh reads ~/.ssh/config by itself, and the SSH layer checks it first."""
    seen = in_namespace(scene_pulse_check, folder=str(tmp_path), bad=".ssh/config", kind="FIFO", home_ssh_config=True,
                        argv=["check", "--host", "127.0.0.1", "--match", "train_pulse_safety"])
    assert seen["rc"] == 2, seen
    assert seen["err"] == (
        f"pulse check: 127.0.0.1: {tmp_path}/.ssh/config: not a regular file: an ssh_config is a text file; fix the file\n"
    )
    assert seen["elapsed_s"] < ENDS_WITHIN_S, seen


@pytest.mark.parametrize("key", ["ssh_config", "known_hosts"])
def test_a_target_built_without_the_flags_is_checked_at_its_connection(sshd, tmp_path: Path, key: str) -> None:
    """The console and the fleets build targets from the config; a file swapped for a FIFO since is still refused."""
    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    target = SshTarget(sshd.target_config(**{key: str(fifo)}))

    async def attempt() -> str:
        try:
            await target.run("true", 30)
        except TargetError as exc:
            return str(exc)
        finally:
            await target.close()
        return "connected"

    said = asyncio.run(asyncio.wait_for(attempt(), ENDS_WITHIN_S))
    what = "an ssh_config" if key == "ssh_config" else "a known_hosts file"
    assert said == f"{sshd.alias}: {fifo}: not a regular file: {what} is a text file; fix the file"


def test_dev_null_stays_the_idiom_for_an_empty_file() -> None:
    """`-F /dev/null` and `UserKnownHostsFile /dev/null` are how OpenSSH users say "none": read as empty."""
    assert read_regular_file("/dev/null", SSH_CONFIG_FILE) == b""
