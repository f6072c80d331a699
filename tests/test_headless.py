"""`pulse restart | warmup | dump` from a terminal: plan, confirmation, live steps, exit codes."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path

from console.commands import actions as headless
from console.actions.audit import AuditLog
from console.config import Config, GpuConfig, RunConfig
from tests.test_restart import HEALTHY, Processes, alive, procs  # noqa: F401  (procs is a fixture)
from tests.test_warmup import warmup_config

REPO = Path(__file__).resolve().parent.parent


def cli(*argv: str, home: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "console.cli", *argv], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=60, **kwargs
    )


def restart_flags(tmp_path: Path, tag: str) -> list[str]:
    return [
        "--launch", f"{sys.executable} {HEALTHY} --tag {tag} --interval 0.05",
        "--match", tag,
        "--log", str(tmp_path / f"{tag}_{{started}}.log"),
        "--pidfile", str(tmp_path / "run.pid"),
    ]


def start_run(procs: Processes, tmp_path: Path, tag: str) -> int:
    run = procs.start([sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.05"])
    procs.adopt(run.pid)
    (tmp_path / "run.pid").write_text(f"{run.pid}\n")
    return run.pid


def test_read_only_refuses_restart_and_warmup(procs, tmp_path, capsys):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pid = start_run(procs, tmp_path, tag)
    result = cli("restart", *restart_flags(tmp_path, tag), "--yes", "--read-only", home=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "read-only: restart disabled (started with --read-only)\n"
    assert alive(pid)
    config, _ = warmup_config(tmp_path)
    code = headless.warmup(config, argparse.Namespace(read_only=True, yes=True))
    assert code == 2
    assert capsys.readouterr().err == "read-only: warmup disabled (started with --read-only)\n"


def test_no_terminal_and_no_yes_refuses_after_showing_the_plan(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pid = start_run(procs, tmp_path, tag)
    result = cli("restart", *restart_flags(tmp_path, tag), home=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert result.stderr == "restart: not confirmed: no terminal to ask on; pass --yes to restart without asking\n"
    assert str(pid) in result.stdout and "launch:" in result.stdout
    assert alive(pid)
    assert not (tmp_path / ".local/state/pulse/audit.jsonl").exists()


def test_terminal_answer_no_does_nothing(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pid = start_run(procs, tmp_path, tag)
    primary, secondary = pty.openpty()
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "console.cli", "restart", *restart_flags(tmp_path, tag)],
        stdin=secondary, stdout=secondary, stderr=secondary, cwd=REPO, env=env,
    )
    os.close(secondary)
    try:
        seen = _read_until(primary, b"Proceed? [y/N] ")
        assert str(pid).encode() in seen
        os.write(primary, b"n\n")
        assert process.wait(timeout=30) == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
    assert alive(pid)


def test_yes_restarts_prints_each_step_and_exits_zero_when_verified(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    old = start_run(procs, tmp_path, tag)
    result = cli("restart", *restart_flags(tmp_path, tag), "--yes", "--grace", "2", home=tmp_path)
    new = int((tmp_path / "run.pid").read_text())
    procs.adopt(new)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^\[ ok \] stop: 1 of 1 stopped$", result.stdout, re.M)
    assert re.search(rf"^\[ ok \] launch: PID {new}, log ", result.stdout, re.M)
    assert re.search(rf"^\[ ok \] verify: new run PID {new} alive", result.stdout, re.M)
    assert not alive(old) and alive(new)
    [entry] = AuditLog(tmp_path / ".local/state/pulse/audit.jsonl").entries()
    assert entry["action"] == "restart" and entry["outcome"].startswith("ok")


def test_warmup_exit_code_follows_the_steps(tmp_path, capsys):
    config, _ = warmup_config(tmp_path, gpus=(0,), seq_lens=(10, 20, 30), fail="0:20")
    assert headless.warmup(config, argparse.Namespace(read_only=False, yes=True)) == 1
    out = capsys.readouterr().out
    assert "[FAIL] step 2/3: gpu 0 seq_len 20 failed: exit 1" in out
    assert "[skip] step 3/3" in out
    assert re.search(r"^        ! torch.OutOfMemoryError: CUDA out of memory", out, re.M)

    (tmp_path / "ok").mkdir()
    config, _ = warmup_config(tmp_path / "ok", gpus=(0,), seq_lens=(10, 20))
    assert headless.warmup(config, argparse.Namespace(read_only=False, yes=True)) == 0
    out = capsys.readouterr().out
    assert "[ ok ] step 2/2" in out and "FAIL" not in out


def test_warmup_without_terminal_is_not_run(tmp_path, capsys):
    config, record = warmup_config(tmp_path)
    assert headless.warmup(config, argparse.Namespace(read_only=False, yes=False)) == 2
    assert capsys.readouterr().err.startswith("warmup: not confirmed: no terminal to ask on")
    assert not record.exists()


def _read_until(fd: int, marker: bytes, timeout: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no {marker!r} on the terminal; it showed {seen[-500:]!r}")
        seen += os.read(fd, 4096)
    return seen


# -- dump: the real py-spy on a real hung process ----------------------------------------------

PY_SPY = str(REPO / ".venv" / "bin" / "py-spy")
HUNG = REPO / "tests" / "procs" / "hung_queue.py"


def dump_setup(procs: Processes, tmp_path: Path) -> tuple[Config, int]:
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    hung = procs.start([sys.executable, str(HUNG), "--tag", tag], stderr=subprocess.DEVNULL)
    procs.adopt(hung.pid)
    time.sleep(0.5)  # the producer thread dies 0.2 s in; then the main thread waits on the queue forever
    config = Config(run=RunConfig(match=tag), gpus=GpuConfig(source="none"))
    config = dataclasses.replace(config, target=dataclasses.replace(config.target, py_spy=PY_SPY))
    return config, hung.pid


def dump_args(**overrides) -> argparse.Namespace:
    fields = dict(pid=None, native=False, locals=False, children=False, nonblocking=False, json=False)
    return argparse.Namespace(**{**fields, **overrides})


def test_dump_groups_identical_stacks_and_marks_user_frames(procs, tmp_path, capsys):
    config, pid = dump_setup(procs, tmp_path)
    assert headless.dump(config, dump_args()) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Process {pid}: {sys.executable} {HUNG}")
    # the main thread waits on the queue from the run's own code, marked as a user frame
    assert re.search(r'^  Thread \d+ "MainThread": idle, queue get$', out, re.M)
    assert re.search(r"^      > pack_hidden \(\S*hung_queue\.py:\d+\)$", out, re.M)
    assert re.search(r"^        Queue\.get \(\S*queue\.py:\d+\)$", out, re.M)
    # the three helpers wait identically: one stack, counted
    assert re.search(r'^  Thread \d+ "Helper-\d": idle, lock/condition wait  \[x3 identical stacks; also ', out, re.M)


def test_dump_json_and_errors(procs, tmp_path, capsys):
    config, pid = dump_setup(procs, tmp_path)
    assert headless.dump(config, dump_args(json=True)) == 0
    [process] = json.loads(capsys.readouterr().out)
    assert process["pid"] == pid
    counts = sorted(group["count"] for group in process["groups"])
    assert counts[-1] == 3 and sum(counts) == 4
    main = next(g for g in process["groups"] if g["threads"][0]["name"] == "MainThread")
    assert main["wait"] == "queue get"
    assert any(f["function"] == "pack_hidden" and f["user"] for f in main["frames"])
    assert any(f["file"].endswith("queue.py") and not f["user"] for f in main["frames"])

    assert headless.dump(config, dump_args(pid=2**22 + 7)) == 1
    err = capsys.readouterr().err
    assert err.startswith("dump: ") and err.count("\n") == 1
    gone = Config(run=RunConfig(match="no_such_run_anywhere_x1"), gpus=GpuConfig(source="none"))
    assert headless.dump(gone, dump_args()) == 2
    assert capsys.readouterr().err.startswith("dump: no run process found")
