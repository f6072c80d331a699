"""Pure pieces of the diagnosis on real text: pmon output, NCCL lines,
flight-recorder listings; and the flight-recorder read on a real target (the local one)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from console.evidence import dump_prefixes, parse_flight_listing, read_flight_records
from console.model import LogLine, LogStatus, ProcessReading, Sample
from console.observe.lines import classify_line
from console.observe.nccl import DEFAULT_DUMP_PREFIX, nccl_fact
from console.observe.smi import ParseError, parse_pmon
from console.remote.target import LocalTarget
from console.state import RunState
from tests.real_captures import REAL

WATCHDOG = REAL / "torchrun_watchdog"


def test_pmon_of_a_shared_h200_host():
    by_gpu = parse_pmon((REAL / "torchrun_hang" / "smi_pmon.txt").read_text())
    assert by_gpu[0] == ((1061, 0.0), (1210, 16.0), (1217, 82.0))
    assert dict(by_gpu[1])[590] == 98.0 and dict(by_gpu[1])[1218] == 0.0


def test_pmon_without_processes_and_garbage():
    idle = "# gpu         pid   type     sm    mem    enc    dec    command\n# Idx           #    C/G      %      %      %      %    name\n    0          -     -      -      -      -      -    -\n"
    assert parse_pmon(idle) == {0: ()}
    with pytest.raises(ParseError, match="no '# gpu pid ... sm' header"):
        parse_pmon("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_the_watchdog_lines_of_a_real_timeout():
    text = (WATCHDOG / "run.log").read_text(errors="replace").splitlines()
    facts = [f for line in text if (f := nccl_fact("", line)) is not None]
    watchdog = next(f for f in facts if f.op)
    assert (watchdog.rank, watchdog.op, watchdog.seq, watchdog.timeout_ms) == (0, "ALLREDUCE", 5530, 20000)
    enqueued = {f.rank: f.seq for f in facts if "Last enqueued NCCL work" in f.text}
    assert enqueued == {0: 5530, 1: 5529}


def test_a_flight_listing_with_a_foreign_file_and_a_broken_dump():
    prefix = "/tmp/run/nccl_trace_rank_"
    good = base64.b64encode((WATCHDOG / "nccl_trace_rank_1").read_bytes()).decode()
    listing = f"== {prefix}1\n{good}\n== {prefix}0\nbm90IGEgcGlja2xl\n== /tmp/other_9\n{good}\n"
    (record,) = parse_flight_listing(listing, [prefix])
    assert (record.rank, record.last_seq, record.last_op) == (1, 5529, "all_reduce")


async def test_flight_records_are_read_from_the_prefix_the_ranks_were_given(tmp_path):
    prefix = str(tmp_path / "fr" / "trace_")
    Path(prefix).parent.mkdir()
    for rank in (0, 1):
        shutil.copy(WATCHDOG / f"nccl_trace_rank_{rank}", f"{prefix}{rank}")
    rank = ProcessReading(1, 0, "S", 1.0, 1, 1.0, 0.0, "python -u train.py", run_env=(("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix),))
    assert dump_prefixes((rank,)) == [prefix, DEFAULT_DUMP_PREFIX]
    records = await read_flight_records(LocalTarget(), (rank,), timeout=10)
    assert [(r.rank, r.last_seq, r.last_state) for r in records] == [(0, 5530, "scheduled"), (1, 5529, "completed")]


def test_a_log_redrawn_with_carriage_returns_gets_its_rhythm_from_the_samples_mtimes():
    """A tqdm bar writes every 0.1 s without a newline: lines come rarely, the log's mtime moves every sample."""
    state = RunState(clock=lambda: 100.0)
    state.add_lines([LogLine(1, "{'loss': '8.99'}", classify_line("{'loss': '8.99'}"), time=0.0)])
    for second in range(10):
        log = LogStatus("/w/train.log", True, size=1000 + 50 * second, mtime=5000.0 + second - 0.05, inode=7)
        state.add_sample(Sample(time=5000.0 + second, log=log))
    assert state.write_interval_s() == pytest.approx(1.0)
    state.start_new_log("/w/train2.log")
    assert state.write_interval_s() is None


def test_log_silence_is_the_target_s_stat_aged_by_this_side_s_clock():
    """The console and the fleet screen both read it: the target's clock only ever meets its own
    mtime, so a skewed clock on the target does not shift the silence; before any stat, the last line."""
    now = [100.0]
    state = RunState(clock=lambda: now[0])
    assert state.log_silent_s(now[0]) is None
    state.add_lines([LogLine(1, "step 1", classify_line("step 1"), time=97.0)])
    assert state.log_silent_s(now[0]) == pytest.approx(3.0)
    state.add_sample(Sample(time=9000.0, log=LogStatus("/w/train.log", True, size=10, mtime=8988.0, inode=7)))
    now[0] = 105.0
    assert state.log_silent_s(now[0]) == pytest.approx(12.0 + 5.0)


def test_two_ranks_writing_one_log_keep_the_rhythm_of_their_steps():
    """Both ranks of a 2-task Slurm job print each step into the job's one output file a few ms apart:
    the usual interval is the step's 0.2 s, not the 0 s between the two ranks' lines."""
    state = RunState(clock=lambda: 100.0)
    lines = []
    for step in range(1, 11):
        for rank in (0, 1):
            text = f"rank {rank} step {step} tokens/s: 1000.0 loss 1.50"
            lines.append(LogLine(len(lines) + 1, text, classify_line(text), time=step * 0.2 + rank * 0.004))
    state.add_lines(lines)
    assert state.rate_interval_s() == pytest.approx(0.196)
    assert state.write_interval_s() == pytest.approx(0.2)
