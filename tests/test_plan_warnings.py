"""A plan says what the operator may not see (issue 33, item 9): restarting a healthy run loses its
progress since the last checkpoint, and a warmup on GPUs the live run holds shares them with it.
Real runs, the real CLI and the console against LocalTarget (pytest is PID 1 of its own PID namespace)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid

import pytest

from console.actions.warmup import plan_warmup
from console.config import WarmupConfig
from console.observe.sampler import sample_once
from console.remote.target import LocalTarget
from console.ui.dialogs.confirm_screen import ConfirmScreen
from tests.safety.namespace import PULSE, REPO
from tests.snapshot_apps.scenarios import diagnosed, make_app
from tests.test_restart import HEALTHY, Processes, gpu_config, procs, run_config, wait_for  # noqa: F401 (procs: a fixture)

HEALTHY_WARNING = "restarting it loses the progress since its last checkpoint"


def start_logged_run(procs: Processes, tmp_path, tag: str) -> subprocess.Popen:
    """The run, its output into a log its config's `{started}` pattern finds, as a launch leaves it."""
    log = tmp_path / f"{tag}_old.log"
    with open(log, "ab") as out:
        run = procs.start([sys.executable, "-u", str(HEALTHY), "--tag", tag, "--interval", "0.05"], stdout=out)
    wait_for(lambda: log.stat().st_size, "the run to write its log")
    return run


def pulse_plan(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """`pulse ARGV` with no terminal and no --yes: it prints the plan, then refuses for want of a yes."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run([*PULSE, *argv], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def restart_flags(tmp_path, tag: str) -> list[str]:
    config = run_config(tmp_path, tag).run
    assert config.launch and config.match and config.log
    return ["--launch", config.launch, "--match", config.match, "--log", config.log]


def test_pulse_restart_warns_when_its_look_finds_the_run_healthy(procs, tmp_path):  # noqa: F811
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = start_logged_run(procs, tmp_path, tag)
    result = pulse_plan(tmp_path, "restart", *restart_flags(tmp_path, tag))
    lines = result.stdout.splitlines()
    assert result.returncode == 2 and "not confirmed" in result.stderr, result
    warning = next(i for i, line in enumerate(lines) if HEALTHY_WARNING in line)
    assert lines[warning].startswith("  WARNING: the run is healthy (the run is alive and its log progresses): ")
    assert warning < next(i for i, line in enumerate(lines) if line.startswith("  stop 1 process(es)"))
    assert run.poll() is None


def test_pulse_restart_of_a_run_with_no_process_does_not_warn(tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    result = pulse_plan(tmp_path, "restart", *restart_flags(tmp_path, tag))
    assert result.returncode == 2 and "stop: no run process found; nothing to stop" in result.stdout, result
    assert "WARNING" not in result.stdout


@pytest.mark.parametrize("scenario", ["healthy", "hang"])
async def test_R_warns_first_when_the_verdict_on_screen_is_healthy(scenario, procs, tmp_path):  # noqa: F811
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    start_logged_run(procs, tmp_path, tag)
    app = make_app(scenario, target=LocalTarget(), config=run_config(tmp_path, tag))
    async with app.run_test(size=(120, 40)) as pilot:
        diagnosed(app)
        assert (app.verdict.name == "healthy") == (scenario == "healthy"), app.verdict
        await pilot.press("R")
        await app.workers.wait_for_complete()
        await pilot.pause()
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen), [n.message for n in app.notices]
        if scenario == "healthy":
            assert confirm.lines[0] == f"WARNING: the run is healthy ({app.verdict.summary}): {HEALTHY_WARNING}"
        else:
            assert not any("WARNING" in line for line in confirm.lines), confirm.lines
            assert confirm.lines[0].startswith("stop 1 process(es)")


def warmup_on(config, tmp_path, gpus=(0, 1, 2)):
    return dataclasses.replace(config, warmup=WarmupConfig(command="echo warm {gpu} {seq_len}", gpus=gpus,
                                                           seq_lens=(770, 1216), triton_cache_dir=str(tmp_path / "tc")))


async def test_the_warmup_plan_warns_of_each_gpu_the_live_run_holds(procs, tmp_path):  # noqa: F811
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = start_logged_run(procs, tmp_path, tag)
    config = warmup_on(gpu_config(run_config(tmp_path, tag), tmp_path, run.pid, held_mib=101_000, busy_pct=100),
                       tmp_path)
    _, sample = await sample_once(LocalTarget(), config, 0.0)
    plan = plan_warmup(config, sample=sample)
    held = f"of 140.4 GiB, 100 % busy, held by the live run (PID {run.pid})): the warmup's 2 steps there would share it"
    assert [w.split(" (")[0] for w in plan.warnings] == ["GPU 0 is in use", "GPU 1 is in use"], plan.warnings
    assert all(w.endswith(held) for w in plan.warnings), plan.warnings  # GPU 2 is idle: no word of it
    assert plan.describe()[:2] == [f"WARNING: {w}" for w in plan.warnings]
    assert plan_warmup(config).warnings == ()  # not looked at (a fleet's plan): nothing said


def test_pulse_warmup_prints_the_busy_gpus_in_its_plan(procs, tmp_path):  # noqa: F811
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = start_logged_run(procs, tmp_path, tag)
    config = gpu_config(run_config(tmp_path, tag), tmp_path, run.pid, held_mib=101_000, busy_pct=100)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {config.target.nvidia_smi} \"$@\"\n")
    smi.chmod(0o755)
    toml = tmp_path / "warmup.toml"
    toml.write_text(
        f'audit_log = "{tmp_path / "audit.jsonl"}"\n'
        f'[target]\nnvidia_smi = "{smi}"\n[gpus]\nsource = "nvidia-smi"\n[run]\nmatch = "{tag}"\n'
        '[warmup]\ncommand = "echo warm {gpu} {seq_len}"\ngpus = [1, 2]\nseq_lens = [770]\n'
    )
    result = pulse_plan(tmp_path, "warmup", str(toml))
    assert result.returncode == 2 and "not confirmed" in result.stderr, result
    lines = result.stdout.splitlines()
    assert lines[1] == (f"  WARNING: GPU 1 is in use (98.6 of 140.4 GiB, 100 % busy, held by the live run (PID {run.pid})):"
                        " the warmup's 1 step there would share it"), lines
    assert lines[2].startswith("  warmup: 2 steps, one at a time") and "GPU 2" not in result.stdout
