"""`pulse watch`, `pulse journal` and `pulse report` as an operator runs them: real processes, real files."""

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

from console.cli import main
from console.config import Config, RunConfig, load_config
from console.journal.store import Journal, journal_path

ROOT = Path(__file__).resolve().parents[1]
PCT = ROOT / "tests/bin/pct"
HEALTHY = ROOT / "tests/procs/healthy.py"


def write_config(tmp_path: Path, tag: str, **alerts: str) -> Path:
    config = tmp_path / "run.toml"
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in alerts.items())
    config.write_text(
        f'[run]\nname = "train"\nlog = "{tmp_path}/train.log"\nmatch = "{tag}"\n'
        f"[metrics]\nbaseline_tokens_per_s = 14200\n"
        f"[alerts]\nhold_s = 0\nmin_interval_s = 0\n{extra}"
    )
    return config


def pulse(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}


def start_watch(tmp_path: Path, namespace, env: dict, config: Path, tag: str) -> tuple[subprocess.Popen, int]:
    """A slow run (5,000 tok/s against 14,200) and `pulse watch` on it, both inside `namespace`;
    (the watch's launcher, the watch's PID on this side)."""
    inside = [str(PCT), "exec", namespace.id, "--"]
    with open(tmp_path / "train.log", "w") as log:
        subprocess.Popen([*inside, sys.executable, "-u", str(HEALTHY), "--tok-s", "5000", "--interval", "0.2", "--tag", tag],
                         stdout=log, stderr=subprocess.STDOUT)
    launcher = subprocess.Popen([*inside, "env", f"XDG_STATE_HOME={env['XDG_STATE_HOME']}", f"PYTHONPATH={ROOT}",
                                 sys.executable, "-m", "console.cli", "watch", str(config)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    return launcher, int(Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()[0])


def wait_until(done, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.2)


def test_watch_journals_a_slow_run_alerts_once_and_stops_cleanly_on_sigterm(tmp_path, pid_namespace, env):
    tag = f"pulse-watch-{os.getpid()}"
    alert = tmp_path / "alert.json"
    config = write_config(tmp_path, tag, command=f"cat > {alert}")
    launcher, watch_pid = start_watch(tmp_path, pid_namespace, env, config, tag)
    wait_until(lambda: alert.exists() and alert.stat().st_size or launcher.poll() is not None)
    os.kill(watch_pid, signal.SIGTERM)  # the watch nsenter started: ours, inside the namespace
    out, err = launcher.communicate(timeout=60)

    assert launcher.returncode == 0, err
    assert "slow: " in out
    assert json.loads(alert.read_text())["verdict"] == "slow"
    shown = pulse("journal", str(config), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)
    texts = [(e["kind"], e["text"]) for e in history["entries"]]
    assert texts[0][0] == "watch" and texts[-1] == ("watch", "pulse watch stopped (SIGTERM)")
    assert [e["data"]["verdict"] for e in history["entries"] if e["kind"] == "verdict"][0] == "slow"
    assert ("alert", "command: command ran") in texts
    rates = [m for m in history["minutes"] if m["metric"] == "tokens_per_s"]
    assert rates and all(m["median"] == 5000 for m in rates)
    report = pulse("report", str(config), "--since", "1h", env=env)
    assert report.returncode == 0
    assert report.stdout.startswith("# Pulse report: train on this machine")
    assert "## Last problem verdict: slow" in report.stdout


def test_watch_killed_mid_run_leaves_a_journal_that_reads_back(tmp_path, pid_namespace, env):
    tag = f"pulse-watch-kill-{os.getpid()}"
    config = write_config(tmp_path, tag)
    launcher, watch_pid = start_watch(tmp_path, pid_namespace, env, config, tag)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
        path = journal_path(load_config(config))

    def committed() -> bool:
        """A verdict is in the file (not just printed: the print comes before the commit)."""
        if not path.exists():
            return False
        conn = sqlite3.connect(path)
        try:
            return conn.execute("SELECT COUNT(*) FROM entries WHERE kind = 'verdict'").fetchone()[0] > 0
        except sqlite3.OperationalError:  # the watch has not made its tables yet
            return False
        finally:
            conn.close()

    wait_until(lambda: committed() or launcher.poll() is not None)
    os.kill(watch_pid, signal.SIGKILL)  # no clean-up at all: what was committed must stay
    launcher.wait(timeout=30)

    shown = pulse("journal", str(config), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)
    kinds = [e["kind"] for e in history["entries"]]
    assert kinds[0] == "watch" and "verdict" in kinds and kinds.count("watch") == 1  # started, never stopped
    assert any(m["metric"] == "tokens_per_s" for m in history["minutes"])
    conn = sqlite3.connect(history["journal"])
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def fast_forward_journal(path: Path, hours: int) -> None:
    """A journal written as a run of `hours` would write it: minutes, a slowdown, a restart, a hang."""
    start = time.time() - hours * 3600
    journal = Journal(path, clock=lambda: start)
    journal.take_lease()
    journal.add("verdict", "healthy: the run is alive and its log progresses", {"verdict": "healthy", "summary": "the run is alive", "evidence": [], "next_step": "", "key": None}, at=start + 60)
    for minute in range(hours * 60):
        rate = 14200.0 if minute < 90 else 6100.0
        journal.add_values("tokens_per_s", [(start + minute * 60 + s, rate + s) for s in range(0, 60, 10)])
        journal.add_values("loss", [(start + minute * 60, 3.0 - minute / 1000)])
    journal.add("verdict", "slow: throughput 43% of baseline", {"verdict": "slow", "summary": "throughput 43% of baseline",
                "evidence": ["6,100 tok/s against 14,200"], "next_step": "dump its stacks", "key": "p"}, at=start + 95 * 60)
    journal.add("problem", "Exception in thread TargetForwardLoop:", {"problem": "traceback", "line": 8812, "log": "/w/train.log"}, at=start + 96 * 60)
    journal.add("action", "restart: ok: launched pid 4711", {"action": "restart", "outcome": "ok: launched pid 4711", "operator_host": "ops", "steps": []}, at=start + 100 * 60)
    journal.add("connection", "connection lost: Connection lost", {"status": "reconnecting", "detail": "Connection lost"}, at=start + 110 * 60)
    journal.add("connection", "reconnected after a 42 s gap", {"status": "connected", "gap_s": 42.0}, at=start + 110 * 60 + 42)
    journal.flush()
    journal.close()


def test_journal_and_report_read_a_fast_forwarded_run(tmp_path, env, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    config = write_config(tmp_path, "unused")
    fast_forward_journal(journal_path(load_config(config)), hours=3)

    assert main(["journal", str(config), "--since", "4h"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.endswith("verdict     slow: throughput 43% of baseline") for line in lines)
    assert any("problem     Exception in thread TargetForwardLoop:" in line for line in lines)
    hours = lines[lines.index(next(line for line in lines if line.startswith("per hour"))) + 1:]
    assert len(hours) in (3, 4)  # the run's three hours, cut by the clock's hour boundaries

    assert main(["report", str(config), "--since", "4h"]) == 0
    report = capsys.readouterr().out
    assert "- **Verdicts:** " in report and "now **slow**" in report
    assert "- **Actions:** 1 (1 restart)" in report
    assert "- **Connection losses:** 1, 42s without data in all, longest 42s" in report
    assert "| traceback | `Exception in thread TargetForwardLoop:` |" in report

    assert main(["journal", str(config), "--since", "30m"]) == 0  # the slow verdict still holds at the window's start
    assert "verdict     slow" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "pulse journal: --since 'yesterday': give a duration such as 90s, 30m, 6h, 2d or 1h30m"),
        ([], "no journal yet (run the console or `pulse watch` on this config first)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, env, monkeypatch, capsys, args, message):
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    config = write_config(tmp_path, "unused")
    assert main(["journal", str(config), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_last_demos_journal_is_read_with_demo_and_its_path_is_said(tmp_path, monkeypatch):
    """`pulse demo` has no config file: `pulse journal --demo` reads the journal of the last demo run."""
    from console.demo.run import name_demo_journal

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "console.cli", "journal", "--demo"]
    none = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and none.stderr.endswith("no demo has run yet here: `pulse demo` first\n")
    config = Config(run=RunConfig(name="demo-healthy", log=str(tmp_path / "demo" / "train.log"), match="demo"))
    name_demo_journal(config)
    journal = Journal(journal_path(config)).start()
    journal.add("watch", "pulse demo started")
    journal.close()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"journal {journal_path(config)}\n"
    assert "pulse demo started" in done.stdout
