"""Every input is bounded (issue 30): what a target sends is read within bounds, per line and in all.

A 100 MB nvidia-smi reply took 25 s and ~1 GB and ended in "the sampling agent sent 0 of 2
samples"; 50 processes with 1.2 MB command lines did the same, and lines over 4 MiB were dropped
without a word; a py-spy that floods took `pulse dump` to 3-4 GB, blamed "state D" and ended with
"Event loop is closed"; a flooding process agent took restart to 5 GB; a sampling agent that never
ends a line kept check and dump going past 120 s, and Ctrl+C gave 130 with no word; `--log
/dev/zero` read "HUNG, quiet 9d 23h" on a healthy run.

Each case here is real: stand-in programs (a `[target] python` whose sampling or process agent
misbehaves, an nvidia-smi, a py-spy) that flood or never end a line, a real FIFO and /dev/zero,
through the real CLI as PID 1 of its own namespace. Each asserts the one line it must end with,
its exit status, that it ends within its bound, and that memory stays bounded (the CLI's
ru_maxrss, its agents included).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.config import Config, RunConfig
from console.observe import agent
from console.observe.follow import MAX_FRAME_BYTES, FollowProtocolError, LogFollower, _Frames
from console.remote.connect import make_target
from console.remote.program import reap
from console.remote.target import LineReader, LocalTarget, OutputTooLong, TargetError
from tests.faults.helpers import rss_mib, until
from tests.safety.namespace import PULSE, REPO, SCENE_LIMIT_S, Scene, alive, in_namespace, pids_with

#: The sampling agent's hello, as the stand-ins say it before they misbehave.
HELLO = json.dumps(agent.hello(agent.PROGRAM, agent.PROTOCOL))
#: `pulse` with the sampler's waits shortened (only the waits: first line 3 s, a line 1 s), so that a
#: line that never ends is given up in seconds, not in the 90 s a slow login shell may take.
SHORT_WAITS = [
    sys.executable, "-c",
    "import sys\nfrom console.observe import sampler\nsampler.FIRST_SAMPLE_S = 3.0\nsampler.STALE_MIN_S = 1.0\n"
    "from console.cli import main\nsys.exit(main(sys.argv[1:]))",
]
#: An upper bound only: each case ends in a second or two; the floods it replaces ran for minutes.
ENDS_WITHIN_S = 20.0
#: `pulse` and its agents stay near 40 MiB; the floods took gigabytes.
MEMORY_BOUND_MIB = 200
#: What the stand-ins' floods print: a process still printing it after Pulse ended was left behind.
FLOOD_MARK = "pulse-hostile-flood"


def stand_in(folder: Path, name: str, body: str) -> Path:
    """An executable bash script `folder/name` running `body`."""
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def hostile_python(folder: Path, program: str, behaviour: str) -> Path:
    """A `[target] python` whose `program` (pulse-agent, pulse-process) runs the bash `behaviour`
    (the sampling agent says its hello first); the other agents run for real. It touches
    `<itself>.started` when the hostile one starts."""
    hello = f"printf '%s\\n' {shlex.quote(HELLO)}; " if program == agent.PROGRAM else ""
    return stand_in(
        folder, f"python-{program}",
        f'if [[ "$5" == {program} ]]; then touch "$0.started"; {hello}{behaviour}; exit 0; fi\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n',
    )


#: Sampling agents that never end a line, or send nothing but lines that are not samples.
NO_LINE_END = f"yes {FLOOD_MARK} | tr -d '\\n'"
TRICKLE = "while :; do printf x; sleep 0.1; done"
JUNK = "yes not-a-sample"


def write_config(folder: Path, target: dict[str, str], *, gpus: str = "auto", window_s: float = 0.2) -> Path:
    """A run config with these [target] keys (strings), the GPU source, and a short sampling window."""
    keys = "".join(f"{key} = {json.dumps(value)}\n" for key, value in target.items())
    path = folder / "run.toml"
    path.write_text(f'[target]\n{keys}[gpus]\nsource = "{gpus}"\n[stall]\nsample_window_s = {window_s}\n')
    return path


def flood_processes() -> list[int]:
    """Processes still printing a stand-in's flood."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and FLOOD_MARK.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def scene_cli(
    folder: str, argv: list[str], *, short_waits: bool = False, interrupt_when: str | None = None,
    run: list[str] | None = None,
) -> dict:
    """A run (its log the scene's old_log; `run` replaces the program, `{tag}` in it filled), then
    `pulse ARGV` to its end (`{log}` and `{tag}` in ARGV filled, `{flags}` the restart's flags),
    SIGINT to it once the file `interrupt_when` exists. Its exit status, stderr, stdout, how long
    it took, its ru_maxrss (its agents' included), and what is left running."""
    scene = Scene(folder)
    if run is None:
        process = scene.start_run()
    else:
        with open(scene.old_log, "ab") as log:
            process = scene.start([word.replace("{tag}", scene.tag) for word in run], stdout=log)
    argv = [filled for word in argv
            for filled in (scene.flags() if word == "{flags}" else [word.replace("{log}", str(scene.old_log)).replace("{tag}", scene.tag)])]
    started = time.monotonic()
    pulse = scene.start(
        [*(SHORT_WAITS if short_waits else PULSE), *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=False, env={**os.environ, "HOME": folder, "PYTHONPATH": str(REPO)},
    )
    if interrupt_when is not None:
        deadline = time.monotonic() + SCENE_LIMIT_S / 2
        while not os.path.exists(interrupt_when) and time.monotonic() < deadline and pulse.poll() is None:
            time.sleep(0.02)
        pulse.send_signal(signal.SIGINT)
    out, err = pulse.communicate(timeout=SCENE_LIMIT_S - 10)
    elapsed = time.monotonic() - started
    time.sleep(0.2)  # what Pulse stopped as it ended has a moment to go
    return {
        "rc": pulse.returncode, "out": out, "err": err, "elapsed_s": elapsed, "pid": process.pid,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "run_alive": alive(process.pid), "runs": pids_with(scene.tag), "flooding": flood_processes(),
        "new_logs": scene.new_logs(),
    }


def assert_bounded(seen: dict) -> None:
    assert seen["elapsed_s"] < ENDS_WITHIN_S, seen
    assert seen["max_rss_mib"] < MEMORY_BOUND_MIB, seen
    assert seen["flooding"] == [], "a flooding stand-in outlived Pulse"
    assert "Traceback" not in seen["err"] and "Event loop is closed" not in seen["err"], seen["err"]


# -- the sampling agent: a line that never ends, or no sample at all ---------------------------------


SAMPLING_FAULTS = {
    "floods without a line end": (NO_LINE_END, r"local: the sampling agent sent a line of more than 4 MiB"),
    "trickles without a line end": (TRICKLE, r"local: the sampling agent sent \d+ bytes without a line end in 1 s"),
    "sends lines that are not samples": (
        JUNK, r"local: the sampling agent sent 100 lines in a row that are not samples \(the last: not JSON: 'not-a-sample'\)"
    ),
}
COMMANDS = {"check": ("pulse check: ", 2), "dump": ("dump: ", 1)}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("fault", list(SAMPLING_FAULTS))
def test_a_sampling_agent_that_sends_no_sample_ends_check_and_dump_in_one_line(tmp_path: Path, fault: str, command: str) -> None:
    behaviour, said = SAMPLING_FAULTS[fault]
    config = write_config(tmp_path, {"python": str(hostile_python(tmp_path, agent.PROGRAM, behaviour))})
    seen = in_namespace(scene_cli, folder=str(tmp_path), short_waits=True,
                        argv=[command, str(config), "--match", "{tag}", "--log", "{log}"])
    prefix, status = COMMANDS[command]
    assert seen["rc"] == status, seen
    assert re.fullmatch(re.escape(prefix) + said + "\n", seen["err"]), seen["err"]
    assert seen["run_alive"]
    assert_bounded(seen)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_ctrl_c_while_the_agent_trickles_is_one_line_and_130(tmp_path: Path, command: str) -> None:
    """Waits as shipped: the trickle alone would hold the command for the 20 s a line may take."""
    python = hostile_python(tmp_path, agent.PROGRAM, TRICKLE)
    config = write_config(tmp_path, {"python": str(python)})
    seen = in_namespace(scene_cli, folder=str(tmp_path), interrupt_when=f"{python}.started",
                        argv=[command, str(config), "--match", "{tag}", "--log", "{log}"])
    assert seen["rc"] == 130, seen
    assert seen["err"] == f"pulse {command}: interrupted\n"
    assert seen["run_alive"]
    assert_bounded(seen)


# -- nvidia-smi and command lines: the agent caps what it reads ---------------------------------------


def test_a_100_mb_nvidia_smi_reply_is_one_gpu_error_and_the_check_goes_on(tmp_path: Path) -> None:
    smi = stand_in(tmp_path, "nvidia-smi", "head -c 100000000 /dev/zero | tr '\\0' 0\n")
    config = write_config(tmp_path, {"nvidia_smi": str(smi)}, gpus="nvidia-smi")
    seen = in_namespace(scene_cli, folder=str(tmp_path), argv=["check", str(config), "--match", "{tag}", "--log", "{log}"])
    assert seen["rc"] in (0, 1) and seen["err"] == "", seen
    assert f"nvidia-smi sent more than {agent.SMI_MAX_BYTES >> 10} KiB: not a query's answer (stopped it)" in seen["out"]
    assert f"pid {seen['pid']}" in seen["out"], "the run's process is judged as usual"
    assert_bounded(seen)


#: A run that takes a 1.2 MB command line (ten 120 kB arguments: one may be 128 KiB at most), then forks
#: 49 copies of itself: 50 processes, each with that command line.
FORKING_RUN = """
import os, sys, time
if len(sys.argv) < 10:
    os.execv(sys.executable, [sys.executable, *sys.argv, *["x" * 120_000] * 10])
for _ in range(49):
    if os.fork() == 0:
        time.sleep(300)
        os._exit(0)
step = 0
while True:
    step += 1
    print(f"step {step} | loss 2.31 | 14.2K tok/s", flush=True)
    time.sleep(0.05)
"""


def test_fifty_processes_with_megabyte_command_lines_are_all_seen_cut_with_a_mark(tmp_path: Path) -> None:
    program = tmp_path / "forking_run.py"
    program.write_text(FORKING_RUN)
    run = [sys.executable, str(program), "--tag", "{tag}"]
    seen = in_namespace(scene_cli, folder=str(tmp_path), run=run,
                        argv=["check", "--match", "{tag}", "--log", "{log}", "--json"])
    report = json.loads(seen["out"])
    assert len(report["processes"]) == 50 and report["process_error"] is None, seen["err"]
    for process in report["processes"]:
        assert process["cmdline"].endswith(agent.CMDLINE_CUT) and len(process["cmdline"]) <= 1000
    assert report["verdict"] == "healthy" and seen["rc"] == 0, report["evidence"]
    assert_bounded(seen)


# -- py-spy and the process agent ---------------------------------------------------------------------


def test_a_py_spy_that_floods_is_refused_in_one_line_and_stopped(tmp_path: Path) -> None:
    py_spy = stand_in(tmp_path, "py-spy", f"exec yes '{FLOOD_MARK}'\n")
    seen = in_namespace(scene_cli, folder=str(tmp_path), argv=["dump", "--match", "{tag}", "--py-spy", str(py_spy)])
    assert seen["rc"] == 1, seen
    assert seen["err"] == f"dump: py-spy on pid {seen['pid']} sent more than 16 MiB: not a dump (stopped it)\n"
    assert "state D" not in seen["err"]
    assert_bounded(seen)


#: A process agent that prints nothing but text: the restart's probe reads it to its cap, the dump's start
#: skips it as a login banner up to its cap.
PROCESS_AGENT_FLOODS = {
    "restart": ("restart: cannot read the run's processes: local: the process agent sent more than 16 MiB\n", 2),
    "dump": ("dump: local: the process agent sent no hello in its first 64 KiB\n", 1),
}


@pytest.mark.parametrize("command", list(PROCESS_AGENT_FLOODS))
def test_a_flooding_process_agent_ends_the_action_before_anything_is_signalled(tmp_path: Path, command: str) -> None:
    python = hostile_python(tmp_path, "pulse-process", f"exec yes {FLOOD_MARK}")
    config = write_config(tmp_path, {"python": str(python)})
    argv = [command, str(config), "{flags}", "--yes"] if command == "restart" else [command, str(config), "--match", "{tag}"]
    seen = in_namespace(scene_cli, folder=str(tmp_path), argv=argv)
    said, status = PROCESS_AGENT_FLOODS[command]
    assert (seen["rc"], seen["err"]) == (status, said), seen
    assert seen["run_alive"] and len(seen["runs"]) == 1 and seen["new_logs"] == []
    assert_bounded(seen)


# -- a log that is a device or a FIFO -----------------------------------------------------------------


@pytest.mark.parametrize(("log", "kind"), [("/dev/zero", "character device"), ("fifo", "FIFO")])
def test_a_device_or_a_fifo_as_the_log_is_named_in_the_verdict(tmp_path: Path, log: str, kind: str) -> None:
    if log == "fifo":
        log = str(tmp_path / "train.log")
        os.mkfifo(log)
    seen = in_namespace(scene_cli, folder=str(tmp_path), argv=["check", "--match", "{tag}", "--log", log, "--json"])
    report = json.loads(seen["out"])
    # The run is healthy (it writes its own log): not hung for a device's silence, and healthy only on
    # the evidence of its stacks, which the log cannot give.
    assert report["verdict"] == "healthy", report
    assert report["summary"].startswith(f"its log {log} is a {kind}, not a file, but the run works: ")
    assert f"log {log} is a {kind}, not a file: its size and age say nothing of the run" in report["evidence"]
    assert seen["rc"] == 0
    assert_bounded(seen)


@pytest.mark.parametrize("kind", ["character device", "FIFO"])
async def test_the_follower_never_reads_a_device_or_a_fifo_and_takes_the_file_put_there(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "train.log"
    if kind == "FIFO":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero")
    lines, events = [], []
    follower = LogFollower(LocalTarget(), Config(run=RunConfig(log=str(log))), lines.extend, on_event=events.append)
    following = asyncio.ensure_future(follower.run())
    try:
        await until(lambda: any(e.data["ev"] == "not_file" for e in events), "the follower to name what the log is")
        assert follower.status.kind == kind and follower.status.exists
        said = next(e.text for e in events if e.data["ev"] == "not_file")
        assert said == f"{log} is a {kind}, not a log file: not read; waiting for a file there (check --log)"
        await asyncio.sleep(0.3)  # a follower reading /dev/zero would have sent megabytes by now
        assert lines == [] and follower.pending_bytes == 0
        log.unlink()
        log.write_text("step 1\nstep 2\n")
        await until(lambda: len(lines) == 2, "the lines of the file put in its place")
        assert [line.text for line in lines] == ["step 1", "step 2"]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


def test_a_frame_longer_than_the_follower_ever_sends_is_refused() -> None:
    frames = _Frames()
    frames.feed(json.dumps(agent.hello("pulse-follow", 1)).encode() + b"\n")
    header = {"ev": "data", "path": "/l", "inode": 1, "offset": 0, "len": MAX_FRAME_BYTES + 1, "age": 0}
    with pytest.raises(FollowProtocolError, match="announced a frame of"):
        frames.feed(json.dumps(header).encode() + b"\n")


# -- the one mechanism, on a real channel (this machine and over SSH) --------------------------------


@pytest.fixture(params=["local", "ssh"])
async def target(request):
    made = LocalTarget() if request.param == "local" else make_target(request.getfixturevalue("sshd").target_config())
    try:
        yield made
    finally:
        await made.close()


async def test_a_command_that_floods_is_refused_at_its_cap_and_stopped(target) -> None:
    before = rss_mib()
    with pytest.raises(OutputTooLong) as caught:
        await target.run(f"exec yes {FLOOD_MARK}", 30, limit=1 << 20)
    assert str(caught.value) == f"{target.label}: the command sent more than 1 MiB"
    assert rss_mib() - before < 50
    await until(lambda: not flood_processes(), "the flooding command to be gone", timeout=10)


async def test_a_streamed_line_past_its_bound_is_refused_not_dropped(target) -> None:
    lines = target.stream(f"echo first; yes {FLOOD_MARK} | tr -d '\\n'")
    assert await anext(lines) == "first"
    with pytest.raises(OutputTooLong, match=r": the command sent a line of more than 1 MiB$"):
        await anext(lines)
    await lines.aclose()
    await until(lambda: not flood_processes(), "the flooding command to be gone", timeout=10)


async def test_a_line_that_never_ends_or_never_starts_times_out_with_one_line(target) -> None:
    # The trickle's first bytes must have come within the timeout: over ssh the command's start alone
    # can take half a second on a loaded machine, so it gets 3 s; a silent command 0.5 s.
    for script, timeout, said in ((TRICKLE, 3.0, r"sent \d+ bytes without a line end in 3 s"),
                                  ("sleep 30", 0.5, r"sent no line for 0.5 s")):
        channel = await target.open(script)
        try:
            with pytest.raises(TargetError) as caught:
                await LineReader(channel, f"{target.label}: the command", 1 << 20).line(timeout=timeout)
            assert re.fullmatch(rf"{re.escape(target.label)}: the command {said}", str(caught.value))
        finally:
            channel.close()
            await reap(channel)


# -- the agent's own bounds -------------------------------------------------------------------------


def test_the_agent_reads_at_most_smi_max_bytes_of_nvidia_smi_and_stops_it(tmp_path: Path) -> None:
    smi = stand_in(tmp_path, "nvidia-smi", f"exec yes {FLOOD_MARK}\n")
    gpus = agent.SmiGpus(str(smi), "index", "pid")
    before, started = rss_mib(), time.monotonic()
    assert gpus.run("--query-gpu=index") == (None, "nvidia-smi sent more than 128 KiB: not a query's answer (stopped it)")
    assert time.monotonic() - started < agent.SMI_TIMEOUT_S and rss_mib() - before < 20
    assert flood_processes() == []


def test_a_line_the_agent_writes_never_passes_the_readers_bound() -> None:
    processes = [{"pid": pid, "cmdline": "x" * 900} for pid in range(100)]
    line = json.loads(agent.json_line({"t": 1.0, "processes": processes, "process_error": None}, limit=20_000))
    kept = len(line["processes"])
    assert 0 < kept < 100 and line["processes"] == processes[:kept]
    assert line["process_error"] == f"{kept} of the run's 100 processes sent: all would make a line over 20000 bytes"
    assert len(agent.json_line({"t": 1.0, "processes": processes, "process_error": None}, limit=20_000)) <= 20_000
