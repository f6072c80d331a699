"""One restart of a run at a time (issue 30, U2), each case in its own PID namespace.

Restarts of one run started at once: exactly one takes the run's lock and launches; the others
say who holds it and since when, and signal nothing. A lock whose holder was killed outright is
taken over, and the plan and the lock step say whose it was. A restart interrupted, or whose
Pulse dies with its SSH connection, lets its lock go.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.safety.namespace import IGNORE_SIGTERM, SCENE_LIMIT_S, Scene, alive, in_namespace, pids_with
from tests.sshd import start_sshd
from tests.test_restart import wait_for

#: What a restart that finds the run's lock held says, before the holder's name.
HELD = "another restart of this run holds its lock "


def _lock_path(scene: Scene):
    return scene.pidfile.with_name(scene.pidfile.name + ".pulse-lock")


def _finish(process) -> dict:
    out, err = process.communicate(timeout=SCENE_LIMIT_S - 10)
    return {"rc": process.returncode, "out": out, "err": err, "pid": process.pid}


def _read_until(process, prefix: str) -> list[str]:
    """`process`'s stdout lines up to the first that starts with `prefix`."""
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"no line starting {prefix!r}: {''.join(lines)}")


# -- three restarts of one run at once ---------------------------------------------------------


def scene_three_restarts_at_once(folder: str) -> dict:
    scene = Scene(folder)
    # The run waits out the grace before SIGKILL: the restart that wins holds the lock for seconds.
    old = scene.start_run(IGNORE_SIGTERM)
    restarts = [scene.pulse_process("restart", *scene.flags(), "--yes", "--grace", "1") for _ in range(3)]
    results = [_finish(process) for process in restarts]
    return {
        "results": results,
        "old_alive": alive(old.pid),
        "runs": pids_with(scene.tag),
        "pidfile": scene.pidfile.read_text(),
        "lock_left": _lock_path(scene).read_text() if _lock_path(scene).exists() else None,
        "audit": scene.audit(),
    }


def test_three_restarts_at_once_launch_one_run_and_the_others_name_the_holder(tmp_path):
    seen = in_namespace(scene_three_restarts_at_once, folder=str(tmp_path))
    results = seen["results"]
    winners = [r for r in results if "[ ok ] launch: PID " in r["out"]]
    assert len(winners) == 1, results
    [winner] = winners
    assert winner["rc"] == 0, winner
    for loser in (r for r in results if r is not winner):
        assert loser["rc"] != 0, loser
        said = [line for line in (loser["out"] + loser["err"]).splitlines() if HELD in line]
        assert said, loser
        assert f"by Pulse PID {winner['pid']} on " in said[0] and " since " in said[0], said
        assert "stop: SIGTERM" not in loser["out"] and "launch: PID" not in loser["out"]
    assert not seen["old_alive"]
    assert seen["runs"] == [int(seen["pidfile"])]  # exactly one run, the one the pidfile names
    assert seen["lock_left"] == ""  # released
    finished = [e for e in seen["audit"] if e["record"] == "finished"]
    assert sum(e["outcome"].startswith("ok") for e in finished) == 1
    for entry in finished:
        assert entry["outcome"].startswith(("ok", f"failed: lock: {HELD}")), entry["outcome"]


# -- two runs do not block each other ---------------------------------------------------------------


def scene_two_runs_at_once(folder: str) -> dict:
    first, second = Scene(folder, tag="train_pulse_first"), Scene(folder, tag="train_pulse_second")
    second.pidfile = second.folder / "second.pid"
    for scene in (first, second):
        scene.start_run(IGNORE_SIGTERM)
    restarts = [scene.pulse_process("restart", *scene.flags(), "--yes", "--grace", "1") for scene in (first, second)]
    return {"results": [_finish(process) for process in restarts],
            "runs": [pids_with(scene.tag) for scene in (first, second)]}


def test_restarts_of_two_runs_at_once_do_not_block_each_other(tmp_path):
    seen = in_namespace(scene_two_runs_at_once, folder=str(tmp_path))
    assert [r["rc"] for r in seen["results"]] == [0, 0], seen
    assert [len(runs) for runs in seen["runs"]] == [1, 1]


# -- a lock whose holder was killed outright ---------------------------------------------------------


def scene_holder_killed(folder: str) -> dict:
    scene = Scene(folder)
    old = scene.start_run(IGNORE_SIGTERM)
    first = scene.pulse_process("restart", *scene.flags(), "--yes", "--grace", "30")
    _read_until(first, "[....] stop: SIGTERM to")
    owner = json.loads(_lock_path(scene).read_text())
    # The holder and its Pulse die at once, as a machine or a container that goes down would take them.
    os.kill(owner["holder_pid"], signal.SIGKILL)
    first.kill()
    first.communicate(timeout=10)
    wait_for(lambda: not alive(owner["holder_pid"]), "the holder to be gone")
    left = _lock_path(scene).read_text()
    second = scene.pulse("restart", *scene.flags(), "--yes", "--grace", "1")
    return {"first": first.pid, "owner": owner, "left": left, "second": second, "old_alive": alive(old.pid),
            "runs": pids_with(scene.tag), "pidfile": scene.pidfile.read_text(), "audit": scene.audit()}


def test_a_lock_left_by_a_dead_holder_is_taken_over_and_the_plan_says_whose(tmp_path):
    seen = in_namespace(scene_holder_killed, folder=str(tmp_path))
    assert json.loads(seen["left"])["pid"] == seen["first"]  # the killed owner's record stayed behind
    second = seen["second"]
    assert second["rc"] == 0, second
    whose = f"restart by Pulse PID {seen['first']} on "
    plan_note = [line for line in second["out"].splitlines() if line.startswith("  note: the restart lock ")]
    assert plan_note and whose in plan_note[0] and "whose holder is gone: it will be taken over" in plan_note[0]
    step = [line for line in second["out"].splitlines() if line.startswith("[WARN] lock: taken over from ")]
    assert step and whose in step[0], second["out"]
    assert not seen["old_alive"] and seen["runs"] == [int(seen["pidfile"])]
    lock_steps = [s for s in seen["audit"][-1]["steps"] if s["step"] == "lock"]
    assert lock_steps[0]["status"] == "warning" and whose in lock_steps[0]["detail"]


# -- an interrupted restart, and one whose Pulse dies over SSH, let the lock go ---------------------


def scene_restart_cut(folder: str, how: str) -> dict:
    scene = Scene(folder)
    old = scene.start_run(IGNORE_SIGTERM)
    flags = [*scene.flags(), "--yes", "--grace", "30"]
    server = None
    if how == "Pulse killed over SSH":
        (scene.folder / "sshd").mkdir()
        server = start_sshd(scene.folder / "sshd")
        flags += ["--host", server.alias, "--ssh-config", str(server.ssh_config),
                  "--known-hosts", str(server.known_hosts)]
    try:
        first = scene.pulse_process("restart", *flags)
        _read_until(first, "[....] stop: SIGTERM to")
        holder = json.loads(_lock_path(scene).read_text())["holder_pid"]
        first.send_signal(signal.SIGINT if how == "interrupted" else signal.SIGKILL)
        first.communicate(timeout=20)
        # Nothing on the target outlives its Pulse: the holder sees its stdin end and lets go.
        wait_for(lambda: not alive(holder), "the holder to let go")
        left = _lock_path(scene).read_text()
        second = scene.pulse("restart", *scene.flags(), "--yes", "--grace", "1")
    finally:
        if server is not None:
            server.stop()
    return {"rc": first.returncode, "left": left, "second": second, "old_alive": alive(old.pid),
            "runs": pids_with(scene.tag)}


@pytest.mark.parametrize("how", ["interrupted", "Pulse killed over SSH"])
def test_a_restart_cut_short_lets_its_lock_go(how, tmp_path):
    seen = in_namespace(scene_restart_cut, folder=str(tmp_path), how=how)
    assert seen["rc"] == (128 + signal.SIGINT if how == "interrupted" else -signal.SIGKILL), seen
    assert seen["left"] == ""  # emptied by its holder: nothing stale
    second = seen["second"]
    assert second["rc"] == 0, second
    assert "[ ok ] lock: held (" in second["out"] and "taken over" not in second["out"]
    assert not seen["old_alive"] and len(seen["runs"]) == 1


def test_a_lock_owner_is_described_in_one_safe_line():
    from console.actions.guards import describe_lock_owner

    since = time.time() - 5
    text = describe_lock_owner({"what": "restart", "pid": 4127, "host": "gpu\x1b[2Kbox", "user": "ana", "since": since,
                                "now": since + 5})
    assert text.startswith("restart by Pulse PID 4127 on gpu") and "\x1b" not in text and text.endswith("(5 s ago)")
    assert describe_lock_owner(None) == "an owner that left no record"
    assert "\n" not in describe_lock_owner({"since": 1e300, "host": "a\nb"})
