"""Hostile remote tools: nvidia-smi that hangs, fails, prints garbage, `[N/A]`, `[GPU requires reset]` or
too few columns; processes that vanish between listing and reading; a sampling agent that dies.

The console runs headless with a real Monitor over a real target, a real run process writing its
log and a stand-in nvidia-smi doing the fault. Each fault must become a clear one-line status in
the GPU pane within a bounded time, while the process pane and the log go on.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig, TargetConfig
from console.monitor import Monitor
from console.observe import agent, smi
from console.remote.target import LocalTarget
from console.state import RunState
from console.ui.app import PulseApp
from console.ui.panes.gpu_pane import GpuPane
from tests.faults.helpers import record_figure, until
from tests.test_agent import spawn, stand_in_smi, unique_name  # noqa: F401
from tests.test_sampler import SMI_GPU_BUSY, agent_pids

HEALTHY = Path(__file__).resolve().parents[1] / "procs" / "healthy.py"
GPU_ROW = SMI_GPU_BUSY.splitlines()[0]
QUERY = f"--query-gpu={','.join(smi.GPU_QUERY_FIELDS)}"


def answering(gpu_rows: str) -> str:
    """A stand-in body: `gpu_rows` for the GPU query, no compute apps."""
    return f'case "$1" in\n  "{QUERY}") printf "%s\\n" "{gpu_rows}" ;;\n  *) : ;;\nesac\n'


#: fault → (stand-in nvidia-smi body, text the GPU pane's subtitle must hold, text a GPU row must hold)
FAULTS = {
    "hangs": ("exec sleep 300\n", f"did not answer within {agent.SMI_TIMEOUT_S:g} s", None),
    "exits non-zero": (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9\n",
        "nvidia-smi exited with status 9: NVIDIA-SMI has failed", None,
    ),
    "prints garbage": ("head -c 3000 /dev/urandom; echo; echo '\x1b]0;x\x07 not, a, csv'\n", "GPU read failed", None),
    "fewer columns": (answering("0, GPU-1, NVIDIA H200, 100"), "GPU read failed", None),
    "[N/A] everywhere": (answering(", ".join([GPU_ROW.split(", ")[0], *["[N/A]"] * (len(smi.GPU_QUERY_FIELDS) - 1)])), "nvidia-smi", "0"),
    "[GPU requires reset]": (
        answering(GPU_ROW.replace(", 21619,", ", [GPU requires reset],")), "GPU fault", "[GPU requires reset]"
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_misbehaving_nvidia_smi_is_a_clear_status_and_the_rest_goes_on(fault: str, spawn, tmp_path: Path) -> None:
    body, subtitle_says, row_says = FAULTS[fault]
    name = unique_name()
    log = tmp_path / "train.log"
    run = spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("a"))
    smi_path = stand_in_smi(tmp_path, body)
    config = Config(
        target=TargetConfig(nvidia_smi=str(smi_path)),
        run=RunConfig(log=str(log), match=rf"--tag={name}\b"),
        gpus=GpuConfig(source="nvidia-smi", poll_s=0.2),
    )
    target = LocalTarget()
    state = RunState()
    app = PulseApp(config, state, monitor_factory=lambda changed: Monitor(config, target, state, changed))
    async with app.run_test(size=(120, 40)) as pilot:
        # Bounded: the agent stops a hung nvidia-smi after SMI_TIMEOUT_S; the wait here is only an upper bound.
        await until(lambda: state.latest is not None, "a sample despite the faulty nvidia-smi")
        app.run_screen.refresh_panes()
        await pilot.pause()
        subtitle = app.query_one("#gpus-box").border_subtitle or ""
        assert subtitle_says in subtitle, subtitle
        assert "\n" not in subtitle and "\x1b" not in subtitle
        if row_says is not None:
            rows = [app.query_one(GpuPane).render_line(y).text for y in range(2)]
            assert row_says in rows[0], rows
        # The rest of the console goes on: the run's process is shown and its log keeps arriving.
        assert [p.pid for p in state.latest.processes] == [run.pid]
        lines = state.lines_received
        await until(lambda: state.lines_received > lines + 3, "more log lines while nvidia-smi misbehaves")
        assert "1 alive" in (app.query_one("#processes-box").border_title or "")
    record_figure("hostile_smi", fault=fault, status=subtitle[:100])


async def test_processes_vanishing_between_listing_and_reading_never_break_a_sample(spawn, tmp_path: Path) -> None:
    """Hundreds of short-lived processes match the pattern while the agent samples every 20 ms."""
    name = unique_name()
    churner = spawn(["bash", "-c", f"while :; do /usr/bin/python3 -S -c 'import time; time.sleep(0.02)' --tag={name} & sleep 0.01; done"])
    config = Config(run=RunConfig(match=rf"--tag={name}\b"), gpus=GpuConfig(source="none"))
    from console.observe.sampler import Sampler

    problems: list[str] = []
    samples = []
    stream = Sampler(LocalTarget(), config, interval_s=0.02, on_problem=problems.append).stream()
    try:
        async for sample in stream:
            samples.append(sample)
            if len(samples) >= 150:
                break
    finally:
        await stream.aclose()
    assert churner.poll() is None
    assert problems == []
    assert all(sample.process_error is None for sample in samples)
    seen = {p.pid for s in samples for p in s.processes}
    assert len(seen) > 20, "the churn did not reach the agent"
    record_figure("proc_races", samples=len(samples), vanishing_processes=len(seen))


async def test_a_dead_sampling_agent_is_said_and_started_again_while_the_log_goes_on(spawn, tmp_path: Path) -> None:
    name = unique_name()
    log = tmp_path / "train.log"
    spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("a"))
    config = Config(run=RunConfig(log=str(log), match=rf"--tag={name}\b"), gpus=GpuConfig(source="none", poll_s=0.2))
    state = RunState()
    app = PulseApp(config, state, monitor_factory=lambda changed: Monitor(config, LocalTarget(), state, changed))
    async with app.run_test(size=(120, 40)):
        (first,) = await until(lambda: agent_pids(name), "the sampling agent")
        os.kill(first, signal.SIGKILL)
        await until(lambda: any(e.kind == "sampler" and "sampling stopped" in e.text for e in state.events), "the death to be said")
        lines = state.lines_received
        await until(lambda: [pid for pid in agent_pids(name) if pid != first], "a new agent")
        samples = state.samples_received
        await until(lambda: state.samples_received > samples and state.lines_received > lines, "samples and lines after it")
