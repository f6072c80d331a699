"""The bench's phases as seen from the parent: set up what each needs, run it, collect figures.

Phases that run the console do so in a child process (`benchlib.apps`); the parent owns
every server, writer and run they use and stops them by PID.
"""

from __future__ import annotations

import compileall
import fcntl
import functools
import json
import os
import pty
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from benchlib import poll, writer
from benchlib.apps import PING_EVERY_S, SIZE
from benchlib.stats import summary
from benchlib.world import REPO_ROOT, STOPPING_RUN, TWO_RANK_HANG, World, config_to_spec, stop_process, wait_for
from console.config import Config, RunConfig
from console.stall import QUIET_FLOOR_S

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
        out = child(world, "flood", spec)
        rate, seconds = str(TERMINAL_FLOOD_RATE), "3" if quick else "10"
        out["terminal"] = keys_in_terminal(world, config, [*WRITER, "flood", str(log), rate, seconds])
        return out
    finally:
        log.unlink(missing_ok=True)


#: The flood rate the goal names: keys are timed through a terminal at this rate.
TERMINAL_FLOOD_RATE = 50_000
#: A key whose effect is not drawn within this long counts as missed (at this latency).
KEY_MISS_S = 2.0


def keys_in_terminal(world: World, config, writer_argv: list[str]) -> dict:
    """Key latency as the operator feels it: the console in a pseudo-terminal with Textual's own
    driver, `f` typed every ~50 ms during a flood, each timed from the write to the terminal to
    the first output that draws its effect (the log title's "paused" / "following")."""
    spec_path, result_path = world.dir / "terminal-spec.json", world.dir / "terminal-result.json"
    spec_path.write_text(json.dumps({"config": config_to_spec(config)}))
    env = {**os.environ, "TEXTUAL_ANIMATIONS": "none", "HOME": str(world.dir / "home-clean")}
    terminal = Terminal([sys.executable, str(BENCH_SCRIPT), "--child", "terminal", str(spec_path), str(result_path)], env, spawn=world.spawn)
    latencies, missed = [], 0
    try:
        if terminal.until(b"following", terminal.started + 60) is None or terminal.until(SAMPLE_MARK, terminal.started + 60) is None:
            raise RuntimeError(f"the console drew no log title or GPUs in its terminal: {bytes(terminal.seen[-300:])!r}")
        flood = world.spawn(writer_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        paused = False
        while flood.poll() is None:
            offset = len(terminal.seen)
            pressed = time.perf_counter()
            terminal.press(b"f")
            drawn = terminal.until(b"following" if paused else b"paused", pressed + KEY_MISS_S, offset)
            missed += drawn is None
            latencies.append(((drawn or time.perf_counter()) - pressed) * 1000)
            paused = not paused
            until = time.perf_counter() + PING_EVERY_S
            while time.perf_counter() < until and terminal.read(max(0.0, until - time.perf_counter())):
                pass
        written = int(flood.stdout.read().decode().strip() or 0)
    finally:
        terminal.close()
    return {"rate": TERMINAL_FLOOD_RATE, "written": written, "key_ms": summary(latencies), "missed": missed}


# -- 4. idle ---------------------------------------------------------------------------------


def run_idle(world: World, quick: bool) -> dict:
    spec = {
        "config": config_to_spec(world.run_config("clean")),
        "sshd_pid": world.servers["clean"].pid,
        "seconds": 10 if quick else 60,
        "warmup_s": 2,
    }
    out = {"nvidia_smi": child(world, "idle", spec)}
    out["terminal"] = console_idle_in_terminal(world, world.run_config("clean"), spec["seconds"])
    # An anchor not installed here is reported as such, not left out.
    out["anchors"] = {
        name: anchor_idle(world, argv, spec["seconds"]) if shutil.which(argv[0]) else None
        for name, argv in idle_anchors(world).items()
    }
    if not quick:
        no_gpu = {**spec, "config": config_to_spec(world.run_config("clean", gpu_source="none"))}
        out["no_gpu_reads"] = child(world, "idle", no_gpu)
        # Where the console's share goes: the sources alone, and the app over a state that stopped changing.
        out["monitor_only"] = child(world, "idle", {**spec, "variant": "monitor_only", "seconds": 20})
        out["app_only"] = child(world, "idle", {**spec, "variant": "app_only", "seconds": 20})
    return out


def idle_anchors(world: World) -> dict[str, list[str]]:
    """Terminal monitors to measure beside the console, each refreshing once a second (nvitop needs NVML: not here)."""
    home = world.dir / "home-anchors"
    (home / ".config" / "btop").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "btop" / "btop.conf").write_text("update_ms = 1000\n")
    return {"top": ["top", "-d", "1"], "btop": ["btop"]}


def console_idle_in_terminal(world: World, config, seconds: float) -> float:
    """The console's CPU (% of one core) as the anchors are measured: the real console with
    its own terminal driver drawing into a pseudo-terminal of SIZE, its whole process."""
    spec_path, result_path = world.dir / "idle-terminal-spec.json", world.dir / "idle-terminal-result.json"
    spec_path.write_text(json.dumps({"config": config_to_spec(config)}))
    env = {**os.environ, "TEXTUAL_ANIMATIONS": "none", "HOME": str(world.dir / "home-clean")}
    argv = [sys.executable, str(BENCH_SCRIPT), "--child", "terminal", str(spec_path), str(result_path)]
    return terminal_idle(Terminal(argv, env, spawn=world.spawn), seconds, ready=SAMPLE_MARK)


def anchor_idle(world: World, argv: list[str], seconds: float) -> float:
    """CPU (% of one core) of a terminal monitor drawing in a pseudo-terminal of SIZE."""
    env = {**os.environ, "HOME": str(world.dir / "home-anchors")}
    return terminal_idle(Terminal(argv, env, spawn=world.spawn), seconds)


def terminal_idle(terminal: Terminal, seconds: float, ready: bytes | None = None) -> float:
    """CPU (% of one core) of the process on `terminal` over `seconds`, 2 s after it drew `ready`
    (after it started when None); what it draws is read and dropped as a terminal would."""
    from benchlib import procs

    try:
        if ready is not None and terminal.until(ready, terminal.started + 60) is None:
            raise RuntimeError(f"nothing drawn in the terminal: {bytes(terminal.seen[-300:])!r}")
        warm_until = time.perf_counter() + 2
        while time.perf_counter() < warm_until and terminal.read(0.1):
            pass
        before, started = procs.cpu_s(terminal.process.pid), time.perf_counter()
        while time.perf_counter() - started < seconds and terminal.read(0.1):
            terminal.seen.clear()
        return round((procs.cpu_s(terminal.process.pid) - before) / (time.perf_counter() - started) * 100, 3)
    finally:
        terminal.close()


# -- 4b. logs as frameworks write them ------------------------------------------------------

#: Shape → redraws or lines a second: what the console watches in the `logs` phase (writer.py's modes).
LOG_SHAPES = {"hf": 10.0, "lightning": 10.0, "nccl": 1.0, "stamped": 1.0}
#: The console's process tree by part (a local target: the agents are its children).
TREE_PARTS = {"sampling agent": "pulse-agent", "log follower": "pulse-follow", "process agent": "pulse-process"}


def run_logs(world: World, quick: bool) -> dict:
    """The console on this machine watching each log shape for a fixed window, its whole process tree
    (the console, its sampling agent and log follower, any helper) against `tail -F` of the same log
    in the same terminal size, side by side in one run."""
    seconds = 10 if quick else 30
    out = {}
    for shape, rate in LOG_SHAPES.items():
        log = world.dir / f"shape-{shape}.log"
        writer = world.spawn([*WRITER, shape, str(log), f"{rate:g}", str(seconds + 40)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not wait_for(lambda: log.exists() and log.stat().st_size > 0, 30):
                raise RuntimeError(f"the {shape} writer wrote nothing in 30 s")
            config = Config(run=RunConfig(name=f"bench-{shape}", log=str(log), match=rf"writer\.py {shape} "),
                            audit_log=str(world.dir / "audit.jsonl"), source="scripts/bench")
            console = console_tree_in_terminal(world, config, seconds)
            tail = tree_idle(Terminal(["tail", "-F", str(log)], dict(os.environ), spawn=world.spawn), seconds)
        finally:
            stop_process(writer)
        out[shape] = {"rate_per_s": rate, "console": console, "tail_F": tail,
                      "ratio": round(console["total"] / tail["total"], 1) if tail["total"] else None}
    return out


def console_tree_in_terminal(world: World, config: Config, seconds: float) -> dict:
    """The console's whole process tree's CPU (% of one core, by part) drawing into a pseudo-terminal."""
    spec_path, result_path = world.dir / "logs-terminal-spec.json", world.dir / "logs-terminal-result.json"
    spec_path.write_text(json.dumps({"config": config_to_spec(config)}))
    env = {**os.environ, "TEXTUAL_ANIMATIONS": "none", "HOME": str(world.dir / "home-clean")}
    argv = [sys.executable, str(BENCH_SCRIPT), "--child", "terminal", str(spec_path), str(result_path)]
    return tree_idle(Terminal(argv, env, spawn=world.spawn), seconds, ready=b"1 alive")


#: Output this far apart is a new frame: a frame's writes come within a few milliseconds.
FRAME_GAP_S = 0.05


def tree_idle(terminal: Terminal, seconds: float, ready: bytes | None = None, warm_s: float = 2.0) -> dict:
    """CPU (% of one core) of the process tree on `terminal` over `seconds`, by TREE_PARTS, `warm_s`
    after it drew `ready` (after it started when None), and the frames it drew a second (bursts of
    output FRAME_GAP_S apart); what it draws is read and dropped."""
    from benchlib import procs

    try:
        if ready is not None and terminal.until(ready, terminal.started + 60) is None:
            raise RuntimeError(f"nothing drawn in the terminal: {bytes(terminal.seen[-300:])!r}")
        warm_until = time.perf_counter() + warm_s
        while time.perf_counter() < warm_until and terminal.read(0.1):
            pass
        terminal.seen.clear()
        before, started = procs.tree_cpu(terminal.process.pid, TREE_PARTS), time.perf_counter()
        frames, last_output = 0, 0.0
        while time.perf_counter() - started < seconds and terminal.read(0.1):
            if terminal.seen:
                now = time.perf_counter()
                frames += now - last_output > FRAME_GAP_S
                last_output = now
                terminal.seen.clear()
        spent = procs.cpu_delta(before, procs.tree_cpu(terminal.process.pid, TREE_PARTS))
        elapsed = time.perf_counter() - started
        return {**{part: round(cpu / elapsed * 100, 3) for part, cpu in spent.items()},
                "frames_per_s": round(frames / elapsed, 2)}
    finally:
        terminal.close()


# -- 5. memory -------------------------------------------------------------------------------


def run_memory(world: World, quick: bool, watch_s: float) -> dict:
    """The real console over SSH for a fixed wall-clock time: 200k (1M) lines at 50,000 a second
    through the follower, then `watch_s` watching the demo run at 1 Hz."""
    lines = 200_000 if quick else 1_000_000
    log = world.dir / "memory.log"
    log.touch()
    # The demo trainer's own log and GPUs alongside: the flood is this log, the samples the demo's.
    config = world.log_config("clean", log, world.demo_config.run.match)
    rate = 50_000
    spec = {
        "config": config_to_spec(config),
        "writer": [*WRITER, "flood", str(log), str(rate), str(lines / rate)],
        "seconds": watch_s,
    }
    try:
        return child(world, "memory", spec, CHILD_TIMEOUT_S + spec["seconds"])
    finally:
        log.unlink(missing_ok=True)


# -- 6. start --------------------------------------------------------------------------------


#: Textual's first output: the switch to the alternate screen.
FIRST_OUTPUT_MARK = b"\x1b[?1049h"
#: The GPU pane's text once the first sample is drawn (its first full frame: every pane has data).
SAMPLE_MARK = b"H200"
#: A step line of the simulated trainer drawn in the log pane (the trainer's first comes ~1.7 s after it starts).
LOG_MARK = b"tok/s"


class Terminal:
    """A process on a pseudo-terminal of SIZE, as a terminal emulator would run it: what it
    draws is read as it comes (time-stamped), what is typed goes to it as keys."""

    def __init__(self, argv: list[str], env: dict, *, spawn=functools.partial(subprocess.Popen, start_new_session=True),
                 size: tuple[int, int] = SIZE) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(size[0]), "LINES": str(size[1])}
        self.started = time.perf_counter()
        self.process = spawn(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO_ROOT)
        os.close(slave)
        self.seen = bytearray()

    def read(self, timeout_s: float) -> bool:
        """Read what is there (waiting up to `timeout_s`); False once the terminal closed."""
        if not select.select([self.master], [], [], timeout_s)[0]:
            return True
        try:
            self.seen += os.read(self.master, 1 << 20)
        except OSError:
            return False
        return True

    def until(self, mark: bytes, deadline: float, start: int = 0) -> float | None:
        """perf_counter when `mark` was first read after offset `start`, or None by `deadline`."""
        while self.seen.find(mark, start) < 0:
            if time.perf_counter() > deadline or not self.read(0.05):
                return None
        return time.perf_counter()

    def press(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        """`q`, then stop it by PID if it did not quit."""
        try:
            self.press(b"q")
            deadline = time.monotonic() + 15
            while self.process.poll() is None and time.monotonic() < deadline:
                self.read(0.1)
        finally:
            stop_process(self.process)
            os.close(self.master)


def one_start(home: Path, timeout_s: float = 30.0) -> dict:
    """`pulse demo` in a pseudo-terminal: time to its first output, its first full frame (the first
    sample drawn) and the first log line drawn.

    HOME is a clean throwaway one: the demo's server runs its commands with `bash -lc`, and this
    box's own dotfiles (pyenv init, whose rehash lock other users' shells contend for) would
    measure them rather than Pulse; the poll phase measures what a slow `.bashrc` costs.
    """
    terminal = Terminal([str(Path(sys.executable).with_name("pulse")), "demo"], {**os.environ, "HOME": str(home)})
    marks = {"first_output_ms": FIRST_OUTPUT_MARK, "full_frame_ms": SAMPLE_MARK, "first_log_line_ms": LOG_MARK}
    found: dict[str, float] = {}
    try:
        deadline = terminal.started + timeout_s
        while len(found) < len(marks) and time.perf_counter() < deadline and terminal.read(0.5):
            now = time.perf_counter()
            for name, mark in marks.items():
                if name not in found and mark in terminal.seen:
                    found[name] = (now - terminal.started) * 1000
    finally:
        terminal.close()
    if "full_frame_ms" not in found:
        raise RuntimeError(f"pulse demo drew no GPUs within {timeout_s:g} s: {bytes(terminal.seen[-300:])!r}")
    return found


def run_start(world: World, quick: bool) -> dict:
    # Started as installed: pip compiles a wheel's modules as it installs them. A checkout gets its
    # bytecode when Python first imports it, unless PYTHONDONTWRITEBYTECODE is set (as on this
    # bench's machine), and then every start compiled the console's modules again (~70 ms).
    compileall.compile_dir(REPO_ROOT / "console", quiet=1)
    runs = [one_start(world.dir / "home-clean") for _ in range(1 if quick else 5)]
    return {name: summary([r[name] for r in runs if name in r]) for name in ("first_output_ms", "full_frame_ms", "first_log_line_ms")}


# -- 7. diagnosis ----------------------------------------------------------------------------


def run_diagnosis(world: World, quick: bool) -> dict:
    """Key d in the console over the test sshd, then a plain `pulse check` on this machine, on a
    two-rank hang quiet past the floor: the default path (no [stall] log_silent_s), so every rank is
    dumped and recorded."""
    log = world.dir / "hung.log"
    tag = f"pulse-bench-hung-{os.getpid()}"
    launcher, rank = TWO_RANK_HANG
    argv = [sys.executable, str(launcher), "--nproc_per_node", "2", str(rank), "--tag", tag]
    with log.open("wb") as out:
        hung = world.spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        # No GPUs: the stand-in's GPUs are the demo trainer's, busy with no PID of this run.
        config = world.log_config("clean", log, rf"--tag {tag}\b", stall_s=None, gpu_source="none")
        spec = {"config": config_to_spec(config), "silent_s": QUIET_FLOOR_S + 0.5, "repeats": 1 if quick else 5}
        out = child(world, "diagnosis", spec)
        out["check"] = time_check(world, log, rf"--tag {tag}\b", 1 if quick else 5)
        return out
    finally:
        stop_process(hung)


def time_check(world: World, log: Path, match: str, repeats: int) -> dict:
    """`pulse check CONFIG --json` as typed (no threshold flag), run `repeats` times: its wall time and verdicts."""
    config = world.dir / "check.toml"
    config.write_text(f'[target]\npy_spy = "{Path(sys.executable).with_name("py-spy")}"\n')
    argv = [sys.executable, "-m", "console.cli", "check", str(config), "--json", "--log", str(log), "--match", match]
    times, verdicts = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        times.append((time.perf_counter() - started) * 1000)
        verdicts.append(json.loads(done.stdout)["verdict"] if done.stdout.strip() else f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
    return {"wall_ms": summary(times), "verdicts": verdicts}


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


# -- 9. fleet --------------------------------------------------------------------------------

FLEET_NODES = 256


def run_fleet(world: World, quick: bool) -> dict:
    """scripts/bench_fleet.py with 256 simulated nodes (their servers and agents in a child of its
    own, not counted): the console's CPU as the fleet paces itself, and the time to a fleet verdict."""
    seconds = 10 if quick else 30
    argv = [sys.executable, str(REPO_ROOT / "scripts" / "bench_fleet.py"), "--nodes", str(FLEET_NODES), "--seconds", str(seconds), "--json"]
    process = world.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_process(process)
        raise RuntimeError(f"bench_fleet.py did not finish within {CHILD_TIMEOUT_S} s") from None
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise RuntimeError(f"bench_fleet.py failed (status {process.returncode}): " + " / ".join(tail)) from None
