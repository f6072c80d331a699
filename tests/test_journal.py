"""The run journal: what it records from a RunState, its bounds, two writers, a writer killed mid-write."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.config import Config, RunConfig, TargetConfig
from console.diagnose import Verdict
from console.journal.report import Window, gpu_hourly, report_markdown
from console.journal.recorder import HIGH_WATER_STEP_MIB, PROBLEM_TEXT_CHARS, JournalRecorder, restore
from console.journal.store import FLUSH_S, LEASE_S, Journal, journal_path
from console.model import ConnectionState, ConnectionStatus, GpuReading, LogLine, Sample
from console.observe.lines import classify_line
from console.state import RunState
from tests.real_captures import REAL

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path("/work/shared/fixtures/h200") if Path("/work/shared/fixtures/h200").exists() else ROOT / "tests/fixtures/h200"
WRITER = ROOT / "tests/procs/journal_writer.py"
PCT = ROOT / "tests/bin/pct"


class Clock:
    """A clock a test moves by hand: the journal's wall time and the state's monotonic time."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def line(number: int, text: str, at: float) -> LogLine:
    return LogLine(number, text, classify_line(text), time=at)


def gpu(index: int, used: int) -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "NVIDIA H200", used, 143771, 90.0, 50.0, 400.0, 700.0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(tmp_path, clock) -> Journal:
    j = Journal(tmp_path / "run.sqlite3", clock=clock)
    j.take_lease()
    yield j
    j.close()


def test_a_run_state_becomes_rows_of_every_kind(journal, clock):
    state = RunState(clock=clock)
    recorder = JournalRecorder(journal, state, wall=clock)
    oom = (FIXTURES / "oom.txt").read_text().splitlines()
    hung = (FIXTURES / "hung.log").read_text().splitlines()[1:]
    state.set_connection(ConnectionState(ConnectionStatus.CONNECTED))
    state.add_sample(Sample(clock.now, gpus=(gpu(0, 1000), gpu(1, 2000))))
    state.add_lines([line(1, "step 1 | loss 2.5 | 14.2K tok/s", clock.now), line(2, "step 2 | loss 2.3 | 13.8K tok/s", clock.now + 1)])
    state.add_lines([line(3 + i, text, clock.now + 2) for i, text in enumerate(hung)])
    state.add_lines([line(100 + i, text, clock.now + 3) for i, text in enumerate(oom)])  # a second problem, later
    recorder.observe()
    recorder.verdict(Verdict("oom", "the run ran out of GPU memory", ["GPU 0: CUDA out of memory"], "warm up one GPU at a time", "warmup"))
    recorder.verdict(Verdict("oom", "the run ran out of GPU memory", [], "", "warmup"))  # unchanged: not journaled again
    clock.now += 30
    state.set_connection(ConnectionState(ConnectionStatus.RECONNECTING, "Connection lost"))
    recorder.observe()
    clock.now += 42
    state.set_connection(ConnectionState(ConnectionStatus.CONNECTED))
    state.add_sample(Sample(clock.now, gpus=(gpu(0, 1000 + HIGH_WATER_STEP_MIB), gpu(1, 2100))))
    recorder.observe()
    journal.flush()

    entries = journal.entries()
    kinds = [e.kind for e in entries]
    assert kinds.count("verdict") == 1
    # The first line of each problem, and a line of a kind that problem had not shown yet.
    problems = [(e.data["problem"], e.data["line"], e.text) for e in entries if e.kind == "problem"]
    assert problems == [
        ("traceback", 3, "Exception in thread TargetForwardLoop:"),
        ("traceback", 100, oom[0]),
        ("oom", 102, oom[2][:PROBLEM_TEXT_CHARS]),
    ]
    connection = [e.text for e in entries if e.kind == "connection"]
    assert connection == ["connected", "connection lost: Connection lost", "reconnected after a 42 s gap"]
    high = [(e.data["gpu"], e.data["used_mib"]) for e in entries if e.kind == "gpu_memory"]
    assert high == [(0, 1000), (1, 2000), (0, 1000 + HIGH_WATER_STEP_MIB)]  # GPU 1 grew by less than a step
    minutes = {(m.metric): m for m in journal.minutes()}
    assert (minutes["tokens_per_s"].min, minutes["tokens_per_s"].median, minutes["tokens_per_s"].max) == (13800, 14000, 14200)
    assert minutes["loss"].count == 2
    # Each GPU's history per minute: busy %, memory %, power (issue 34).
    assert (minutes["gpu0.util_pct"].median, minutes["gpu1.power_w"].median) == (90.0, 400.0)
    assert minutes["gpu1.memory_pct"].max == pytest.approx(2100 * 100 / 143771)


def test_the_report_gives_each_gpus_history_per_hour(journal, clock):
    state = RunState(clock=clock)
    recorder = JournalRecorder(journal, state, wall=clock)
    for step in range(120):  # two hours, a sample a minute: GPU 0 busy, then held back to half, its SM clock down
        busy, clock_mhz = (95.0, 1980.0) if step < 60 else (48.0, 1410.0)
        gpu = GpuReading(0, "GPU-0", "NVIDIA H200", 70_000, 143771, busy, 50.0, 650.0, 700.0, sm_clock_mhz=clock_mhz)
        state.add_sample(Sample(clock.now, gpus=(gpu,)))
        recorder.observe()
        clock.now += 60
    journal.flush()
    start = clock.now - 3 * 3600
    window = Window(start, clock.now, *journal.window(start))
    hours = gpu_hourly(window)
    assert {gpu for _, gpu, _ in hours} == {0}
    assert (hours[0][2]["util_pct"], hours[-1][2]["util_pct"]) == (95.0, 48.0)
    assert hours[0][2]["memory_pct"] == pytest.approx(70_000 * 100 / 143771) and hours[0][2]["power_w"] == 650.0
    assert (hours[0][2]["sm_clock_mhz"], hours[-1][2]["sm_clock_mhz"]) == (1980.0, 1410.0)
    text = report_markdown(window, host="local", run="run")
    assert "| hour (UTC) | GPU | busy % | memory % | power W | SM MHz |" in text
    assert "| 0 | 95 | 48.69 | 650 | 1,980 |" in text and "| 0 | 48 | 48.69 | 650 | 1,410 |" in text


def test_the_report_has_no_sm_clock_column_where_no_reading_gave_one(journal, clock):
    state = RunState(clock=clock)
    recorder = JournalRecorder(journal, state, wall=clock)
    state.add_sample(Sample(clock.now, gpus=(GpuReading(0, "GPU-0", "NVIDIA H200", 70_000, 143771, 95.0, 50.0, 650.0, 700.0),)))
    recorder.observe()
    journal.flush()
    start = clock.now - 3600
    text = report_markdown(Window(start, clock.now + 60, *journal.window(start)), host="local", run="run")
    assert "| hour (UTC) | GPU | busy % | memory % | power W |\n" in text and "| 0 | 95 | 48.69 | 650 |\n" in text




def test_a_problem_is_journaled_as_it_grows_once_per_kind(journal, clock):
    """The real Triton capture arrives in two reads: its "Traceback" first, its OutOfResources line later."""
    state = RunState(clock=clock)
    recorder = JournalRecorder(journal, state, wall=clock)
    texts = (REAL / "triton_oom" / "run.log").read_text().splitlines()
    state.add_lines([line(n, text, clock.now) for n, text in enumerate(texts[:10], 1)])
    recorder.observe()
    state.add_lines([line(n, text, clock.now + 1) for n, text in enumerate(texts[10:], 11)])
    recorder.observe()
    recorder.observe()  # nothing new
    journal.flush()
    problems = [(e.data["problem"], e.data["line"], e.text[:60]) for e in journal.entries() if e.kind == "problem"]
    assert problems == [
        ("traceback", 2, "Traceback (most recent call last):"),
        ("oom", len(texts), "triton.runtime.errors.OutOfResources: out of resource: share"),
    ]

def test_minutes_hold_min_median_max_and_a_reopened_state_gets_them_back(tmp_path, clock):
    journal = Journal(tmp_path / "run.sqlite3", clock=clock)
    journal.take_lease()
    start = clock.now - clock.now % 60
    for minute in range(10):
        journal.add_values("tokens_per_s", [(start + minute * 60 + s, 1000.0 * (minute + 1) + s) for s in range(0, 60, 10)])
        clock.now = start + minute * 60 + 59
        journal.flush()
    journal.add("verdict", "slow: 60% of baseline", {"verdict": "slow", "summary": "60% of baseline", "evidence": ["x"], "next_step": "p", "step": "dump"})
    journal.close()

    reopened = Journal(tmp_path / "run.sqlite3", clock=clock)
    rows = reopened.minutes()
    assert [r.count for r in rows] == [6] * 10
    assert (rows[0].min, rows[0].median, rows[0].max) == (1000, 1025, 1050)
    state = RunState(clock=lambda: 500.0)
    last = restore(state, reopened, since_s=3600, wall=clock)
    assert [p.value for p in state.series["tokens_per_s"]] == [r.median for r in rows]
    assert last is not None and (last.name, last.step, last.evidence) == ("slow", "dump", ["x"])
    assert [e.kind for e in state.events] == ["verdict"]
    reopened.close()


def test_rows_past_the_age_bound_go(tmp_path, clock):
    journal = Journal(tmp_path / "run.sqlite3", clock=clock, max_age_s=3600)
    journal.take_lease()
    journal.add("action", "old", at=clock.now - 7200)
    journal.add("action", "new", at=clock.now - 60)
    journal.add_values("loss", [(clock.now - 7200, 1.0), (clock.now - 60, 2.0)])
    journal.flush()
    journal.prune()
    assert [e.text for e in journal.entries()] == ["new"]
    assert [m.median for m in journal.minutes()] == [2.0]
    journal.close()


def test_the_file_stays_under_the_size_bound_and_keeps_the_newest_rows(tmp_path, clock):
    bound = 256 * 1024
    journal = Journal(tmp_path / "run.sqlite3", clock=clock, max_bytes=bound)
    journal.take_lease()
    for i in range(4000):
        journal.add("problem", f"line {i} " + "x" * 200, {"problem": "traceback", "line": i}, at=clock.now + i)
    journal.flush()
    journal.prune()
    texts = [e.text for e in journal.entries()]
    assert texts[-1].startswith("line 3999 ")
    assert len(texts) < 4000
    pages = journal._conn.execute("PRAGMA page_count").fetchone()[0] * journal._conn.execute("PRAGMA page_size").fetchone()[0]
    assert pages <= bound * 1.1  # freed pages are handed back (auto_vacuum incremental)
    journal.close()


def test_two_writers_on_one_run_journal_observations_once_and_actions_from_both(tmp_path, clock):
    path = tmp_path / "run.sqlite3"
    first, second = Journal(path, clock=clock), Journal(path, clock=clock)
    assert first.take_lease() and not second.take_lease()
    for writer, name in ((first, "first"), (second, "second")):
        writer.add("verdict", f"healthy ({name})", {"verdict": "healthy"})
        writer.add("action", f"restart by {name}")
        writer.add_values("tokens_per_s", [(clock.now, 1.0)])
        writer.flush()
    texts = [e.text for e in first.entries()]
    assert texts == ["healthy (first)", "restart by first", "restart by second"]
    assert [m.count for m in first.minutes()] == [1]
    clock.now += LEASE_S + 1  # the first writer is gone (killed): its lease runs out
    second.add("verdict", "hung (second)", {"verdict": "hung"})
    second.flush()
    assert second.leader and second.entries()[-1].text == "hung (second)"
    first.close()
    second.close()


def start_writer(namespace, path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """A journal_writer.py inside `namespace`, once it committed; (its launcher, its PID on this side)."""
    launcher = subprocess.Popen(
        [str(PCT), "exec", namespace.id, "--", "env", f"PYTHONPATH={ROOT}", sys.executable, str(WRITER), str(path), *args],
        stdout=subprocess.PIPE, text=True,
    )
    assert launcher.stdout.readline().strip() == "ready"
    return launcher, int(Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()[0])


def wait_for_rows(conn: sqlite3.Connection, count: int) -> None:
    deadline = time.monotonic() + 60
    while conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_two_writer_processes_at_once_keep_every_committed_row_in_order(tmp_path, pid_namespace):
    path = tmp_path / "run.sqlite3"
    writers = [start_writer(pid_namespace, path, "--every", "0.001", "--kind", kind) for kind in ("action", "alert")]
    conn = sqlite3.connect(path)
    wait_for_rows(conn, 2000)
    for launcher, pid in writers:
        os.kill(pid, signal.SIGKILL)  # the writers nsenter started: ours, inside the namespace
        launcher.wait()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for kind in ("action", "alert"):
        seqs = [json.loads(data)["seq"] for (data,) in conn.execute("SELECT data FROM entries WHERE kind = ? ORDER BY id", (kind,))]
        assert len(seqs) > 100 and seqs == list(range(1, len(seqs) + 1))
    conn.close()


def test_a_writer_killed_mid_write_loses_at_most_its_last_second(tmp_path, pid_namespace):
    """SIGKILL a real writer (in its own PID namespace) while it journals ~500 entries a second."""
    path = tmp_path / "run.sqlite3"
    launcher, writer_pid = start_writer(pid_namespace, path)
    conn = sqlite3.connect(path)
    wait_for_rows(conn, 1500)
    killed_at = time.time()
    os.kill(writer_pid, signal.SIGKILL)  # the writer nsenter started: ours, inside the namespace
    launcher.wait()

    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = conn.execute("SELECT time, data FROM entries ORDER BY id").fetchall()
    seqs = [json.loads(data)["seq"] for _, data in rows]
    assert seqs == list(range(1, len(seqs) + 1))  # a prefix: nothing torn, nothing out of order
    last_kept = rows[-1][0]
    # Entries after the last one kept were stamped (at ~2 ms intervals) after the last commit,
    # which came at most FLUSH_S before the kill: the loss spans well under a second.
    assert killed_at - last_kept < 2 * FLUSH_S
    # The file takes a new writer at once; the dead writer's lease simply runs out.
    reopened = Journal(path)
    reopened.add("action", "after the kill")
    reopened.flush()
    assert reopened.entries()[-1].text == "after the kill"
    reopened.close()
    conn.close()


def test_each_run_gets_its_own_file_under_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    a = journal_path(Config(target=TargetConfig(host="root@gpu1"), run=RunConfig(name="train")))
    b = journal_path(Config(target=TargetConfig(host="root@gpu1"), run=RunConfig(name="train/2")))
    c = journal_path(Config(target=TargetConfig(host="root@gpu1"), run=RunConfig(name="train?2")))
    assert a.parent == tmp_path / "pulse" / "journal"
    assert a.name.startswith("root@gpu1-train-")
    assert len({a, b, c}) == 3  # names that clean to the same text stay apart


def test_two_flag_only_runs_never_share_a_journal_and_one_run_keeps_its_own(tmp_path, monkeypatch):
    """Every flag-only run is named "run": the journal is keyed by the log and the match too (issue 33:
    two `pulse watch` on two logs wrote one file, and `pulse journal` showed A's events as B's)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    a = RunConfig(log="/w/a.log", match=r"train\.py --run a")
    b = RunConfig(log="/w/b.log", match=r"train\.py --run b")
    assert journal_path(Config(run=a)) != journal_path(Config(run=b))
    assert journal_path(Config(run=a)) != journal_path(Config(run=RunConfig(log="/w/a.log", match=r"train\.py --run b")))
    relaunched = RunConfig(log="/w/train_{started}.log", match=r"train\.py")
    assert journal_path(Config(run=relaunched)) == journal_path(Config(run=RunConfig(log="/w/train_{started}.log", match=r"train\.py")))
