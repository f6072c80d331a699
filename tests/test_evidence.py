"""Evidence gathering on real processes and logs: what is read, from where, and when stacks are dumped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from console.config import Config, RunConfig, StallConfig, TargetConfig
from console.diagnose import diagnose
from console.evidence import from_samples, gather, main_process, read_tail
from console.model import LineInfo, LineKind, LogLine, LogStatus, Sample
from console.observe.lines import classify_line
from console.remote.target import LocalTarget
from console.state import RunState
from tests.test_restart import Processes, procs, wait_for  # noqa: F401  (procs is a fixture)

ROOT = Path(__file__).resolve().parents[1]
PROCS = ROOT / "tests" / "procs"
PY_SPY = str(ROOT / ".venv" / "bin" / "py-spy")
OOM_TEXT = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 GiB."


def start(procs: Processes, tmp_path: Path, program: str, *args: str) -> tuple[Config, int]:
    """A tests/procs program writing to its log, and a config that finds it (stall after 1 s, 0.3 s window)."""
    tag = f"pulse-evidence-{uuid.uuid4().hex}"
    log = tmp_path / f"{tag}.log"
    with log.open("w") as out:
        popen = procs.start(
            [sys.executable, str(PROCS / program), *args, "--tag", tag], stdout=out, stderr=subprocess.STDOUT
        )
    config = Config(
        target=TargetConfig(py_spy=PY_SPY),
        run=RunConfig(match=f"--tag {tag}", log=str(log)),
        stall=StallConfig(log_silent_s=1.0, sample_window_s=0.3),
    )
    return config, popen.pid


def line(number: int, text: str, at: float) -> LogLine:
    return LogLine(number, text, classify_line(text), time=at)


async def test_stacks_are_dumped_only_when_the_run_looks_stuck(procs, tmp_path):
    config, pid = start(procs, tmp_path, "hung_queue.py")
    log = Path(config.run.log)
    wait_for(lambda: "producer died" in log.read_text(), "the producer to die")
    target = LocalTarget()
    patient = replace(config, stall=replace(config.stall, log_silent_s=60.0))
    fresh = await gather(target, patient)  # not silent for 60 s yet, but its producer thread died: hung at once
    verdict = diagnose(fresh, patient)
    assert verdict.name == "hung"
    assert verdict.summary == 'thread "TargetForwardLoop" died of RuntimeError; the process lives on'
    assert any(line.startswith("the main thread waits on queue get in pack_hidden (hung_queue.py:") for line in verdict.evidence)
    wait_for(lambda: time.time() - log.stat().st_mtime > 1.3, "the log to go silent")
    stuck = await gather(target, config)
    assert diagnose(stuck, config).name == "hung"
    assert [s.wait for s in stuck.stacks if s.name == "MainThread"] == ["queue get"]
    helpers = [s for s in stuck.stacks if s.name.startswith("Helper-")]
    assert sum(s.count for s in helpers) == 3  # identical stacks folded
    never = await gather(target, config, dump_stacks="never")
    assert never.stacks == () and diagnose(never, config).name == "hung"


async def test_always_dumps_even_a_healthy_run(procs, tmp_path):
    config, pid = start(procs, tmp_path, "healthy.py", "--interval", "0.05")
    wait_for(lambda: "step 2" in Path(config.run.log).read_text(), "steps")
    evidence = await gather(LocalTarget(), config, dump_stacks="always")
    assert diagnose(evidence, config).name == "healthy"
    assert evidence.stacks and evidence.stacks[0].pid == pid


async def test_a_dump_failure_becomes_evidence_not_an_error(procs, tmp_path):
    config, pid = start(procs, tmp_path, "hung_queue.py")
    config = replace(config, target=TargetConfig(py_spy="/nonexistent/py-spy"))
    wait_for(lambda: "producer died" in Path(config.run.log).read_text(), "the producer to die")
    evidence = await gather(LocalTarget(), config, dump_stacks="always")
    assert "/nonexistent/py-spy was not found on the target" in evidence.stack_error


async def test_the_followers_state_replaces_the_tail(procs, tmp_path):
    """With a RunState the tail is not read: its problem lines (with ages) and throughput timing are used."""
    config, pid = start(procs, tmp_path, "healthy.py", "--interval", "0.05")
    wait_for(lambda: "step 2" in Path(config.run.log).read_text(), "steps")
    now = [1000.0]
    state = RunState(clock=lambda: now[0])
    state.add_lines([line(1, OOM_TEXT, 100.0), *(line(n, f"step {n} | loss 2.3 | 14.2K tok/s", 990.0 + n) for n in range(2, 9))])
    evidence = await gather(LocalTarget(), config, follower_state=state)
    assert [(p.kind, p.age_s) for p in evidence.problems] == [(LineKind.OOM, 900.0)]
    assert evidence.rate_silent_s == 2.0 and evidence.rate_interval_s == 1.0
    assert evidence.rate_now == 14200.0
    assert diagnose(evidence, replace(config, stall=StallConfig(log_silent_s=300))).name == "healthy"  # an old OOM


async def test_read_tail_returns_only_the_end_of_a_big_log(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"step {n} | loss 2.31 | 14.2K tok/s\n" for n in range(1, 40_001)))
    config = Config(run=RunConfig(log=str(log)))
    lines = await read_tail(LocalTarget(), config, timeout=10.0, tail_bytes=4096)
    assert lines[-1].text == "step 40000 | loss 2.31 | 14.2K tok/s"
    assert 50 < len(lines) < 200
    assert lines[0].text.startswith("step ") and lines[0].info.tokens_per_s == 14200.0  # no cut first line
    assert lines[-1].info.tokens_per_s == 14200.0


async def test_read_tail_of_a_missing_log_is_empty(tmp_path):
    config = Config(run=RunConfig(log=str(tmp_path / "absent.log")))
    assert await read_tail(LocalTarget(), config, timeout=10.0) == []


async def test_main_process_is_the_root_of_the_workers_tree(procs, tmp_path):
    config, pid = start(procs, tmp_path, "workers.py")
    wait_for(lambda: "workers ready" in Path(config.run.log).read_text(), "the workers")
    evidence = await gather(LocalTarget(), config, dump_stacks="never")
    assert len(evidence.processes) == 3  # forked workers carry the parent's command line
    assert main_process(evidence.processes).pid == pid


# -- the log's fields from two samples (pure) --------------------------------------------------


def sample(at: float, log: LogStatus | None) -> Sample:
    return Sample(time=at, log=log)


@pytest.mark.parametrize(
    "before, after, growth, silent",
    [
        (LogStatus("/l", True, 100, 50.0, 7), LogStatus("/l", True, 100, 50.0, 7), 0, 50.0),
        (LogStatus("/l", True, 100, 50.0, 7), LogStatus("/l", True, 160, 99.9, 7), 60, 0.1),  # the last write, not the window
        (LogStatus("/l", True, 900, 50.0, 7), LogStatus("/l", True, 40, 99.9, 8), 40, 0.1),  # replaced by a new file
        (LogStatus("/l", False), LogStatus("/l", True, 30, 99.9, 8), 30, 0.1),  # appeared
    ],
)
def test_log_growth_and_silence(before, after, growth, silent):
    ev = from_samples(sample(98.5, before), sample(100.0, after), Config(), RunState(), timed=False)
    assert (ev.log_growth, ev.log_silent_s, ev.window_s) == (growth, silent, 1.5)


def test_a_log_not_written_since_the_launch_is_a_failed_launch():
    old = LogStatus("/l", True, 100, 50.0, 7)
    ev = from_samples(sample(98.5, old), sample(100.0, old), Config(), RunState(), timed=False, launched_at=60.0)
    assert ev.log_written_since_launch is False
    assert diagnose(ev, Config()).name == "launch_failed"


def test_tail_lines_have_no_age():
    state = RunState()
    state.add_lines([LogLine(1, OOM_TEXT, LineInfo(LineKind.OOM), time=state.clock() - 5000)])
    ev = from_samples(sample(0, None), sample(1, None), Config(), state, timed=False)
    assert ev.problems[0].age_s is None


async def test_read_tail_follows_the_newest_log_of_a_pattern(tmp_path):
    older, newer = tmp_path / "train_1700000000.log", tmp_path / "train_1700000100.log"
    older.write_text("step 1 | loss nan\n")
    newer.write_text("step 9 | loss 2.1 | 14.2K tok/s\n")
    os.utime(older, (1_700_000_000, 1_700_000_000))
    config = Config(run=RunConfig(log=str(tmp_path / "train_{started}.log")))
    lines = await read_tail(LocalTarget(), config, timeout=10.0)
    assert [line.text for line in lines] == ["step 9 | loss 2.1 | 14.2K tok/s"]


async def test_read_tail_treats_a_strange_file_name_as_a_name(tmp_path):
    log = tmp_path / "run $(touch pwned) `touch pwned2`;.log"
    log.write_text("Traceback (most recent call last):\n")
    lines = await read_tail(LocalTarget(), Config(run=RunConfig(log=str(log))), timeout=10.0)
    assert [line.info.kind for line in lines] == [LineKind.TRACEBACK]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists() and not Path("pwned2").exists()
