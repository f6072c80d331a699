"""The sampling agent: process selection, CPU deltas, GPU sources, hang-up, PID namespaces.

Real processes throughout: a real "training" process among real decoys whose command lines
name it, a real busy loop, a real stand-in nvidia-smi on PATH, a real PID namespace.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from console.config import Config
from console.observe import agent, procfs, sampler
from console.observe.protocol import check_hello
from console.remote.program import program_script
from tests.shipped import shipped

AGENT = shipped(agent)
FIXTURES = Path(__file__).parent / "fixtures" / "h200"
PYTHON38 = Path.home() / ".pyenv/versions/3.8.18/bin/python3"
#: The fields of the H200 captures (fixtures/h200/README.md).
SMI_GPU_FIELDS = (
    "index,uuid,name,memory.used,memory.total,utilization.gpu,utilization.memory,"
    "temperature.gpu,power.draw,power.limit,clocks.sm,fan.speed,pstate"
)
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory,process_name"
WAIT_S = 20.0


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT_S) -> object:
    """Poll `condition` until it returns something true; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        return procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text())["state"] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid: int) -> list[int]:
    return [r["pid"] for r in agent.scan_processes() if r["ppid"] == pid]


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start processes in their own process groups; every group is killed (by its PID) afterwards."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        process = subprocess.Popen(argv, start_new_session=True, **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def agent_args(
    match: str = "",
    *,
    interval: float = 0.2,
    count: int = 1,
    pidfile: str = "",
    log: str = "",
    gpu_source: str = "none",
    nvidia_smi: str = "nvidia-smi",
) -> list[str]:
    """The agent's arguments (its argv after the program): `--name=value`, as a regex may start with '-'."""
    return [
        f"--interval={interval}", f"--count={count}", f"--match={match}", f"--pidfile={pidfile}", f"--log={log}",
        f"--gpu-source={gpu_source}", f"--nvidia-smi={nvidia_smi}",
        f"--smi-gpu-fields={SMI_GPU_FIELDS}", f"--smi-app-fields={SMI_APP_FIELDS}",
    ]  # fmt: skip


def agent_argv(match: str = "", **options) -> list[str]:
    """argv that runs the agent, as shipped, under this interpreter."""
    return [sys.executable, "-u", str(AGENT), *agent_args(match, **options)]


def run_agent(argv: list[str], env: dict | None = None) -> list[dict]:
    """Run the agent to the end of its count with stdin held open (EOF would stop it); its JSON lines after the hello."""
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    try:
        out = process.stdout.read()
        process.stdin.close()
        err = process.stderr.read()
        process.wait()
    finally:
        watchdog.cancel()
    assert process.returncode == 0, err.decode()
    hello, *lines = out.decode().splitlines()
    check_hello(json.loads(hello), agent.PROGRAM, agent.PROTOCOL)
    return [json.loads(line) for line in lines]


# -- selection on synthetic /proc records ------------------------------------------------------


def record(pid: int, ppid: int, cmdline: str | list[str], comm: str | None = None) -> dict:
    argv = cmdline.split(" ") if isinstance(cmdline, str) else cmdline
    return {"pid": pid, "ppid": ppid, "comm": comm or os.path.basename(argv[0]), "argv": argv}


def test_select_run_processes_skips_launchers_tools_and_self() -> None:
    procs = [
        record(1, 0, "/sbin/init"),
        record(100, 1, "sshd: root@notty", comm="sshd"),
        record(101, 100, ["bash", "-lc", "cd /root && setsid nohup python3 -u train_dflash.py &"]),
        record(200, 1, "python3 -u train_dflash.py --gpus 0,1"),
        record(201, 200, "python3 -u train_dflash.py --gpus 0,1"),  # a forked DataLoader worker
        record(202, 200, "python3 -c from multiprocessing.spawn import spawn_main", comm="python3"),
        record(300, 100, "-bash", comm="bash"),
        record(301, 300, "grep train_dflash"),
        record(302, 300, "tail -f /workspace/train_dflash.log"),
        record(303, 300, "vim train_dflash.py"),
        record(304, 300, "pgrep -af train_dflash"),
        record(305, 300, "py-spy dump --pid 200 --name train_dflash"),
        record(306, 300, "timeout 60 cat train_dflash.py"),
        record(307, 300, "watch -n1 ps aux | grep train_dflash"),
        record(308, 300, ["sh", "-c", "tail -f train_dflash.log | grep loss"]),
        record(309, 300, ["ssh", "gpu-box", "pkill -f train_dflash"]),
        # Another console's agent: the pattern is one of its arguments.
        record(400, 100, "python3 -u -c import sys;n=int(sys.argv[1]);src=sys.stdin.buffer.read(n);x 9 pulse-agent train_dflash"),
        # This agent and the non-shell parent that launched it.
        record(500, 100, "python3 wrapper.py train_dflash"),
        record(501, 500, "python3 -u agent.py 1 0 train_dflash"),
    ]  # fmt: skip
    self_pids = agent.ancestry(procs, 501)
    assert self_pids == [501, 500, 100, 1]
    chosen = agent.select_run_processes(procs, r"train_dflash", self_pids)
    assert [r["pid"] for r in chosen] == [200, 201, 202]


def test_select_run_processes_takes_a_run_under_a_wrapper_and_dedupes_nested_matches() -> None:
    procs = [
        record(10, 1, "timeout 1d torchrun train.py"),
        record(11, 10, "/usr/bin/python3 /usr/local/bin/torchrun train.py", comm="torchrun"),
        record(12, 11, "/usr/bin/python3 -u train.py --local-rank=0", comm="python3"),
        record(13, 11, "/usr/bin/python3 -u train.py --local-rank=1", comm="python3"),
        record(14, 1, "exec-a-named vim train.py", comm="sleep"),
    ]
    procs[4]["argv"] = ["vim train.py", "60"]  # what `exec -a "vim train.py" sleep 60` leaves
    chosen = agent.select_run_processes(procs, r"train\.py", [])
    assert [r["pid"] for r in chosen] == [11, 12, 13]


def test_a_shell_running_a_script_file_can_be_the_run() -> None:
    procs = [
        record(20, 1, ["bash", "-lc", "nohup bash /root/run_train_x.sh > /root/x.log 2>&1 &"]),
        record(21, 1, ["bash", "/root/run_train_x.sh", "--lr", "3e-4"]),
        record(22, 21, ["python3", "-u", "train.py"]),
    ]
    chosen = agent.select_run_processes(procs, r"run_train_x\.sh", [])
    assert [r["pid"] for r in chosen] == [21, 22]


def test_parse_stat_survives_odd_command_names() -> None:
    line = "4242 (a) b (c)) S 7 4242 4242 0 -1 4194560 1 0 0 0 150 50 0 0 20 0 18 0 9000 1 2560 x"
    parsed = procfs.parse_stat(line)
    assert parsed["comm"] == "a) b (c)"
    assert (parsed["state"], parsed["ppid"], parsed["cpu_ticks"]) == ("S", 7, 200)
    assert (parsed["threads"], parsed["start_ticks"], parsed["rss_pages"]) == (18, 9000, 2560)
    assert (parsed["pgid"], parsed["sid"]) == (4242, 4242)
    assert not parsed["kernel_thread"]
    kworker = "1234 (kworker/0:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 5 0 0 20 0 1 0 150 0 0 x"
    assert procfs.parse_stat(kworker)["kernel_thread"]  # flags 0x4208060: PF_KTHREAD set


def test_nspid_from_the_h200_status_capture_and_a_nested_one() -> None:
    assert agent.parse_nspid((FIXTURES / "proc_status_hung.txt").read_text()) == (447,)
    assert agent.parse_nspid("State:\tS (sleeping)\nNSpid:\t91342\t12\n") == (91342, 12)


@pytest.mark.parametrize(
    ("argv", "unbuffered"),
    [
        (["python3", "-u", "train.py"], True),
        (["/usr/bin/python3.11", "-Bu", "train.py"], True),
        (["python3", "-W", "ignore", "-u", "train.py"], True),
        (["python3", "-Wdefault", "train.py", "-u"], False),
        (["python3", "train.py", "-u"], False),
        (["python3", "-m", "torch.distributed.run", "-u"], False),
        (["bash", "-u", "run.sh"], False),
    ],
)
def test_python_unbuffered_flag(argv: list[str], unbuffered: bool) -> None:
    assert agent.python_unbuffered_flag(argv) is unbuffered


# -- real processes ------------------------------------------------------------------------


def unique_name() -> str:
    return f"train_{uuid.uuid4().hex[:10]}"


TRAINING = textwrap.dedent(
    """
    import subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    time.sleep(300)
    """
)


def start_training(spawn, tmp_path: Path, name: str) -> tuple[int, int]:
    """A launcher shell whose command line names the run, and under it the run and its worker."""
    script = tmp_path / f"{name}.py"
    script.write_text(TRAINING)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    launcher = spawn(["bash", "-c", f"{sys.executable} {script} & sleep 300"], env=env)

    def run_and_worker():
        runs = [p for p in children_of(launcher.pid) if Path(f"/proc/{p}/cmdline").read_bytes().find(b".py") > 0]
        workers = children_of(runs[0]) if runs else []
        return (runs[0], workers[0]) if workers else None

    return wait_until(run_and_worker, "the training process and its worker")


def test_only_the_real_run_is_selected_among_real_decoys(tmp_path: Path, spawn) -> None:
    name = unique_name()
    run_pid, worker_pid = start_training(spawn, tmp_path, name)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / f"{name}.log").write_text("step 1\n")
    decoys = [
        spawn(["grep", name, str(fifo)]),
        spawn(["tail", "-f", str(tmp_path / f"{name}.log")]),
        spawn(["bash", "-c", f'exec -a "vim {name}.py" sleep 300']),
    ]
    # Another console's agent: the pattern is among its arguments.
    other = spawn(
        ["bash", "-c", program_script(sys.executable, AGENT.read_text(), "pulse-agent", agent_args(name, interval=60, count=0))],
        stdin=subprocess.PIPE,
    )
    other.stdin.write(AGENT.read_bytes())
    other.stdin.flush()
    wait_until(lambda: all(Path(f"/proc/{p.pid}/cmdline").read_bytes() for p in decoys), "the decoys")
    # This agent runs under a parent that is not a shell but whose command line names the run.
    wrapper = [sys.executable, "-c", "import subprocess,sys; sys.exit(subprocess.call(sys.argv[2:]))", name]
    (line,) = run_agent(wrapper + agent_argv(name))
    assert line["process_error"] is None
    assert [p["pid"] for p in line["processes"]] == [run_pid, worker_pid]
    run = line["processes"][0]
    assert run["children"] == [worker_pid]
    assert name in run["cmdline"]
    assert run["stdout"] == "/dev/null"
    assert run["unbuffered"] is False
    assert run["state"] == "S" and run["threads"] == 1 and run["rss_mib"] > 1
    assert run["nspid"][-1] == run_pid
    assert run["thread_cpu"] == []  # a first reading: no thread has a rate yet


#: Two threads, named for the kernel as native libraries name theirs, hash without the GIL
#: (up to 200% CPU) while the main thread sleeps.
BUSY_WORKERS = textwrap.dedent(
    """
    import ctypes, hashlib, threading, time
    PR_SET_NAME = 15
    data = bytes(1 << 20)
    def spin(name):
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode())
        while True:
            hashlib.sha256(data).digest()
    for n in range(2):
        threading.Thread(target=spin, args=(f"worker{n}",), daemon=True).start()
    time.sleep(300)
    """
)


def busy_ticks(pid: int) -> int:
    return procfs.parse_stat(Path(f"/proc/{pid}/stat").read_text())["cpu_ticks"]


def test_cpu_pct_is_a_delta_not_the_lifetime_average(spawn) -> None:
    name = unique_name()
    busy = spawn([sys.executable, "-c", BUSY_WORKERS, f"{name}_busy"])
    # Burns half a second of CPU, then sleeps: ps's lifetime %CPU stays high (fixtures/h200/ps_hung.txt).
    idle = spawn(
        [sys.executable, "-uc", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.5: pass\nprint('idle')\ntime.sleep(300)", f"{name}_idle"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert idle.stdout.readline() == b"idle\n"
    watch = agent.ProcessWatch(name, "")
    wait_until(lambda: {t["name"] for p in watch.read()[0] for t in p["thread_cpu"]} >= {"worker0", "worker1"}, "the named worker threads")
    ticks_before, clock_before = busy_ticks(busy.pid), time.monotonic()
    first, error = watch.read()
    assert error is None and {p["pid"] for p in first} == {busy.pid, idle.pid}
    time.sleep(1.0)
    second = {p["pid"]: p for p in watch.read()[0]}
    outer_pct = (busy_ticks(busy.pid) - ticks_before) / agent.CLOCK_TICKS / (time.monotonic() - clock_before) * 100
    # Two spinning threads on 2 cores that other test runs share: how much they get varies, so the
    # rate is checked against the CPU time the process really used over (about) the same second.
    assert second[busy.pid]["cpu_pct"] > 20
    assert abs(second[busy.pid]["cpu_pct"] - outer_pct) < 0.3 * outer_pct
    threads = {t["name"]: t["cpu_pct"] for t in second[busy.pid]["thread_cpu"] if t["tid"] != busy.pid}
    assert threads["worker0"] > 10 and threads["worker1"] > 10
    # The sleeping main thread is sent only if it ran at all: the threads that used no CPU are not.
    assert all(t["cpu_pct"] < 5 and t["state"] == "S" for t in second[busy.pid]["thread_cpu"] if t["tid"] == busy.pid)
    assert all(t["cpu_pct"] > 0 for p in second.values() for t in p["thread_cpu"])
    stat = procfs.parse_stat(Path(f"/proc/{idle.pid}/stat").read_text())
    lifetime_pct = stat["cpu_ticks"] / agent.CLOCK_TICKS / second[idle.pid]["elapsed_s"] * 100
    assert lifetime_pct > 10
    assert second[idle.pid]["cpu_pct"] < 5


def test_the_first_sample_of_a_process_has_no_cpu_rate(spawn) -> None:
    name = unique_name()
    spawn([sys.executable, "-c", "import time; time.sleep(300)", name])
    processes = wait_until(lambda: agent.ProcessWatch(name, "").read()[0], "the process")
    assert processes[0]["cpu_pct"] is None
    assert processes[0]["thread_cpu"] == []  # no thread has a rate either: none is sent


def test_pidfile_names_the_run_or_says_what_is_wrong(tmp_path: Path, spawn) -> None:
    pidfile = tmp_path / "run.pid"
    watch = agent.ProcessWatch("", str(pidfile))
    assert watch.read() == ([], f"pidfile {pidfile} does not exist: is the run started?")
    pidfile.write_text("starting\n")
    assert "does not hold a PID" in watch.read()[1]
    ended = spawn(["true"])
    ended.wait()
    pidfile.write_text(f"{ended.pid}\n")
    assert "not running (stale pidfile)" in watch.read()[1]
    run_pid, worker_pid = start_training(spawn, tmp_path, unique_name())
    pidfile.write_text(f"{run_pid}\n")
    processes, error = watch.read()
    assert error is None and [p["pid"] for p in processes] == [run_pid, worker_pid]


def test_a_fifo_as_pidfile_is_refused_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO would block the agent for good (and past its stdin's EOF)."""
    fifo = tmp_path / "run.pid"
    os.mkfifo(fifo)
    processes, error = agent.ProcessWatch("", str(fifo)).read()
    assert processes == [] and error.startswith(f"pidfile {fifo} is not a regular file")


def test_a_pidfile_is_read_as_the_restart_reads_it_never_through_a_link(tmp_path: Path, spawn) -> None:
    """The watch and the restart's probe share one reader (procfs.read_pidfile): what one refuses, so does the other."""
    run = spawn([sys.executable, "-c", "import time; time.sleep(300)"])
    real = tmp_path / "real.pid"
    real.write_text(f"{run.pid}\n")
    link = tmp_path / "run.pid"
    link.symlink_to(real)
    assert agent.ProcessWatch("", str(link)).read() == (
        [], f"pidfile {link} is a symbolic link (to {real}): point [run] pidfile at the file itself")
    assert [p["pid"] for p in agent.ProcessWatch("", str(real)).read()[0]] == [run.pid]
    real.write_text(f"{run.pid}\n" + "#" * procfs.PIDFILE_MAX_BYTES)
    assert agent.ProcessWatch("", str(real)).read()[1].startswith(f"pidfile {real} is {real.stat().st_size} bytes")
    real.write_text(f"{run.pid} {run.pid}\n")  # not one PID: the restart's guards refuse it too
    assert "does not hold a PID" in agent.ProcessWatch("", str(real)).read()[1]


def test_unbuffered_from_the_flag_or_the_environment(spawn) -> None:
    name = unique_name()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    by_env = spawn([sys.executable, "-c", "import time; time.sleep(300)", f"{name}_env"], env=env)
    by_flag = spawn([sys.executable, "-u", "-c", "import time; time.sleep(300)", f"{name}_flag"])
    wait_until(lambda: len(agent.ProcessWatch(name, "").read()[0]) == 2, "both processes")
    readings = {p["pid"]: p for p in agent.ProcessWatch(name, "").read()[0]}
    assert readings[by_env.pid]["unbuffered"] is True
    assert readings[by_flag.pid]["unbuffered"] is True


def test_a_rank_sends_its_place_in_the_run_and_no_other_variable(spawn) -> None:
    name = unique_name()
    env = {**os.environ, "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "WANDB_API_KEY": "secret-key"}
    rank = spawn([sys.executable, "-c", "import time; time.sleep(300)", name], env=env)
    wait_until(lambda: agent.ProcessWatch(name, "").read()[0], "the rank")
    (reading,) = [p for p in agent.ProcessWatch(name, "").read()[0] if p["pid"] == rank.pid]
    assert {k: v for k, v in reading["env"].items() if "RANK" in k or k == "WORLD_SIZE"} == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
    }
    assert set(reading["env"]) <= set(agent.RUN_ENV_KEYS)
    assert "secret-key" not in json.dumps(reading)


def test_a_scan_reads_the_cmdline_only_of_processes_it_does_not_know(monkeypatch: pytest.MonkeyPatch, spawn) -> None:
    monkeypatch.setattr(agent, "ARGV_SETTLE_S", 0.0)
    name = unique_name()
    sleeper = spawn([sys.executable, "-c", "import time; time.sleep(300)", name])
    wait_until(lambda: name.encode() in Path(f"/proc/{sleeper.pid}/cmdline").read_bytes(), "the sleeper's exec")
    read: list[int] = []
    read_argv = agent.read_argv

    def counted(proc_dir: str, limit: int) -> list[str]:
        read.append(int(os.path.basename(proc_dir)))
        return read_argv(proc_dir, limit)

    monkeypatch.setattr(agent, "read_argv", counted)
    cache = agent.ArgvCache()
    first = {r["pid"]: r for r in agent.scan_processes(argv_cache=cache)}
    assert sleeper.pid in read
    read.clear()
    second = {r["pid"]: r for r in agent.scan_processes(argv_cache=cache)}
    # No process the first scan knew had its cmdline read again (but those showing none that are not
    # kernel threads: a process mid-exec, a zombie). New ones are read, whether or not they lasted
    # to the scan's end (other tests start and end processes meanwhile).
    empty = {pid for pid, r in first.items() if not r["argv"] and not r["kernel_thread"]}
    assert (set(read) & first.keys()) <= empty
    assert second[sleeper.pid]["argv"] == [sys.executable, "-c", "import time; time.sleep(300)", name]
    os.killpg(sleeper.pid, signal.SIGKILL)
    sleeper.wait()
    third = agent.scan_processes(argv_cache=cache)
    assert sleeper.pid not in {r["pid"] for r in third}
    assert len(cache) <= len(third)  # ended processes are forgotten


def test_an_empty_command_line_is_read_again_not_kept(tmp_path: Path) -> None:
    """Mid-exec the kernel shows the new comm with no arguments yet: kept, the run would never match again."""
    proc_dir = tmp_path / "4242"
    proc_dir.mkdir()
    (proc_dir / "cmdline").write_bytes(b"")
    record = {"pid": 4242, "start_ticks": 100, "comm": "python3", "kernel_thread": False}
    cache = agent.ArgvCache()
    old = 100 / agent.CLOCK_TICKS + agent.ARGV_SETTLE_S + 60  # long settled: a launcher that execs late
    assert cache.argv(str(proc_dir), record, old) == []
    (proc_dir / "cmdline").write_bytes(b"python3\0train.py\0")
    assert cache.argv(str(proc_dir), record, old) == ["python3", "train.py"]
    (proc_dir / "cmdline").write_bytes(b"")
    assert cache.argv(str(proc_dir), record, old) == ["python3", "train.py"]  # settled: kept
    kworker = {"pid": 4243, "start_ticks": 100, "comm": "kworker/0:1", "kernel_thread": True}
    (tmp_path / "4243").mkdir()
    (tmp_path / "4243" / "cmdline").write_bytes(b"")
    assert cache.argv(str(tmp_path / "4243"), kworker, old) == []
    (tmp_path / "4243" / "cmdline").unlink()  # a kernel thread's empty line is kept: not read again
    assert cache.argv(str(tmp_path / "4243"), kworker, old) == []


def test_an_exec_is_seen_by_the_next_scan(monkeypatch: pytest.MonkeyPatch, spawn) -> None:
    """A launcher shell execing the run (comm changes), and a young Python execing Python (same comm)."""
    name = unique_name()
    then = [sys.executable, "-c", "import time; time.sleep(300)", f"{name}_after"]
    watch = agent.ProcessWatch(name, "")
    monkeypatch.setattr(agent, "ARGV_SETTLE_S", 0.0)  # every argv read is kept
    launcher = spawn(["bash", "-c", f"read go; exec {shlex.join(then)}", name], stdin=subprocess.PIPE)
    wait_until(lambda: [p["pid"] for p in watch.read()[0]] == [launcher.pid], "the launcher")
    launcher.stdin.write(b"go\n")
    launcher.stdin.flush()
    wait_until(lambda: [p["cmdline"] for p in watch.read()[0]] == [" ".join(then)], "the launcher's exec")
    monkeypatch.setattr(agent, "ARGV_SETTLE_S", 3600.0)  # every process counts as young
    python = spawn(
        [sys.executable, "-c", "import os, sys; sys.stdin.readline(); os.execv(sys.argv[1], sys.argv[1:])", *then],
        stdin=subprocess.PIPE,
    )
    wait_until(lambda: python.pid in {p["pid"] for p in watch.read()[0]}, "the python before its exec")
    python.stdin.write(b"go\n")
    python.stdin.flush()
    expected = {launcher.pid: " ".join(then), python.pid: " ".join(then)}
    wait_until(lambda: {p["pid"]: p["cmdline"] for p in watch.read()[0]} == expected, "the python's exec")


def counting_stat_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The PIDs whose stat the agent's ProcessTable reads from now on, in order (the real reads, counted)."""
    read: list[int] = []
    read_stat = agent.read_stat

    def counted(path: str) -> dict:
        words = path.split("/")
        if len(words) == 4:  # /proc/PID/stat, not a thread's /proc/PID/task/TID/stat
            read.append(int(words[2]))
        return read_stat(path)

    monkeypatch.setattr(agent, "read_stat", counted)
    return read


def test_a_sample_reads_the_run_and_new_processes_finds_a_late_one_and_drops_an_ended_one(
    monkeypatch: pytest.MonkeyPatch, spawn
) -> None:
    """Once the run is found, a sample reads the stat of the run's tree and of processes new since the
    last (and of the young, whose argv may still change), not of every process on the machine."""
    monkeypatch.setattr(agent, "FULL_SCAN_EVERY_S", 3600.0)
    name = unique_name()
    sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
    others = {spawn(["sleep", "300"]).pid for _ in range(20)}
    # Each has exec'd before the watch first reads it: an exec after that is a change, read again.
    wait_until(lambda: all(Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0") for pid in others), "the sleeps' exec")
    first = spawn([*sleep, name])
    watch = agent.ProcessWatch(name, "")
    wait_until(lambda: [p["pid"] for p in watch.read()[0]] == [first.pid], "the run")
    monkeypatch.setattr(agent, "ARGV_SETTLE_S", 0.0)  # nothing counts as young: only the tree and new PIDs are read
    watch.read()  # every process read once more, and its argv kept
    read = counting_stat_reads(monkeypatch)
    assert [p["pid"] for p in watch.read()[0]] == [first.pid]
    assert first.pid in read and not others & set(read)  # the run is read, the processes that are not, not
    assert others <= watch.table.records.keys()
    later = spawn([*sleep, f"{name}_later"])
    assert wait_until(lambda: {p["pid"] for p in watch.read()[0]} == {first.pid, later.pid}, "the process started later")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert wait_until(lambda: [p["pid"] for p in watch.read()[0]] == [later.pid], "the ended process dropped")
    assert first.pid not in watch.table.records and first.pid not in watch.tree


def test_an_exec_outside_the_run_into_a_second_run_is_found_by_the_full_read(
    monkeypatch: pytest.MonkeyPatch, spawn
) -> None:
    """A settled process that is not the run keeps its last reading until the next full read of every process."""
    monkeypatch.setattr(agent, "FULL_SCAN_EVERY_S", 3600.0)
    monkeypatch.setattr(agent, "ARGV_SETTLE_S", 0.0)
    name = unique_name()
    run = spawn([sys.executable, "-c", "import time; time.sleep(300)", name])
    then = [sys.executable, "-c", "import time; time.sleep(300)", f"{name}_second"]
    other = spawn(["bash", "-c", 'read -r argv; eval "exec $argv"'], stdin=subprocess.PIPE)  # comm changes
    watch = agent.ProcessWatch(name, "")
    wait_until(lambda: [p["pid"] for p in watch.read()[0]] == [run.pid], "the run")
    wait_until(lambda: other.pid in watch.table.records and watch.table.argv_cache.holds(watch.table.records[other.pid]),
               "the other process, read and settled")
    other.stdin.write(shlex.join(then).encode() + b"\n")
    other.stdin.flush()
    wait_until(lambda: name.encode() in Path(f"/proc/{other.pid}/cmdline").read_bytes(), "the exec")
    monkeypatch.setattr(agent, "FULL_SCAN_EVERY_S", 0.0)  # the full read is due
    assert {p["pid"] for p in watch.read()[0]} == {run.pid, other.pid}


def test_log_status_takes_the_newest_match_of_a_glob(tmp_path: Path) -> None:
    old, new = tmp_path / "train_1.log", tmp_path / "train_2.log"
    old.write_text("a\n")
    new.write_text("bb\n")
    os.utime(old, (1000, 2000))
    os.utime(new, (1000, 1000))
    status = agent.log_status(str(tmp_path / "train_*.log"))
    assert status == {
        "path": str(old), "exists": True, "size": 2, "mtime": 2000.0, "inode": old.stat().st_ino, "mode": old.stat().st_mode
    }
    assert agent.log_status(str(tmp_path / "none_*.log"))["exists"] is False
    assert agent.log_status(str(tmp_path / "missing.log"))["exists"] is False
    assert agent.log_status("") is None


# -- GPUs through a stand-in nvidia-smi ----------------------------------------------------


def stand_in_smi(folder: Path, body: str) -> Path:
    """An executable `nvidia-smi` in `folder` running the bash `body`."""
    path = folder / "nvidia-smi"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def replaying_smi(folder: Path, gpu_csv: str, apps_csv: str) -> Path:
    """A stand-in nvidia-smi that checks its query like the real one and prints the given CSV."""
    (folder / "gpu.csv").write_text(gpu_csv)
    (folder / "apps.csv").write_text(apps_csv)
    return stand_in_smi(
        folder,
        f"""
        [[ "$2" == "--format=csv,noheader,nounits" ]] || {{ echo "Invalid combination of input arguments." >&2; exit 2; }}
        case "$1" in
          "--query-gpu={SMI_GPU_FIELDS}") cat {folder}/gpu.csv ;;
          "--query-compute-apps={SMI_APP_FIELDS}") cat {folder}/apps.csv ;;
          *) echo "Field \\"$1\\" is not a valid field to query." >&2; exit 2 ;;
        esac
        """,
    )


def test_nvidia_smi_fallback_passes_the_raw_csv(tmp_path: Path) -> None:
    gpu_csv = (FIXTURES / "smi_query_gpu_busy.txt").read_text()
    apps_csv = (FIXTURES / "smi_apps_busy_noheader.txt").read_text()
    replaying_smi(tmp_path, gpu_csv, apps_csv)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    # This interpreter has pynvml but no driver library: NVML fails and nvidia-smi takes over silently.
    (line,) = run_agent(agent_argv(gpu_source="auto"), env=env)
    assert (line["gpu_source"], line["gpu_error"]) == ("nvidia-smi", None)
    assert line["smi_gpu_csv"] == gpu_csv and "[N/A]" in line["smi_gpu_csv"]
    assert line["smi_apps_csv"] == apps_csv
    assert line["gpus"] == []


def test_nvidia_smi_asks_for_the_apps_only_now_and_then_or_when_memory_jumps(tmp_path: Path) -> None:
    gpu_csv = (FIXTURES / "smi_query_gpu_busy.txt").read_text()
    apps_csv = (FIXTURES / "smi_apps_busy_noheader.txt").read_text()
    smi_path = replaying_smi(tmp_path, gpu_csv, apps_csv)
    calls = tmp_path / "calls"
    smi_path.write_text(smi_path.read_text().replace("\n", f'\necho "${{1%%=*}}" >> {calls}\n', 1))

    def asked() -> list[str]:
        """The queries nvidia-smi was started for since the last call."""
        queries = calls.read_text().split() if calls.exists() else []
        calls.unlink(missing_ok=True)
        return queries

    def with_memory_used(mib: int) -> str:
        cells = gpu_csv.split(", ")
        cells[3] = str(mib)  # memory.used, the fourth of SMI_GPU_FIELDS
        return ", ".join(cells)

    smi = agent.SmiGpus(str(smi_path), SMI_GPU_FIELDS, SMI_APP_FIELDS, apps_every_s=3600)
    reads = [smi.read() for _ in range(3)]
    assert asked() == ["--query-gpu", "--query-compute-apps", "--query-gpu", "--query-gpu"]
    assert all(r == {"smi_gpu_csv": gpu_csv, "smi_apps_csv": apps_csv, "gpu_error": None} for r in reads)
    # Memory creeping up by less than a GiB in all: the last list still stands.
    used = int(gpu_csv.split(", ")[3])
    for step in (300, 600, 900):
        (tmp_path / "gpu.csv").write_text(with_memory_used(used + step))
        assert smi.read()["smi_apps_csv"] == apps_csv
    assert asked() == ["--query-gpu"] * 3
    # A run ended: its GPU's memory fell by 20 GiB, and the apps are asked for at once.
    (tmp_path / "gpu.csv").write_text(with_memory_used(0))
    (tmp_path / "apps.csv").write_text("")
    assert smi.read() == {"smi_gpu_csv": with_memory_used(0), "smi_apps_csv": "", "gpu_error": None}
    assert asked() == ["--query-gpu", "--query-compute-apps"]
    # Once apps_every_s has passed (here at once), every sample asks again.
    every_time = agent.SmiGpus(str(smi_path), SMI_GPU_FIELDS, SMI_APP_FIELDS, apps_every_s=0)
    every_time.read()
    every_time.read()
    assert asked() == ["--query-gpu", "--query-compute-apps"] * 2
    assert agent.memory_used_mib("0, 1, [N/A]\n1, 2, 3\n", "index,memory.total,memory.used") == [None, 3.0]
    assert agent.memory_used_mib(gpu_csv, "index,name") is None
    # The agent's --apps-every, as the sampler passes it (the bench's equal work asks every sample).
    assert agent.build_parser().parse_args(sampler.agent_args(Config(), 1.0, 0, apps_every_s=0)).apps_every == 0
    assert agent.build_parser().parse_args(sampler.agent_args(Config(), 1.0, 0)).apps_every == agent.APPS_EVERY_S


def test_nvml_asked_for_but_missing_is_a_gpu_error() -> None:
    (line,) = run_agent(agent_argv(gpu_source="nvml"))
    assert line["gpu_source"] == "none"
    assert line["gpu_error"] in ("NVML: NVML Shared Library Not Found", "pynvml is not installed for this Python")


def test_failing_and_missing_nvidia_smi_become_gpu_errors(tmp_path: Path) -> None:
    failing = stand_in_smi(
        tmp_path,
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9\n",
    )
    smi = agent.SmiGpus(str(failing), SMI_GPU_FIELDS, SMI_APP_FIELDS)
    assert smi.read() == {
        "smi_gpu_csv": None,
        "smi_apps_csv": None,
        "gpu_error": "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver.",
    }
    missing = agent.SmiGpus(str(tmp_path / "absent" / "nvidia-smi"), SMI_GPU_FIELDS, SMI_APP_FIELDS)
    assert "not found" in missing.read()["gpu_error"]


def test_a_hanging_nvidia_smi_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    hanging = stand_in_smi(tmp_path, f"sleep 300 & echo $! > {tmp_path}/child.pid; wait\n")
    smi = agent.SmiGpus(str(hanging), SMI_GPU_FIELDS, SMI_APP_FIELDS, timeout_s=0.5)
    assert smi.read()["gpu_error"] == "nvidia-smi did not answer within 0.5 s (stopped it)"
    child = int((tmp_path / "child.pid").read_text())
    wait_until(lambda: not alive(child), "the hung nvidia-smi's child to be gone")


# -- lifetime ------------------------------------------------------------------------------


def test_agent_exits_when_stdin_reaches_eof() -> None:
    process = subprocess.Popen(
        agent_argv(interval=0.2, count=0), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        check_hello(json.loads(process.stdout.readline()), agent.PROGRAM, agent.PROTOCOL)
        assert json.loads(process.stdout.readline())["processes"] == []
        assert json.loads(process.stdout.readline())["process_error"].startswith("no match regex or pidfile")
        process.stdin.close()
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.wait()
    assert not alive(process.pid)
    assert process.stderr.read() == b""


def test_agent_exits_quietly_when_stdout_breaks() -> None:
    process = subprocess.Popen(
        agent_argv(interval=0.1, count=0), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        json.loads(process.stdout.readline())
        process.stdout.close()
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.wait()
    assert process.stderr.read() == b""


# -- PID namespaces ------------------------------------------------------------------------


def test_inside_a_pid_namespace_the_agent_says_so_and_sees_namespace_pids(tmp_path: Path, spawn, pid_namespace) -> None:
    name = unique_name()
    inside = [str(Path(__file__).parent / "bin" / "pct"), "exec", pid_namespace.id, "--"]
    run_script = tmp_path / f"{name}.py"
    run_script.write_text("import time; time.sleep(300)\n")
    spawn([*inside, sys.executable, str(run_script)])

    def sample_with_the_run() -> dict | None:
        (line,) = run_agent(inside + agent_argv(name))
        return line if line["processes"] else None

    line = wait_until(sample_with_the_run, "the run inside the namespace")
    assert line["in_pid_namespace"] is True
    (run,) = line["processes"]
    assert len(run["nspid"]) == 1 and run["nspid"] == [run["pid"]]
    # The same process seen from outside: a host PID, and NSpid adds the namespace's.
    (host_line,) = run_agent(agent_argv(name))
    (host_run,) = host_line["processes"]
    assert host_run["nspid"] == [host_run["pid"], run["pid"]]
    if os.readlink("/proc/self/ns/pid") == f"pid:[{agent.INIT_PID_NAMESPACE_INODE}]":
        assert host_line["in_pid_namespace"] is False


# -- portability ---------------------------------------------------------------------------


def test_the_mark_of_pulse_programs_is_in_the_bootstrap() -> None:
    assert agent.PULSE_PROGRAM_MARK in program_script("python3", "", "pulse-agent", [])


@pytest.mark.skipif(not PYTHON38.exists(), reason="no Python 3.8 interpreter under ~/.pyenv")
def test_agent_runs_under_python_38_through_the_bootstrap(tmp_path: Path, spawn) -> None:
    name = unique_name()
    run_pid, worker_pid = start_training(spawn, tmp_path, name)
    gpu_csv = (FIXTURES / "smi_query_gpu_noheader_nounits.txt").read_text()
    replaying_smi(tmp_path, gpu_csv, "")
    args = agent_args(name, count=2, gpu_source="auto", nvidia_smi=str(tmp_path / "nvidia-smi"))
    script = program_script(str(PYTHON38), AGENT.read_text(), "pulse-agent", args)
    process = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    process.stdin.write(AGENT.read_bytes())
    process.stdin.flush()
    hello, *lines = [json.loads(process.stdout.readline()) for _ in range(3)]
    process.stdin.close()
    assert process.wait(timeout=20) == 0
    assert check_hello(hello, agent.PROGRAM, agent.PROTOCOL).python.startswith("3.8.")
    assert [p["pid"] for p in lines[1]["processes"]] == [run_pid, worker_pid]
    assert lines[1]["processes"][0]["cpu_pct"] is not None
    assert (lines[1]["gpu_source"], lines[1]["smi_gpu_csv"], lines[1]["gpu_error"]) == ("nvidia-smi", gpu_csv, None)


def test_a_pulse_console_naming_the_pattern_is_never_the_run() -> None:
    """The `pkill -f` lesson for the console itself: `pulse check --match train_dflash` names the run."""
    procs = [
        record(10, 1, "python3 -u train_dflash.py", comm="python3"),
        record(20, 1, ["/venv/bin/python", "/venv/bin/pulse", "check", "--match", "train_dflash"], comm="pulse"),
        record(21, 1, ["/venv/bin/python", "-m", "console.cli", "restart", "--match", "train_dflash"]),
        record(22, 1, ["pulse", "--match", "train_dflash"], comm="pulse"),
    ]
    assert [r["pid"] for r in agent.select_run_processes(procs, "train_dflash", [])] == [10]


def test_the_slurm_job_of_a_process_comes_from_its_environment():
    """SLURM_JOB_ID names the job; a step Pulse started (PULSE_STEP, set by its srun --export) belongs to none."""
    assert agent.slurm_job_of(["PATH=/bin", "SLURM_JOB_ID=12", "SLURM_PROCID=1"]) == "12"
    assert agent.slurm_job_of(["SLURM_JOB_ID=12", f"{agent.PULSE_STEP_VARIABLE}=1"]) is None
    assert agent.slurm_job_of(["PATH=/bin"]) is None
    assert agent.slurm_job_of(None) is None
