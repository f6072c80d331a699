"""The bench's phases as seen from the parent: set up what each needs, run it, collect figures.

Phases that run the console do so in a child process (`benchlib.apps`); the parent owns
every server, writer and run they use and stops them by PID.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from benchlib import poll, writer
from benchlib.apps import SIZE
from benchlib.stats import summary
from benchlib.world import REPO_ROOT, STOPPING_RUN, TWO_RANK_HANG, World, config_to_spec, stop_process, wait_for
from console.config import TargetConfig

BENCH_SCRIPT = REPO_ROOT / "scripts" / "bench.py"
WRITER = [sys.executable, str(Path(writer.__file__))]
TAIL_RATE = 20
CHILD_TIMEOUT_S = 600
KEY_P99_GOAL_MS = 100.0


def child(world: World, phase: str, spec: dict, timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """Run one console phase in a fresh process and return its figures."""
    spec_path = world.dir / f"{phase}-spec.json"
    result_path = world.dir / f"{phase}-result.json"
    spec_path.write_text(json.dumps(spec))
    result_path.unlink(missing_ok=True)
    env = {**os.environ, "TEXTUAL_ANIMATIONS": "none"}
    process = world.spawn(
        [sys.executable, str(BENCH_SCRIPT), "--child", phase, str(spec_path), str(result_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        out, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_process(process)
        raise RuntimeError(f"the {phase} phase did not finish within {timeout_s:g} s") from None
    if process.returncode != 0 or not result_path.exists():
        tail = out.decode("utf-8", "replace").strip().splitlines()[-15:]
        raise RuntimeError(f"the {phase} phase failed (status {process.returncode}):\n" + "\n".join(tail))
    return json.loads(result_path.read_text())


def run_poll(world: World, quick: bool) -> dict:
    return poll.measure(world, quick=quick)


# -- 2. tail ---------------------------------------------------------------------------------


def ssh_tail(world: World, log: Path, seconds: float) -> dict:
    """`ssh host tail -F LOG`: write → receipt of each stamped line."""
    server = world.servers["clean"]
    log.touch()
    command = f"tail -n0 -F {shlex.quote(str(log))}"
    process = world.spawn(server.ssh_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    latencies: list[float] = []
    seen_ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            now = time.time()
            if raw.startswith(b"T="):
                latencies.append((now - float(raw[2:].split(b" ", 1)[0])) * 1000)
            elif raw.startswith(b"READY"):
                seen_ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for _ in range(100):  # until tail is following: it prints what is appended after it started
            with log.open("a") as out:
                out.write("READY\n")
            if seen_ready.wait(0.1):
                break
        else:
            raise RuntimeError("ssh tail -F printed nothing")
        done = subprocess.run([*WRITER, "stamped", str(log), str(TAIL_RATE), str(seconds)], capture_output=True, text=True)
        written = int(done.stdout.strip())
        wait_for(lambda: len(latencies) >= written, 5)
    finally:
        stop_process(process)
        _kill_remote(world, "clean", command)
    return {"written": written, "receipt_ms": summary(latencies)}


def _kill_remote(world: World, server: str, command: str) -> None:
    """OpenSSH does not signal a closed channel's command without privilege separation: end it by PID."""
    from benchlib import procs

    for pid in procs.tree(world.servers[server].pid):
        if procs.cmdline(pid).strip() == command:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_tail(world: World, quick: bool) -> dict:
    seconds = 1.5 if quick else 15
    manual = ssh_tail(world, world.dir / "tail-ssh.log", seconds)
    log = world.dir / "tail-pulse.log"
    log.touch()
    config = world.log_config("clean", log, world.demo_config.run.match)
    pulse = child(
        world,
        "tail",
        {"config": config_to_spec(config), "writer": [*WRITER, "stamped", str(log), str(TAIL_RATE), str(seconds)]},
    )
    return {"rate_lines_per_s": TAIL_RATE, "ssh_tail_f": manual, "pulse": pulse}


# -- 3. flood --------------------------------------------------------------------------------


def run_flood(world: World, quick: bool) -> dict:
    log = world.dir / "flood.log"
    log.touch()
    config = world.log_config("clean", log, world.demo_config.run.match)
    spec = {
        "config": config_to_spec(config),
        "writer": [*WRITER, "flood", str(log)],
        "rates": [50_000, 100_000] if quick else [10_000, 25_000, 50_000, 75_000, 100_000, 150_000, 200_000],
        "seconds": 1.5 if quick else 5,
        "grace_s": 1.0,
        "key_p99_ms": KEY_P99_GOAL_MS,
    }
    try:
        return child(world, "flood", spec)
    finally:
        log.unlink(missing_ok=True)


# -- 4. idle ---------------------------------------------------------------------------------


def run_idle(world: World, quick: bool) -> dict:
    spec = {
        "config": config_to_spec(world.run_config("clean")),
        "sshd_pid": world.servers["clean"].pid,
        "seconds": 10 if quick else 60,
        "warmup_s": 2,
    }
    out = {"nvidia_smi": child(world, "idle", spec)}
    if not quick:
        no_gpu = {**spec, "config": config_to_spec(world.run_config("clean", gpu_source="none"))}
        out["no_gpu_reads"] = child(world, "idle", no_gpu)
        # Where the console's share goes: the sources alone, and the app over a state that stopped changing.
        out["monitor_only"] = child(world, "idle", {**spec, "variant": "monitor_only", "seconds": 20})
        out["app_only"] = child(world, "idle", {**spec, "variant": "app_only", "seconds": 20})
    return out


# -- 5. memory -------------------------------------------------------------------------------


def run_memory(world: World, quick: bool) -> dict:
    lines = 200_000 if quick else 1_000_000
    log = world.dir / "memory.log"
    block = b"".join(writer.flood_lines())
    per_block = len(writer.flood_lines())
    with log.open("wb") as out:
        for _ in range(lines // per_block):
            out.write(block)
    demo = world.demo_config
    local = TargetConfig(python=demo.target.python, nvidia_smi=demo.target.nvidia_smi, py_spy=demo.target.py_spy)
    config = dataclasses.replace(demo, target=local, run=dataclasses.replace(demo.run, log=str(log)))
    try:
        spec = {"config": config_to_spec(config), "lines": lines, "hours": 2, "refresh_every_s": 120 if quick else 10}
        return child(world, "memory", spec)
    finally:
        log.unlink(missing_ok=True)


# -- 6. start --------------------------------------------------------------------------------


#: Textual's first output: the switch to the alternate screen.
FIRST_OUTPUT_MARK = b"\x1b[?1049h"
#: The GPU pane's text once the first sample is drawn (its first full frame: every pane has data).
SAMPLE_MARK = b"H200"
#: A step line of the simulated trainer drawn in the log pane (the trainer's first comes ~1.7 s after it starts).
LOG_MARK = b"tok/s"


def one_start(home: Path, timeout_s: float = 30.0) -> dict:
    """`pulse demo` in a pseudo-terminal: time to its first output, its first full frame (the first
    sample drawn) and the first log line drawn.

    HOME is a clean throwaway one: the demo's server runs its commands with `bash -lc`, and this
    box's own dotfiles (pyenv init, whose rehash lock other users' shells contend for) would
    measure them rather than Pulse; the poll phase measures what a slow `.bashrc` costs.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    env = {**os.environ, "HOME": str(home), "TERM": "xterm-256color", "COLUMNS": str(SIZE[0]), "LINES": str(SIZE[1])}
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("pulse")), "demo"],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, cwd=REPO_ROOT,
    )
    os.close(slave)
    seen = bytearray()
    marks = {"first_output_ms": FIRST_OUTPUT_MARK, "full_frame_ms": SAMPLE_MARK, "first_log_line_ms": LOG_MARK}
    found: dict[str, float] = {}
    try:
        deadline = started + timeout_s
        while len(found) < len(marks) and time.perf_counter() < deadline:
            readable, _, _ = select.select([master], [], [], 0.5)
            if not readable:
                continue
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
            now = time.perf_counter()
            for name, mark in marks.items():
                if name not in found and mark in seen:
                    found[name] = (now - started) * 1000
        os.write(master, b"q")
        quit_deadline = time.monotonic() + 15
        while process.poll() is None and time.monotonic() < quit_deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    pass
    finally:
        stop_process(process)
        os.close(master)
    if "full_frame_ms" not in found:
        raise RuntimeError(f"pulse demo drew no GPUs within {timeout_s:g} s: {bytes(seen[-300:])!r}")
    return found


def run_start(world: World, quick: bool) -> dict:
    runs = [one_start(world.dir / "home-clean") for _ in range(1 if quick else 5)]
    return {name: summary([r[name] for r in runs if name in r]) for name in ("first_output_ms", "full_frame_ms", "first_log_line_ms")}


# -- 7. diagnosis ----------------------------------------------------------------------------


def run_diagnosis(world: World, quick: bool) -> dict:
    log = world.dir / "hung.log"
    tag = f"pulse-bench-hung-{os.getpid()}"
    launcher, rank = TWO_RANK_HANG
    argv = [sys.executable, str(launcher), "--nproc_per_node", "2", str(rank), "--tag", tag]
    with log.open("wb") as out:
        hung = world.spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        # No GPUs: the stand-in's GPUs are the demo trainer's, busy with no PID of this run.
        config = world.log_config("clean", log, rf"--tag {tag}\b", stall_s=1.0, gpu_source="none")
        spec = {"config": config_to_spec(config), "silent_s": 1.2, "repeats": 1 if quick else 5}
        return child(world, "diagnosis", spec)
    finally:
        stop_process(hung)


# -- 8. silence ------------------------------------------------------------------------------


def run_silence(world: World, quick: bool) -> dict:
    log = world.dir / "stopping.log"
    tag = f"pulse-bench-stopping-{os.getpid()}"
    argv = [sys.executable, "-u", str(STOPPING_RUN), "--interval", "1", "--steps", "12", "--tag", tag]
    with log.open("wb") as out:
        run = world.spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        # No [stall] log_silent_s: the limit is learned from the run's rhythm, as by default.
        config = world.log_config("clean", log, rf"healthy\.py .*--tag {tag}\b", stall_s=None, gpu_source="none")
        return child(world, "silence", {"config": config_to_spec(config), "steps": 12})
    finally:
        stop_process(run)
