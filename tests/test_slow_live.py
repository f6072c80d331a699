"""Why a run is slow (issue 34) on this machine, the default path: a real run that turns input-bound,
and `pulse check` as a user types it (no baseline in the config, no tuning flag).

The baseline is learned from the run's own log, or from its journal when one holds its history;
the cause is named from a few seconds of py-spy recordings and /proc, taken once for the slowdown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from console.config import Config, RunConfig
from console.journal.store import Journal, journal_path, read_rate_histories
from tests.sshd import TESTS_BIN
from tests.test_check import ROOT, Run
from tests.test_earned_live import check_argv
from tests.test_restart import procs  # noqa: F401  (a fixture)

SLOW_AT_S = 3.0


def slowed(run: Run, lines: int = 8) -> None:
    """Until the run has printed `lines` rate lines since it slowed (each 0.5 s apart once slow)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rates = [float(line.split("|")[1].split()[0]) for line in run.log.read_text().splitlines() if "tokens/s" in line]
        if len(rates) > 40 and sum(1 for r in rates[-lines:] if r < 0.5 * max(rates)) >= lines:
            return
        time.sleep(0.2)
    raise AssertionError(f"the run did not slow: {run.log.read_text()[-500:]}")


def check(tmp_path: Path, run: Run, env: dict) -> dict:
    done = subprocess.run(check_argv(tmp_path, run), cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout)


def test_pulse_check_names_an_input_bound_run_against_its_own_log(procs, tmp_path):
    run = Run(procs, tmp_path, "slow_input.py", "--slow-at", str(SLOW_AT_S))
    slowed(run)
    report = check(tmp_path, run, {**os.environ, "PATH": f"{TESTS_BIN}:{os.environ['PATH']}"})
    assert report["verdict"] == "slow", report["summary"]
    assert report["summary"].startswith("input-bound: the run waits on its input: its data thread cannot keep up; ")
    assert "below its best sustained" in report["summary"] and "(its log's best" in report["summary"]
    said = "\n".join(report["evidence"])
    assert "main: waits on its data" in said and "(queue get), in <module> (slow_input.py:" in said
    assert "thread DataThread spends its time in read_batch (slow_input.py:" in said
    assert "ruled out: not recompiling" in said


def test_pulse_check_measures_against_the_runs_journal_when_it_has_one(procs, tmp_path, monkeypatch):
    run = Run(procs, tmp_path, "slow_input.py", "--slow-at", str(SLOW_AT_S))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # this test's journal, and the check's
    env = {**os.environ, "PATH": f"{TESTS_BIN}:{os.environ['PATH']}"}
    # What a watch journaled yesterday: two hours at 60K tokens/s, then a worse hour at 40K.
    config = Config(run=RunConfig(log=str(run.log), match=f"--tag {run.tag}"))
    yesterday = time.time() - 86400
    journal = Journal(journal_path(config)).start()
    journal.add_values("tokens_per_s", [(yesterday + m * 60, 60_000.0) for m in range(120)]
                       + [(yesterday + (120 + m) * 60, 40_000.0) for m in range(60)])
    journal.close()
    assert read_rate_histories(config)["tokens_per_s"].rate == 60_000.0
    slowed(run)
    report = check(tmp_path, run, env)
    assert report["verdict"] == "slow", report["summary"]
    assert "below its best sustained 60K (yesterday " in report["summary"], report["summary"]
