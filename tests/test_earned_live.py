"""Issue 31 on this machine, the default path: real processes in each shape, `pulse check` as a user types
it (no threshold flag), and the console opened on a run that is already in trouble.

Each shape is quiet past the floor (10 s) before it is looked at, and well before the 5 minutes an
unlearned rhythm allows: only the evidence of progress (the log within its rhythm, or stacks that
move) makes a run healthy; a run whose every thread waits is hung, named by what it waits on.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from console.config import Config, RunConfig, TargetConfig
from console.stall import QUIET_FLOOR_S
from console.ui.app import PulseApp
from console.ui.start import Sources, start_sources
from tests.sshd import TESTS_BIN
from tests.test_check import PY_SPY, ROOT, Run
from tests.test_restart import procs  # noqa: F401  (a fixture)

#: program and arguments → (the truth, what the summary must say)
SHAPES = {
    ("hung_queue.py",): ("hung", "died of RuntimeError; the process lives on"),
    ("loader_hang.py",): ("hung", "the main thread waits on its DataLoader workers"),
    ("socket_wait.py",): ("hung", "the main thread waits on I/O in <module> (socket_wait.py:"),
    ("healthy.py", "--steps", "15", "--interval", "0.3"): ("hung", "the main thread waits on lock/condition wait"),
    ("paced_buffered.py",): ("buffered", "the run's loop turns, but its log is quiet"),
    ("quiet_worker.py",): ("healthy", "but the run works: main (pid "),
    ("healthy.py", "--interval", "0.2"): ("healthy", "the run is alive and its log progresses"),
}


def check_argv(tmp_path: Path, run: Run) -> list[str]:
    config = tmp_path / f"check-{uuid.uuid4().hex[:8]}.toml"
    config.write_text(f'[target]\npy_spy = "{PY_SPY}"\n')
    return [sys.executable, "-m", "console.cli", "check", str(config), "--json", *run.flags]


def quiet_past_the_floor(run: Run) -> bool:
    return time.time() - run.log.stat().st_mtime > QUIET_FLOOR_S + 0.5


def test_pulse_check_on_the_default_path_says_the_truth_of_each_shape(procs, tmp_path):
    runs = {shape: Run(procs, tmp_path, *shape) for shape in SHAPES}
    deadline = time.monotonic() + 40
    quiet = [run for shape, run in runs.items() if SHAPES[shape][0] != "healthy" or "--steps" in shape or shape[0] == "quiet_worker.py"]
    while not all(quiet_past_the_floor(run) for run in quiet) and time.monotonic() < deadline:
        time.sleep(0.2)
    env = {**os.environ, "PATH": f"{TESTS_BIN}:{os.environ['PATH']}"}
    started = time.monotonic()
    checks = {
        shape: subprocess.Popen(check_argv(tmp_path, run), cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for shape, run in runs.items()
    }
    reports = {shape: json.loads(check.communicate(timeout=60)[0]) for shape, check in checks.items()}
    took = time.monotonic() - started
    for shape, (truth, said) in SHAPES.items():
        report = reports[shape]
        assert (report["verdict"], checks[shape].returncode) == (truth, 0 if truth == "healthy" else 1), (
            shape, report["summary"], report["evidence"])
        assert said in report["summary"], (shape, report["summary"])
    buffered = reports[("paced_buffered.py",)]
    assert buffered["processes"][0]["cpu_pct"] < 5.0 and buffered["log"]["size"] == 0  # only its stacks tell
    # Its loop turns: paced (it sleeps in its own loop and wakes), or moving when a loaded box stretched its sleeps.
    assert any(s["motion"] in ("paced", "moving") and s["main"] for s in buffered["stacks"]), buffered["stacks"]
    assert any(s["motion"] == "moving" for s in reports[("quiet_worker.py",)]["stacks"])
    assert reports[("healthy.py", "--interval", "0.2")]["stacks"] is None  # a progressing log needs no stacks
    assert took < 30, f"seven checks at once took {took:.1f} s"


async def console_on(run: Run) -> tuple[PulseApp, Sources]:
    """The console as `pulse --log … --match …` opens it on `run` (its real sources: agent, follower, journal)."""
    match, log = run.flags[1], run.flags[3]
    config = Config(target=TargetConfig(py_spy=str(PY_SPY)), run=RunConfig(name=run.tag, match=match, log=log))
    sources = await start_sources(config)

    def attach(on_change):
        sources.monitor.on_change = on_change
        return sources.monitor

    return PulseApp(config, sources.state, monitor_factory=attach, target=sources.target, watch=lambda app: sources.watch), sources


async def test_the_console_opened_on_a_hung_run_says_hung_at_once(procs, tmp_path, monkeypatch):
    """Not "healthy: its rhythm not learned yet": the console judges what it read at start, and looks at
    the stacks itself once the verdict needs them."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = Run(procs, tmp_path, "socket_wait.py")
    while not quiet_past_the_floor(run):
        await asyncio.sleep(0.2)
    app, sources = await console_on(run)
    opened = time.monotonic()
    async with app.run_test(size=(120, 40)) as pilot:
        while (app.verdict is None or app.verdict.name != "hung") and time.monotonic() - opened < 20:
            await pilot.pause(0.2)
        judged_in = time.monotonic() - opened
        assert app.verdict is not None and app.verdict.name == "hung", app.verdict
        assert app.verdict.summary.startswith("the main thread waits on I/O in <module> (socket_wait.py:")
        assert "hung" in app.run_screen.status_view(app.clock()).verdict
    await sources.target.close()
    assert judged_in < 15, f"hung after {judged_in:.1f} s"


async def test_a_buffered_run_whose_stderr_warns_is_buffered_and_stays_so(procs, tmp_path, monkeypatch):
    """Issue 33: the log grows, but only by stderr's warnings while the step lines wait in stdout's buffer:
    no progress, so the console looks at the stacks and says buffered, and a new warning never flips it
    back to "healthy: its log progresses" (nor does the journal alternate)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = Run(procs, tmp_path, "buffered_warnings.py")
    run.wait_for_text("UserWarning")
    app, sources = await console_on(run)
    shown: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        opened = time.monotonic()
        while (app.verdict is None or app.verdict.name != "buffered") and time.monotonic() - opened < 30:
            await pilot.pause(0.2)
        assert app.verdict is not None and app.verdict.name == "buffered", app.verdict
        assert "stdout is block-buffered into a file" in app.verdict.summary
        assert any("only warnings since" in line for line in app.verdict.evidence), app.verdict.evidence
        warned = run.log.read_text().count("UserWarning")
        watched = time.monotonic()
        while time.monotonic() - watched < 8:
            await pilot.pause(0.2)
            shown.append(app.verdict.name)
        assert run.log.read_text().count("UserWarning") >= warned + 3  # the log grew meanwhile, by warnings
        assert set(shown) == {"buffered"}, shown
        journal = app.run_watch.journal if app.run_watch is not None else None
        assert journal is not None
        journal.flush()
        verdicts = [e.text.split(":")[0] for e in journal.entries(kinds=("verdict",))]
    await sources.target.close()
    assert verdicts[verdicts.index("buffered"):] == ["buffered"], verdicts


async def test_a_thread_that_dies_is_flagged_in_the_header_at_once_and_its_hang_offers_the_restart(procs, tmp_path, monkeypatch):
    """Issue 33: not seconds of "healthy" under a red "Exception in thread"; the hang that follows offers R
    (its stacks are on screen already), and no look in between says healthy again."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = Run(procs, tmp_path, "dying_thread.py", "--die-after", "4", "--then", "3")
    run.wait_for_text("step 1 ")
    app, sources = await console_on(run)
    # Every look's fresh verdict (what the header then holds steady): a look that says healthy is caught
    # at once, not only once it has held long enough for the header to say it.
    looks: list[tuple[str, str]] = []
    shown: list[tuple[str, str]] = []
    show = app.set_verdict
    monkeypatch.setattr(app, "set_verdict", lambda verdict: (looks.append((verdict.name, verdict.summary)), show(verdict))[-1])
    async with app.run_test(size=(120, 40)) as pilot:
        while "RuntimeError" not in run.log.read_text():
            await pilot.pause(0.05)
        died = time.monotonic()
        while (app.verdict is None or app.verdict.name == "healthy") and time.monotonic() - died < 10:
            await pilot.pause(0.1)
        flagged_in = time.monotonic() - died
        since_flagged = len(looks)
        assert app.verdict is not None and app.verdict.summary.startswith('thread "Producer" died of RuntimeError'), app.verdict
        # Through the log's silence past the floor (past its stall limit too, at a 0.2 s rhythm) and the look
        # that follows it (the one at its stacks), after which nothing changes: the main thread waits on the
        # dead producer's queue forever, and no look comes until something does.
        looks_at_the_floor: int | None = None
        while time.monotonic() - died < 25:
            shown.append((app.verdict.name, app.verdict.summary))
            if looks_at_the_floor is None and quiet_past_the_floor(run):
                looks_at_the_floor = len(looks)
            if looks_at_the_floor is not None and len(looks) > looks_at_the_floor and app.verdict.name == "hung":
                break
            await pilot.pause(0.2)
        shown += looks[since_flagged:]
        assert (app.verdict.name, app.verdict.step) == ("hung", "restart"), app.verdict
        assert "then restart" in app.verdict.next_step
    await sources.target.close()
    assert flagged_in < 2.5, f"flagged {flagged_in:.1f} s after the traceback"
    assert "healthy" not in {name for name, _ in shown}, shown


def test_a_check_whose_py_spy_is_denied_ptrace_says_so_and_names_the_fix(procs):
    """Run as another user, py-spy may not attach: the verdict is not a guess but "unknown", with why
    and what to change; an idle run quiet past its stall limit would still be hung by its CPU alone."""
    folder = Path(tempfile.mkdtemp(prefix="pulse-ptrace-"))
    folder.chmod(0o755)
    try:
        run = Run(procs, folder, "paced_buffered.py")
        run.log.chmod(0o644)
        config = folder / "check.toml"
        config.write_text(f'[target]\npy_spy = "{PY_SPY}"\n')
        config.chmod(0o644)
        while not quiet_past_the_floor(run):
            time.sleep(0.2)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        done = subprocess.run([*nobody, sys.executable, "-m", "console.cli", "check", str(config), "--json", *run.flags],
                              cwd=ROOT, env={**os.environ, "HOME": str(folder)}, capture_output=True, text=True, timeout=60)
        report = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert (done.returncode, report["verdict"]) == (1, "unknown"), report["summary"]
    assert "its stacks could not be taken" in report["summary"]
    assert "ptrace was denied" in report["summary"] and "kernel.yama.ptrace_scope" in report["summary"]
    assert "--cap-add SYS_PTRACE" in report["summary"]
