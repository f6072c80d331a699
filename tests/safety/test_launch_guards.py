"""No duplicate runs, and the launch runs what the operator typed (issue 11, rows 9, 10, 13, 14).

Each case runs in its own PID namespace: a pidfile that is not a plain small file is refused
before anything is stopped; a launch with environment assignments in front works; a launch
that dies shows its log's last lines; a launch that daemonizes is found by its new
processes, not failed; a grace that is not a finite number of seconds never starts the stop.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path

import pytest

from console.actions.audit import ActionRefused
from console.actions.restart import RestartPlan, execute_restart, launch_argv, plan_restart
from console.observe.remote_process import launch
from console.config import Config, RunConfig
from console.remote.target import LocalTarget
from tests.safety.namespace import HEALTHY, PROCS, Scene, alive, in_namespace, pids_with

# -- row 9: a pidfile that is a FIFO, or 3 GB ----------------------------------------------------


def scene_odd_pidfile(folder: str, kind: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    if kind == "FIFO":
        os.mkfifo(scene.pidfile)
    else:
        with open(scene.pidfile, "wb") as big:
            big.truncate(3 << 30)  # sparse: 3 GB of NULs that take no disk
    result = scene.pulse("restart", *scene.flags(), "--yes")
    return {**result, "run_alive": alive(run.pid), "runs": pids_with(scene.tag), "new_logs": scene.new_logs()}


@pytest.mark.parametrize("kind", ["FIFO", "3 GB file"])
def test_a_pidfile_that_is_not_a_small_regular_file_is_refused_before_any_stop(kind, tmp_path):
    seen = in_namespace(scene_odd_pidfile, folder=str(tmp_path), kind=kind)
    assert seen["rc"] == 2, seen
    why = "is not a regular file" if kind == "FIFO" else f"is {3 << 30} bytes, not a pidfile"
    assert why in seen["err"]
    assert seen["run_alive"] and len(seen["runs"]) == 1 and seen["new_logs"] == []


def scene_fifo_at_launch(folder: str) -> dict:
    scene = Scene(folder)
    os.mkfifo(scene.pidfile)  # put there after the plan, before the launch writes the PID
    launched = asyncio.run(launch(
        LocalTarget(), list(launch_argv(f"{sys.executable} {HEALTHY} --tag {scene.tag}")), cwd=folder,
        log=str(scene.old_log), pidfile=str(scene.pidfile), timeout=20.0,
    ))
    pid = launched.ref.pid
    return {"pidfile_error": launched.pidfile_error, "pid": pid, "pidfile": scene.pidfile.read_text(),
            "regular": scene.pidfile.is_file(), "alive": alive(pid)}


def test_the_launch_never_blocks_on_a_fifo_in_the_pidfiles_place(tmp_path):
    seen = in_namespace(scene_fifo_at_launch, folder=str(tmp_path))
    assert seen["pidfile_error"] is None and seen["alive"]
    assert seen["regular"] and seen["pidfile"] == f"{seen['pid']}\n"


# -- rows 8, 14: nothing is launched while a process of the run is alive -------------------------


def scene_copy_appears_after_the_plan(folder: str) -> dict:
    from console.actions.restart import plan_restart
    from console.cli import build_command_parser
    from console.config import load_from_args

    scene = Scene(folder)
    run = scene.start_run()
    config = load_from_args(build_command_parser("restart").parse_args(scene.flags(pidfile=None)))

    async def restart() -> list:
        target = LocalTarget()
        plan = await plan_restart(target, config)
        # A copy of the run that the plan never saw (a supervisor's respawn, a second operator's launch).
        copy = scene.start([sys.executable, "-u", str(HEALTHY), "--tag", scene.tag])
        events = [e async for e in execute_restart(target, config, plan, verify_after_s=0.5, poll_s=0.05)]
        return [copy.pid, [[e.step, e.status.value, e.detail] for e in events if hasattr(e, "status")]]

    copy, events = asyncio.run(restart())
    return {"run": run.pid, "copy": copy, "events": events, "run_alive": alive(run.pid), "runs": pids_with(scene.tag),
            "new_logs": scene.new_logs()}


def test_a_run_process_still_alive_after_the_stop_blocks_the_launch(tmp_path):
    seen = in_namespace(scene_copy_appears_after_the_plan, folder=str(tmp_path))
    final = {step: (status, detail) for step, status, detail in seen["events"] if status != "running"}
    assert final["stop"][0] == "ok" and not seen["run_alive"]
    status, detail = final["alive"]
    assert status == "failed" and f"still alive: PID {seen['copy']} (" in detail, detail
    assert final["launch"] == ("skipped", "not launched: a process of the run is still alive")
    assert seen["runs"] == [seen["copy"]] and seen["new_logs"] == []


# -- row 10: the launch runs what the operator typed -------------------------------------------


def scene_env_in_front(folder: str) -> dict:
    scene = Scene(folder)
    launch = f"CUDA_VISIBLE_DEVICES=0,1 {sys.executable} -u {HEALTHY} --tag {scene.tag} --interval 0.05"
    result = scene.pulse("restart", *scene.flags(launch=launch), "--yes")
    pid = int(scene.pidfile.read_text())
    return {**result, "pid": pid, "runs": pids_with(scene.tag),
            "environ": Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")}


def test_environment_assignments_in_front_of_the_launch_work(tmp_path):
    seen = in_namespace(scene_env_in_front, folder=str(tmp_path))
    assert seen["rc"] == 0, seen
    assert "CUDA_VISIBLE_DEVICES=0,1" in seen["environ"]
    assert seen["runs"] == [seen["pid"]]  # the recorded PID is the run itself (exec'd)


def scene_launch_dies(folder: str) -> dict:
    scene = Scene(folder)
    launch = f"""{sys.executable} -c "print('loading config.yaml'); print('KeyError: lr'); raise SystemExit(3)" """
    result = scene.pulse("restart", *scene.flags(launch=launch), "--yes")
    return {**result, "audit": scene.audit()}


def test_a_launch_that_fails_verify_shows_its_last_log_lines_in_output_and_audit(tmp_path):
    seen = in_namespace(scene_launch_dies, folder=str(tmp_path))
    assert seen["rc"] == 1, seen
    shown = [line[10:] for line in seen["out"].splitlines() if line.startswith("        ")]
    assert shown == ["loading config.yaml", "KeyError: lr"]
    assert "[FAIL] verify:" in seen["out"] and "last lines of" in seen["out"]
    verify = [s for s in seen["audit"][-1]["steps"] if s["step"] == "verify"][-1]
    assert verify["data"]["log_tail"] == ["loading config.yaml", "KeyError: lr"]


# -- row 14: a launch that daemonizes ------------------------------------------------------------


def scene_daemonizing_launch(folder: str) -> dict:
    scene = Scene(folder)
    launch = f"{sys.executable} -u {PROCS / 'daemonizing.py'} --tag {scene.tag}"
    result = scene.pulse("restart", *scene.flags(launch=launch), "--yes")
    return {**result, "runs": pids_with(scene.tag), "audit": scene.audit()}


def test_a_daemonizing_launch_is_found_by_its_new_processes_not_failed(tmp_path):
    seen = in_namespace(scene_daemonizing_launch, folder=str(tmp_path))
    assert seen["rc"] == 0, seen
    [daemon] = seen["runs"]
    assert f"the run daemonized: PID {daemon} " in seen["out"]
    assert seen["audit"][-1]["outcome"].startswith("ok")


# -- row 13: a grace of nan or inf -----------------------------------------------------------------


def scene_endless_grace(folder: str, grace: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    result = scene.pulse("restart", *scene.flags(), "--yes", "--grace", grace)
    return {**result, "run_alive": alive(run.pid), "audit": scene.audit(), "new_logs": scene.new_logs()}


@pytest.mark.parametrize("grace", ["nan", "inf"])
def test_a_grace_that_never_ends_is_refused_before_the_stop(grace, tmp_path):
    seen = in_namespace(scene_endless_grace, folder=str(tmp_path), grace=grace)
    assert seen["rc"] == 2, seen
    assert grace in seen["err"] and len(seen["err"].splitlines()) == 1
    assert seen["out"] == ""  # refused before a plan was shown
    assert seen["run_alive"] and seen["audit"] == [] and seen["new_logs"] == []


@pytest.mark.parametrize("grace", [math.nan, math.inf, -5.0])
async def test_a_configured_grace_that_never_ends_is_refused_by_the_plan(grace, tmp_path):
    config = Config(run=RunConfig(launch="true", match="train_pulse_safety", log=str(tmp_path / "log"), grace_s=grace))
    with pytest.raises(ActionRefused, match=r"^\[run\] grace_s must be a finite number of seconds ≥ 0, not "):
        await plan_restart(LocalTarget(), config)


@pytest.mark.parametrize("name", ["grace_s", "kill_wait_s", "gpu_timeout_s", "verify_after_s", "poll_s",
                                  "launch_timeout_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_every_wait_of_the_restart_must_be_finite_and_not_negative(name, value, tmp_path):
    plan = RestartPlan(processes=(), signals=(), held_gpu_pids=(), launch="true", cwd=None, env={},
                       log=str(tmp_path / "log"), pidfile=None, launch_argv=("true",), grace_s=1.0)
    config = Config(audit_log=str(tmp_path / "audit.jsonl"))
    with pytest.raises(ActionRefused, match=r"must be a finite number of seconds ≥ 0, not "):
        execute_restart(LocalTarget(), config, plan, **{name: value})
    assert not (tmp_path / "audit.jsonl").exists()
