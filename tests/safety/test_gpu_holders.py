"""A GPU holder outside the plan blocks the launch; another job's never does (issue 30), each case in its
own PID namespace.

There is no GPU here: the demo's stand-in nvidia-smi (bin/nvidia-smi) lists the processes the
scene says hold memory, while they live. A helper the run double-forked (its own session, another
command line, started after the run) that still holds memory on the run's GPU after the stop is
named, and nothing is launched; a job that was on the run's GPU before the run, or one on another
GPU, is left alone and the restart goes through.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.safety.namespace import Scene, alive, in_namespace, pids_with

STAND_IN = Path(__file__).resolve().parent / "bin" / "nvidia-smi"

#: Starts argv as a daemon would: fork, setsid, fork again, the middle one exits (the grandchild is
#: reparented to init); prints the grandchild's PID.
DOUBLE_FORK = """
import os, sys
if os.fork() == 0:
    os.setsid()
    child = os.fork()
    if child == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execvp(sys.argv[1], sys.argv[1:])
    print(child, flush=True)
    os._exit(0)
os.wait()
"""


def double_forked(argv: list[str]) -> int:
    """`argv` started as a double-forked daemon; its PID."""
    said = subprocess.run([sys.executable, "-c", DOUBLE_FORK, *argv], capture_output=True, text=True, check=True)
    return int(said.stdout)


def gpu_config(scene: Scene, holders: list[tuple[int, int, int]]) -> str:
    """A config reading GPUs from the stand-in, with (PID, GPU, MiB) holding memory; its path."""
    state = scene.folder / "gpus.json"
    state.write_text(json.dumps({"holders": [{"pid": p, "gpu": g, "used_mib": mib} for p, g, mib in holders]}))
    config = scene.folder / "gpus.toml"
    config.write_text(f'[target]\nnvidia_smi = "{sys.executable} {STAND_IN} --state {state}"\n'
                      '[gpus]\nsource = "nvidia-smi"\n')
    return str(config)


def _older_than_the_run(scene: Scene):
    job = scene.start(["sleep", "300"])
    time.sleep(0.05)  # a few clock ticks: start times are counted in 1/100 s
    return job


def scene_holder_outside_the_plan(folder: str, case: str) -> dict:
    scene = Scene(folder)
    other_job = _older_than_the_run(scene)
    run = scene.start_run()
    helper = double_forked(["sleep", "300"])
    holders = [(helper, 0, 4000), (other_job.pid, 1, 9000)]
    if case == "beside the run on its GPU":
        holders.append((run.pid, 0, 20000))
    result = scene.pulse("restart", gpu_config(scene, holders), *scene.flags(), "--yes")
    return {**result, "run": run.pid, "helper": helper, "helper_alive": alive(helper),
            "other_alive": alive(other_job.pid), "run_alive": alive(run.pid), "runs": pids_with(scene.tag),
            "new_logs": scene.new_logs(), "audit": scene.audit()}


@pytest.mark.parametrize("case", ["beside the run on its GPU", "while the run holds none listed"])
def test_a_gpu_holder_outside_the_plan_blocks_the_launch(case, tmp_path):
    seen = in_namespace(scene_holder_outside_the_plan, folder=str(tmp_path), case=case)
    assert seen["rc"] == 1, seen
    helper = seen["helper"]
    planned = [line for line in seen["out"].splitlines() if line.startswith("  GPU memory outside the plan: ")]
    assert planned == [f"  GPU memory outside the plan: PID {helper} on GPU 0 (sleep 300), started after the run did"
                       " (a helper it left behind?): not signalled; nothing is launched while it holds memory"], seen["out"]
    gpu = [line for line in seen["out"].splitlines() if line.startswith("[FAIL] gpu: ")]
    assert gpu and f"held outside the plan after 3 s: PID {helper} 4000 MiB on GPU 0 (sleep 300)" in gpu[0], seen["out"]
    assert "[skip] launch: not launched: GPU memory still held" in seen["out"]
    assert "GPU memory of the old PIDs released" not in seen["out"]
    assert seen["helper_alive"] and seen["other_alive"]
    assert not seen["run_alive"] and seen["runs"] == [] and seen["new_logs"] == []
    finished = seen["audit"][-1]
    assert finished["plan"]["signals"] == [f"-{seen['run']}"]  # the run's group alone was signalled
    assert finished["record"] == "finished" and finished["outcome"].startswith(f"failed: gpu: held outside the plan after 3 s: PID {helper} ")
    assert [h["pid"] for h in finished["plan"]["outside_gpu"]] == [helper]


def scene_other_jobs(folder: str) -> dict:
    scene = Scene(folder)
    before = _older_than_the_run(scene)
    run = scene.start_run()
    # Started after the run, on a GPU the run does not use.
    elsewhere = double_forked(["sleep", "300"])
    config = gpu_config(scene, [(run.pid, 0, 20000), (before.pid, 0, 3000), (elsewhere, 1, 30000)])
    result = scene.pulse("restart", config, *scene.flags(), "--yes")
    return {**result, "before": before.pid, "elsewhere": elsewhere, "alive": [alive(before.pid), alive(elsewhere)],
            "run_alive": alive(run.pid), "runs": pids_with(scene.tag), "pidfile": scene.pidfile.read_text()}


def test_another_job_on_the_runs_gpu_or_on_another_gpu_never_blocks_the_restart(tmp_path):
    seen = in_namespace(scene_other_jobs, folder=str(tmp_path))
    assert seen["rc"] == 0, seen
    assert f"  note: PID {seen['before']} (sleep 300) holds memory on GPU 0 too and was there before the run:" \
           " another job, left alone (it does not block the launch)" in seen["out"].splitlines()
    assert "GPU memory outside the plan" not in seen["out"]
    assert "[ ok ] gpu: GPU memory of the old PIDs released" in seen["out"]
    assert seen["alive"] == [True, True] and not seen["run_alive"]
    assert seen["runs"] == [int(seen["pidfile"])]
