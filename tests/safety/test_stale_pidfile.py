"""A pidfile's PID is the run's only if it looks like the run (issue 30, U3), each case in its own PID namespace.

A pidfile naming a PID that now belongs to an unrelated service (a two-process group that
records every signal it gets) is stale when the service is not what `--match` finds, or when it
started after the pidfile was written: the plan says so, and nothing of the service is signalled.
A pidfile that is a symbolic link is refused, and the launch never replaces one.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from console.actions.restart import launch_argv
from console.observe.remote_process import launch
from console.remote.target import LocalTarget
from tests.safety.namespace import HEALTHY, Scene, alive, in_namespace, pids_with
from tests.test_restart import wait_for

#: A service of two processes (a parent and its worker, one process group) that writes down every
#: signal either gets, then goes on. Its argv never names the run.
SERVICE = """
import os, signal, subprocess, sys, time
folder = sys.argv[1]
def write(signum, frame):
    with open(os.path.join(folder, "signals"), "a") as out:
        out.write(f"{os.getpid()} {signal.Signals(signum).name}\\n")
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, write)
if sys.argv[2:] != ["worker"]:
    subprocess.Popen([sys.executable, sys.argv[0], folder, "worker"])
with open(os.path.join(folder, "ready"), "a") as out:
    out.write(f"{os.getpid()}\\n")
while True:
    time.sleep(3600)
"""


def start_service(scene: Scene) -> tuple[int, int]:
    """The unrelated service, in its own session, both processes ready: (parent PID, worker PID)."""
    program = scene.folder / "service.py"
    program.write_text(SERVICE)
    (scene.folder / "service").mkdir()
    parent = scene.start([sys.executable, str(program), str(scene.folder / "service")])
    ready = scene.folder / "service" / "ready"
    pids = wait_for(lambda: ready.exists() and len(ready.read_text().split()) == 2 and ready.read_text().split(),
                    "the service to be ready")
    [worker] = [int(pid) for pid in pids if int(pid) != parent.pid]
    return parent.pid, worker


def scene_pid_now_another_service(folder: str, case: str) -> dict:
    scene = Scene(folder)
    old = None
    if case == "the match does not find it":
        old = scene.start_run()
        flags = scene.flags()
    else:  # no match: the run ended an hour ago and its PID went to the service
        flags = scene.flags(match=None)
    service, worker = start_service(scene)
    scene.pidfile.write_text(f"{service}\n")
    if case == "it started after the pidfile was written":
        hour_ago = time.time() - 3600
        os.utime(scene.pidfile, (hour_ago, hour_ago))
    result = scene.pulse("restart", *flags, "--yes")
    record = scene.folder / "service" / "signals"
    signals = record.read_text() if record.exists() else ""
    return {**result, "service": service, "worker": worker, "service_alive": [alive(service), alive(worker)],
            "signals": signals, "old_alive": old is not None and alive(old.pid), "runs": pids_with(scene.tag),
            "pidfile": scene.pidfile.read_text(), "audit": scene.audit()}


@pytest.mark.parametrize("case", ["the match does not find it", "it started after the pidfile was written"])
def test_a_pidfile_naming_an_unrelated_service_is_stale_and_nothing_of_it_is_signalled(case, tmp_path):
    seen = in_namespace(scene_pid_now_another_service, folder=str(tmp_path), case=case)
    assert seen["rc"] == 0, seen
    why = ("it is not among the processes [run] match finds" if case == "the match does not find it"
           else "it started 3600 s after the pidfile was written")
    note = [line for line in seen["out"].splitlines() if line.startswith("  note: pidfile ")]
    assert note and f"names PID {seen['service']} (" in note[0] and f"which is not the run: {why}" in note[0], seen["out"]
    assert "nothing is signalled by it" in note[0]
    assert seen["service_alive"] == [True, True] and seen["signals"] == "", seen["signals"]
    assert not seen["old_alive"]
    [run] = seen["runs"]
    assert seen["pidfile"] == f"{run}\n"  # the launch wrote the new run's PID over the stale one
    started = seen["audit"][0]
    assert started["record"] == "started" and seen["service"] not in [p["pid"] for p in started["plan"]["processes"]]
    assert any(f"names PID {seen['service']} " in n for n in started["plan"]["notes"])


# -- a symbolic link as the pidfile -------------------------------------------------------------------


def scene_symlinked_pidfile(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    real = scene.folder / "real.pid"
    real.write_text(f"{run.pid}\n")
    scene.pidfile.symlink_to(real)
    result = scene.pulse("restart", *scene.flags(), "--yes")
    return {**result, "run_alive": alive(run.pid), "runs": pids_with(scene.tag), "new_logs": scene.new_logs(),
            "link": os.readlink(scene.pidfile), "real": real.read_text(), "run": run.pid, "audit": scene.audit()}


def test_a_symlinked_pidfile_is_refused_before_anything_is_stopped(tmp_path):
    seen = in_namespace(scene_symlinked_pidfile, folder=str(tmp_path))
    assert seen["rc"] == 2, seen
    assert f"pidfile {tmp_path}/run.pid is a symbolic link (to {tmp_path}/real.pid)" in seen["err"]
    assert "--force does not override" in seen["err"] and len(seen["err"].splitlines()) == 1
    assert seen["run_alive"] and seen["runs"] == [seen["run"]] and seen["new_logs"] == [] and seen["audit"] == []
    assert seen["link"] == f"{tmp_path}/real.pid" and seen["real"] == f"{seen['run']}\n"


def scene_symlink_at_launch(folder: str) -> dict:
    scene = Scene(folder)
    real = scene.folder / "real.pid"
    real.write_text("4127\n")
    scene.pidfile.symlink_to(real)  # put there after the plan, before the launch writes the PID
    launched = asyncio.run(launch(
        LocalTarget(), list(launch_argv(f"{sys.executable} {HEALTHY} --tag {scene.tag}")), cwd=folder,
        log=str(scene.old_log), pidfile=str(scene.pidfile), timeout=20.0,
    ))
    return {"pidfile_error": launched.pidfile_error, "alive": alive(launched.ref.pid),
            "is_link": scene.pidfile.is_symlink(), "real": real.read_text()}


def test_the_launch_never_replaces_a_symlinked_pidfile(tmp_path):
    seen = in_namespace(scene_symlink_at_launch, folder=str(tmp_path))
    assert seen["alive"]  # the run started; only its PID was not written through or over the link
    assert seen["pidfile_error"].startswith(f"{tmp_path}/run.pid is a symbolic link (to {tmp_path}/real.pid): not replaced")
    assert seen["is_link"] and seen["real"] == "4127\n"


@pytest.mark.parametrize(("started_after_s", "matched", "stale"), [
    (-3600.0, None, None),  # started long before its pidfile was written: the run
    (1.5, None, None),  # a coarse (whole-second) mtime: still the run
    (10.0, None, "it started 10 s after the pidfile was written (the PID was handed to another process)"),
    (-3600.0, {12}, None),
    (-3600.0, {13}, "it is not among the processes [run] match finds"),
])
def test_a_pidfiles_pid_is_the_run_only_if_it_looks_like_it(started_after_s, matched, stale):
    from console.actions.guards import Probe, ProcFacts, pidfile_stale_reason

    written = 1796000000.0
    named = ProcFacts(12, "S", 1, 12, 12, 500, False, "python3", ("python3", "train.py"), written + started_after_s)
    probe = Probe((), {}, {}, "text", "12\n", named, pidfile_mtime=written)
    assert pidfile_stale_reason(probe, matched) == stale
