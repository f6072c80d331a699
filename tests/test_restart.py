"""Safe restart against real processes: decoys survive, the run is replaced once, locally and over sshd."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from console.actions.audit import ActionRefused, AuditLog, StepEvent, StepStatus
from console.actions.restart import execute_restart, is_simple_command, launch_argv, launch_env, plan_restart
from console.observe.remote_process import launch
from console.config import Config, GpuConfig, RunConfig
from console.remote.connect import make_target
from console.remote.target import LocalTarget, TargetError

PROCS = Path(__file__).resolve().parent / "procs"
HEALTHY = PROCS / "healthy.py"
IGNORE_SIGTERM = PROCS / "ignore_sigterm.py"
FAST = dict(kill_wait_s=5.0, gpu_timeout_s=5.0, verify_after_s=0.6, poll_s=0.05)


# -- real processes, cleaned up by PID -----------------------------------------------------


class Processes:
    """Processes a test started (or that a restart started for it): all killed by PID at the end."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen] = []
        self.pids: set[int] = set()

    def start(self, argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
        self.popens.append(popen)
        return popen

    def adopt(self, pid: int) -> None:
        self.pids.add(pid)

    def close(self) -> None:
        for pid in self.pids:
            _kill(pid)
        for popen in self.popens:
            try:
                os.killpg(popen.pid, signal.SIGKILL)  # each was started as its own group
            except ProcessLookupError:
                pass
            popen.wait()


@pytest.fixture
def procs():
    started = Processes()
    try:
        yield started
    finally:
        started.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def run_restart(target, config, plan, **kwargs) -> list[StepEvent]:
    return [event async for event in execute_restart(target, config, plan, **{**FAST, **kwargs})]


def final(events: list[StepEvent], step: str) -> StepEvent:
    return [e for e in events if e.step == step and e.status is not StepStatus.RUNNING][-1]


def run_config(tmp_path: Path, tag: str, **run) -> Config:
    fields = dict(
        launch=f"{sys.executable} {HEALTHY} --tag {tag} --interval 0.05",
        cwd=str(tmp_path),
        log=str(tmp_path / f"{tag}_{{started}}.log"),
        match=re.escape(tag),
        grace_s=3.0,
    )
    fields.update(run)
    return Config(
        run=RunConfig(**fields),
        gpus=GpuConfig(source="none"),
        audit_log=str(tmp_path / "audit.jsonl"),
    )


# -- pure parts ------------------------------------------------------------------------------


async def test_a_launch_runs_exactly_as_written_with_its_folder_environment_log_and_pidfile(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "work dir"
    folder.mkdir()
    shows = "import json, os, sys; print(json.dumps([sys.argv[1:], os.getcwd(), os.environ['NCCL_DEBUG'], os.environ['PYTHONUNBUFFERED']]))"
    command = f"{sys.executable} -c {shlex.quote(shows)} --name 'a b' '$(touch x)'"
    assert launch_argv(command) == ("bash", "-c", f"exec {command}")  # a simple command: the PID is the run's
    launched = await launch(LocalTarget(), list(launch_argv(command)), cwd=str(folder),
                            env=launch_env({"NCCL_DEBUG": "INFO; rm -rf ~"}), log="~/logs/run $(x).log",
                            pidfile=str(folder / "run.pid"))
    log = tmp_path / "logs" / "run $(x).log"
    wait_for(lambda: log.exists() and log.read_text().endswith("\n"), "the launched program's output")
    assert json.loads(log.read_text()) == [["--name", "a b", "$(touch x)"], str(folder), "INFO; rm -rf ~", "1"]
    assert (folder / "run.pid").read_text() == f"{launched.ref.pid}\n" and launched.pidfile_error is None
    assert not (folder / "x").exists() and not (tmp_path / "x").exists()


async def test_a_launch_that_cannot_start_says_why(tmp_path):
    with pytest.raises(TargetError, match=r"cannot cd .*nowhere: No such file or directory"):
        await launch(LocalTarget(), ["true"], cwd=str(tmp_path / "nowhere"), log="run.log")


def test_only_a_simple_launch_is_execed():
    assert is_simple_command("python3 train.py --x 'a;b'")
    assert not is_simple_command("source env/bin/activate && python3 train.py")
    assert not is_simple_command("python3 a.py; python3 b.py")


async def test_read_only_and_missing_launch_are_refused(tmp_path):
    config = run_config(tmp_path, "x")
    with pytest.raises(ActionRefused, match=r"^read-only: restart disabled \(started with --read-only\)$"):
        await plan_restart(LocalTarget(), config, read_only=True)
    no_launch = dataclasses.replace(config, run=dataclasses.replace(config.run, launch=None))
    with pytest.raises(ActionRefused, match="no \\[run\\] launch"):
        await plan_restart(LocalTarget(), no_launch)


# -- against real processes ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "ssh"])
async def test_restart_replaces_the_run_and_spares_every_decoy(where, request, procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    old_log = tmp_path / f"{tag}.log"
    old_log.touch()
    # The run as an operator starts it: a login shell that stays as its parent, same process group.
    launcher = procs.start(
        ["bash", "-c", f"cd {tmp_path}; {sys.executable} {HEALTHY} --tag {tag} --interval 0.05 >> {old_log} 2>&1 & wait; sleep 300"]
    )
    old_pid = wait_for(lambda: children(launcher.pid), "the run to start")[0]
    procs.adopt(old_pid)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    decoys = {
        "launcher": launcher,
        # grep blocks opening a FIFO nobody writes to: one process, alive until killed
        "grep": procs.start(["grep", tag, str(fifo)]),
        "tail": procs.start(["tail", "-f", str(old_log)]),
        "vim": procs.start(["bash", "-c", f"exec -a vim {sys.executable} -c 'import time; time.sleep(300)' {tag}.py"]),
    }
    config = run_config(tmp_path, tag)
    if where == "ssh":
        config = dataclasses.replace(config, target=request.getfixturevalue("sshd").target_config())
    target = make_target(config.target)
    try:
        plan = await plan_restart(target, config)
        assert [p.pid for p in plan.processes] == [old_pid]
        planned = plan.processes[0]
        assert planned.pgid == launcher.pid and tag in planned.cmdline
        # the run shares the launcher's group, so only its PID may be signalled
        assert [s.dest for s in plan.signals] == [str(old_pid)]
        assert re.fullmatch(rf"{re.escape(str(tmp_path))}/{tag}_\d{{8}}-\d{{6}}\.log", plan.log)

        events = await run_restart(target, config, plan)
    finally:
        await target.close()

    launched = final(events, "launch")
    new_pid = launched.data.get("pid")
    if new_pid:
        procs.adopt(new_pid)
    assert final(events, "stop").status is StepStatus.OK, events
    assert launched.status is StepStatus.OK, events
    assert final(events, "verify").status is StepStatus.OK, events
    assert not alive(old_pid)
    assert alive(new_pid) and new_pid != old_pid
    for name, decoy in decoys.items():
        assert decoy.poll() is None, f"the {name} decoy was killed"
    # the new run is unbuffered into its fresh log, and that log grows
    new_log = Path(plan.log)
    size = wait_for(lambda: new_log.stat().st_size, "the new log to get lines")
    wait_for(lambda: new_log.stat().st_size > size, "the new log to grow")
    assert "PYTHONUNBUFFERED=1" in Path(f"/proc/{new_pid}/environ").read_bytes().decode().split("\0")
    assert Path(f"/proc/{new_pid}/cwd").resolve() == tmp_path.resolve()
    entry = AuditLog(config.audit_log).entries()[-1]
    assert entry["action"] == "restart"
    assert entry["outcome"].startswith("ok") and str(new_pid) in entry["outcome"]
    assert [s["step"] for s in entry["steps"]] == ["lock", "stop", "gpu", "alive", "launch", "verify"]


async def test_sigterm_ignoring_run_is_killed_after_grace_and_pidfile_rewritten(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pidfile = tmp_path / "run.pid"
    # A run that is its own process group (setsid) with a worker child that ignores SIGTERM too.
    run = procs.start(
        [sys.executable, "-c",
         f"import os,signal,subprocess,sys,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
         f" subprocess.Popen([sys.executable, {str(IGNORE_SIGTERM)!r}, 'worker']); time.sleep(300)", tag],
    )
    procs.adopt(run.pid)
    worker = wait_for(lambda: children(run.pid), "the worker to start")[0]
    procs.adopt(worker)
    pidfile.write_text(f"{run.pid}\n")
    config = run_config(tmp_path, tag, pidfile=str(pidfile), grace_s=0.5)
    target = LocalTarget()
    plan = await plan_restart(target, config)
    assert {p.pid for p in plan.processes} == {run.pid, worker}
    assert [s.dest for s in plan.signals] == [f"-{run.pid}"]  # one signal for the whole group
    assert f"  signals to: process group {run.pid}" in plan.describe()

    events = await run_restart(target, config, plan)

    stop = final(events, "stop")
    assert stop.status is StepStatus.OK and "2 needed SIGKILL" in stop.detail, events
    assert any(e.step == "stop" and "SIGKILL" in e.detail for e in events if e.status is StepStatus.RUNNING)
    run.wait(timeout=5)
    assert not alive(worker)
    new_pid = final(events, "launch").data["pid"]
    procs.adopt(new_pid)
    assert pidfile.read_text().strip() == str(new_pid)
    assert final(events, "verify").status is StepStatus.OK


async def test_reused_pid_is_not_signalled(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = procs.start([sys.executable, str(HEALTHY), "--tag", tag])
    procs.adopt(run.pid)
    config = run_config(tmp_path, tag)
    target = LocalTarget()
    plan = await plan_restart(target, config)
    # Pretend the planned process started at another time: the PID now names "another process".
    forged = dataclasses.replace(
        plan,
        processes=tuple(dataclasses.replace(p, start_ticks=p.start_ticks + 1) for p in plan.processes),
        signals=tuple(dataclasses.replace(s, ref=dataclasses.replace(s.ref, start_ticks=s.ref.start_ticks + 1)) for s in plan.signals),
    )
    events = [e async for e in execute_restart(target, config, forged, **FAST)]
    new = final(events, "launch").data.get("pid")
    if new:
        procs.adopt(new)
    assert any(e.status is StepStatus.WARNING and f"PID {run.pid} is now another process" in e.detail for e in events)
    assert run.poll() is None, "a PID whose start time changed was signalled"


async def test_dead_launch_fails_verification(procs, tmp_path):
    config = run_config(tmp_path, "nothing_runs", launch=f"{sys.executable} -c 'import sys; sys.exit(3)'")
    target = LocalTarget()
    plan = await plan_restart(target, config)
    assert plan.processes == ()
    events = await run_restart(target, config, plan)
    assert final(events, "stop").status is StepStatus.SKIPPED
    verify = final(events, "verify")
    assert verify.status is StepStatus.FAILED and "exited" in verify.detail
    assert AuditLog(config.audit_log).entries()[-1]["outcome"].startswith("failed: verify")


async def test_link_lost_during_launch_is_reported_and_never_retried(sshd, procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pidfile = tmp_path / "run.pid"
    config = dataclasses.replace(
        run_config(tmp_path, tag, pidfile=str(pidfile)), target=sshd.target_config()
    )
    target = make_target(config.target)
    events = []
    try:
        plan = await plan_restart(target, config)
        async for event in execute_restart(target, config, plan, **FAST, launch_timeout_s=1.5):
            events.append(event)
            if event.step == "launch" and event.status is StepStatus.RUNNING:
                sshd.pause()
            elif event.step == "launch":
                sshd.resume()
    finally:
        sshd.resume()
        await target.close()
        await asyncio.sleep(0.5)
        if pidfile.exists() and pidfile.read_text().strip().isdigit():
            procs.adopt(int(pidfile.read_text()))
    launch = final(events, "launch")
    assert launch.status is StepStatus.FAILED and "launch state unknown" in launch.detail
    check = final(events, "check")
    assert check.status in (StepStatus.WARNING, StepStatus.FAILED) and "launch" in check.detail
    assert not any(e.step == "launch" and e.status is StepStatus.RUNNING for e in events[events.index(launch):])
    runs = [pid for pid in _pids_with(tag) if pid != os.getpid()]
    for pid in runs:
        procs.adopt(pid)
    assert len(runs) <= 1, "the run was launched twice"
    assert not AuditLog(config.audit_log).entries()[-1]["outcome"].startswith("ok")


def _pids_with(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if tag.encode() in argv and Path(argv[0].decode()).name.startswith("python"):
                found.append(int(entry.name))
    return found


# -- GPU memory: the demo's stand-in nvidia-smi lists a PID's memory while that PID lives ----------


def gpu_config(config: Config, tmp_path: Path, holder_pid: int, held_mib: int = 20000, busy_pct: int = 0) -> Config:
    """`config` reading GPUs from the stand-in nvidia-smi, with `holder_pid` holding memory on GPUs 0 and 1
    (and keeping them `busy_pct` % busy)."""
    from console.demo.machine import write_state
    from console.demo.nvidia_smi import idle_gpu

    state = tmp_path / "gpus.json"
    now = time.time()
    gpus = [idle_gpu(index, held_mib if index < 2 else 0) for index in range(8)]
    for gpu in gpus[:2]:
        gpu["utilization_gpu_pct"] = busy_pct
    write_state(state, {"pid": holder_pid, "updated": now, "busy_until": now + 3600, "gpus": gpus})
    repo = Path(__file__).resolve().parent.parent
    smi = f"env PYTHONPATH={repo} {sys.executable} -m console.demo.nvidia_smi --state {state}"
    return dataclasses.replace(
        config, gpus=GpuConfig(source="nvidia-smi"), target=dataclasses.replace(config.target, nvidia_smi=smi)
    )


async def test_plan_shows_gpu_memory_and_launch_waits_for_its_release(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = procs.start([sys.executable, str(HEALTHY), "--tag", tag])
    procs.adopt(run.pid)
    config = gpu_config(run_config(tmp_path, tag), tmp_path, run.pid)
    target = LocalTarget()
    plan = await plan_restart(target, config)
    [planned] = plan.processes
    assert planned.pid == run.pid and planned.gpu_mib == 2 * (20000 - 9)  # less the driver's own 9 MiB a GPU
    assert plan.held_gpu_pids == (run.pid,)
    # Per GPU in GiB, as the GPU pane writes it, not the MiB of both GPUs summed (issue 33).
    assert any("GPU 0, 1: 19.5 GiB each" in line for line in plan.describe()), plan.describe()

    events = await run_restart(target, config, plan)
    procs.adopt(final(events, "launch").data["pid"])
    assert final(events, "gpu").status is StepStatus.OK, events
    assert final(events, "verify").status is StepStatus.OK, events


async def test_memory_still_held_refuses_the_launch_unless_forced(procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    # A context the stop cannot end (a host PID seen from a container, a process stuck in the driver):
    # a bystander the test owns, listed as holding memory, that the restart must not touch.
    holder = procs.start(["sleep", "300"])
    config = gpu_config(run_config(tmp_path, tag), tmp_path, holder.pid)
    target = LocalTarget()
    plan = dataclasses.replace(await plan_restart(target, config), held_gpu_pids=(holder.pid,))

    events = await run_restart(target, config, plan, gpu_timeout_s=0.3)
    gpu = final(events, "gpu")
    assert gpu.status is StepStatus.FAILED and f"PID {holder.pid}" in gpu.detail and "--force" in gpu.detail
    assert final(events, "launch").status is StepStatus.SKIPPED
    assert holder.poll() is None

    events = await run_restart(target, config, plan, gpu_timeout_s=0.3, force=True)
    procs.adopt(final(events, "launch").data["pid"])
    assert final(events, "gpu").status is StepStatus.WARNING
    assert final(events, "verify").status is StepStatus.OK
    assert holder.poll() is None


async def test_restart_inside_a_container_over_ssh(sshd, pid_namespace, procs, tmp_path):
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    pct = str(Path(__file__).resolve().parent / "bin" / "pct")
    outside = procs.start([pct, "exec", pid_namespace.id, "--", sys.executable, str(HEALTHY), "--tag", tag])
    old = wait_for(lambda: [p for p in _pids_with(tag)], "the run inside the container")[0]
    config = dataclasses.replace(
        run_config(tmp_path, tag), target=sshd.target_config(container=pid_namespace.container)
    )
    target = make_target(config.target)
    try:
        plan = await plan_restart(target, config)
        [planned] = plan.processes
        assert planned.pid != old and tag in planned.cmdline  # the container's own PID for it
        events = await run_restart(target, config, plan)
    finally:
        await target.close()
    assert final(events, "verify").status is StepStatus.OK, events
    outside.wait(timeout=5)
    [new] = wait_for(lambda: _pids_with(tag), "the new run")
    procs.adopt(new)
    nspid = [line for line in Path(f"/proc/{new}/status").read_text().splitlines() if line.startswith("NSpid:")][0]
    assert len(nspid.split()) == 3, "the new run was not launched inside the container"
    assert int(nspid.split()[2]) == final(events, "launch").data["pid"]
