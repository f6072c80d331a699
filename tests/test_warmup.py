"""Sequential warmup against real processes, locally and through the real sshd."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.actions.audit import ActionRefused, AuditLog, OutputLine, StepEvent, StepStatus
from console.actions.warmup import execute_warmup, plan_warmup
from console.config import Config, RunConfig, WarmupConfig
from console.model import LineKind
from console.remote.connect import make_target
from console.remote.target import LocalTarget

STEP_PROGRAM = Path(__file__).resolve().parent / "procs" / "warmup_step.py"


def warmup_config(tmp_path: Path, *, fail: str = "", sleep: float = 0.05, gpus=(0, 1), seq_lens=(10, 20, 30)):
    record = tmp_path / "steps.txt"
    command = (
        f"{sys.executable} {STEP_PROGRAM} --gpu {{gpu}} --seq-len {{seq_len}} --record {record}"
        f" --sleep {sleep}" + (f" --fail {fail}" if fail else "")
    )
    config = Config(
        run=RunConfig(cwd=str(tmp_path), env={"PULSE_TEST_ENV": "a b; c"}),
        warmup=WarmupConfig(
            command=command, gpus=gpus, seq_lens=seq_lens, triton_cache_dir=str(tmp_path / "triton cache")
        ),
        audit_log=str(tmp_path / "audit.jsonl"),
    )
    return config, record


def spans(record: Path) -> list[tuple[str, float, float]]:
    """(gpu:seq_len, start, end) of each step the record file saw, in start order."""
    starts, ends = {}, {}
    for line in record.read_text().splitlines():
        what, gpu, seq_len, pid, at = line.split()
        (starts if what == "start" else ends)[f"{gpu}:{seq_len}"] = float(at)
    return sorted((key, starts[key], ends[key]) for key in starts)


async def collect(events) -> tuple[list[StepEvent], list[OutputLine]]:
    steps, lines = [], []
    async for event in events:
        (steps if isinstance(event, StepEvent) else lines).append(event)
    return steps, lines


def test_plan_lists_every_gpu_and_seq_len_in_order(tmp_path):
    config, _ = warmup_config(tmp_path)
    plan = plan_warmup(config)
    assert [(s.index, s.gpu, s.seq_len) for s in plan.steps] == [
        (1, 0, 10), (2, 0, 20), (3, 0, 30), (4, 1, 10), (5, 1, 20), (6, 1, 30)
    ]
    assert "--gpu 1 --seq-len 20" in plan.steps[4].command
    text = "\n".join(plan.describe())
    assert "6 steps, one at a time" in text and "TRITON_CACHE_DIR=" in text


def test_plan_refusals(tmp_path):
    config, _ = warmup_config(tmp_path)
    with pytest.raises(ActionRefused, match=r"^read-only: warmup disabled \(started with --read-only\)$"):
        plan_warmup(config, read_only=True)
    with pytest.raises(ActionRefused, match="no \\[warmup\\] command"):
        plan_warmup(Config())
    bad = Config(warmup=WarmupConfig(command="run --gpu {gpus}", gpus=(0,), seq_lens=(1,)))
    with pytest.raises(ActionRefused, match=r"unknown placeholder \{gpus\}"):
        plan_warmup(bad)


async def test_all_steps_run_one_at_a_time_locally(tmp_path):
    config, record = warmup_config(tmp_path)
    plan = plan_warmup(config)
    steps, lines = await collect(execute_warmup(LocalTarget(), config, plan))

    done = [e for e in steps if e.status is StepStatus.OK]
    assert [e.step for e in done] == [f"step {i}/6" for i in range(1, 7)]
    running = [e for e in steps if e.status is StepStatus.RUNNING]
    assert running[0].data["eta_s"] is None and running[1].data["eta_s"] is not None
    assert all(e.data["pid"] for e in done)
    # the shared cache dir reached every step, and the run's env with it
    assert sum(line.text == f"TRITON_CACHE_DIR={tmp_path / 'triton cache'}" for line in lines) == 6
    assert (tmp_path / "triton cache").is_dir()
    timeline = spans(record)
    assert len(timeline) == 6
    for (_, _, end), (_, next_start, _) in zip(timeline, timeline[1:]):
        assert end <= next_start, "two warmup steps overlapped"
    entry = AuditLog(config.audit_log).entries()[-1]
    assert entry["action"] == "warmup" and entry["outcome"].startswith("ok")
    assert len(entry["plan"]["steps"]) == 6


async def test_stops_at_the_failed_step_over_ssh(sshd, tmp_path):
    config, record = warmup_config(tmp_path, fail="0:30")
    config = dataclasses.replace(config, target=sshd.target_config())
    target = make_target(config.target)
    try:
        steps, lines = await collect(execute_warmup(target, config, plan_warmup(config)))
    finally:
        await target.close()

    failed = [e for e in steps if e.status is StepStatus.FAILED]
    assert [e.step for e in failed] == ["step 3/6"]
    assert "gpu 0 seq_len 30" in failed[0].detail and "exit 1" in failed[0].detail
    assert [e.step for e in steps if e.status is StepStatus.SKIPPED] == [f"step {i}/6" for i in (4, 5, 6)]
    # steps 4+ never ran: the record holds exactly steps 1-3, none overlapping
    assert [key for key, _, _ in spans(record)] == ["0:10", "0:20", "0:30"]
    oom = [line for line in lines if line.kind is LineKind.OOM]
    assert oom and oom[0].step == "step 3/6"
    entry = AuditLog(config.audit_log).entries()[-1]
    assert entry["outcome"].startswith("failed: step 3/6")


async def test_cancel_stops_only_the_running_step(tmp_path):
    config, record = warmup_config(tmp_path, sleep=60, gpus=(0,), seq_lens=(10, 20))
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    events = execute_warmup(LocalTarget(), config, plan_warmup(config))
    step_pid = None
    try:
        async for event in events:
            if isinstance(event, OutputLine) and event.text.startswith("warming"):
                step_pid = int(event.text.split()[-1])
                break
        assert step_pid is not None
        await events.aclose()
        await asyncio.sleep(0)
        assert not _alive(step_pid), "the cancelled step is still running"
        assert bystander.poll() is None, "cancelling touched a process it did not start"
        assert started(record) == ["0:10"], "the next step ran after the cancel"
        entry = AuditLog(config.audit_log).entries()[-1]
        assert entry["outcome"] == "interrupted at step 1/2"
    finally:
        bystander.kill()
        bystander.wait()
        if step_pid is not None and _alive(step_pid):
            os.kill(step_pid, signal.SIGKILL)


def started(record: Path) -> list[str]:
    """gpu:seq_len of each step that started, in order."""
    return [":".join(line.split()[1:3]) for line in record.read_text().splitlines() if line.startswith("start")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
