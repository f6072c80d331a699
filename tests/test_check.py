"""`pulse check --json` as a real subprocess on real processes in each run state, locally,
over the real sshd, and inside a PID namespace reached through the stand-in `pct`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.sshd import TESTS_BIN
from tests.test_restart import Processes, alive, children, procs, wait_for  # noqa: F401  (procs is a fixture)

ROOT = Path(__file__).resolve().parents[1]
PROCS = ROOT / "tests" / "procs"
PY_SPY = ROOT / ".venv" / "bin" / "py-spy"
H200 = ROOT / "tests" / "fixtures" / "h200"
STALL_AFTER_S = 2.0
#: The columns of fixtures/h200/smi_query_gpu_busy.txt, in the order nvidia-smi printed them.
CAPTURED_GPU_FIELDS = (
    "index uuid name memory.used memory.total utilization.gpu utilization.memory temperature.gpu "
    "power.draw power.limit clocks.sm fan.speed pstate"
).split()


def nvidia_smi_stand_in(folder: Path, host_pids: list[int]) -> Path:
    """An nvidia-smi printing the H200 capture taken while hung.py held 21.6 GB, listing `host_pids` as its apps."""
    gpu = dict(zip(CAPTURED_GPU_FIELDS, (H200 / "smi_query_gpu_busy.txt").read_text().strip().split(", ")))
    uuid_, _, used, name = (H200 / "smi_apps_busy_noheader.txt").read_text().strip().split(", ")
    apps = [{"gpu_uuid": uuid_, "pid": str(pid), "used_memory": used, "process_name": name} for pid in host_pids]
    return write_nvidia_smi(folder, gpu, apps)


def write_nvidia_smi(folder: Path, gpu: dict, apps: list[dict], pmon: str = "") -> Path:
    """An executable nvidia-smi in `folder` answering the CSV queries with `gpu` and `apps`, and `pmon` with `pmon`."""
    path = folder / "nvidia-smi"
    path.write_text(
        "#!/usr/bin/python3\n"
        "import sys\n"
        f"GPU = {gpu!r}\nAPPS = {apps!r}\nPMON = {pmon!r}\n"
        "if sys.argv[1:2] == ['pmon']:\n"
        "    sys.stdout.write(PMON)\n"
        "    sys.exit(0)\n"
        "query = next(a for a in sys.argv[1:] if a.startswith('--query-'))\n"
        "kind, _, fields = query.partition('=')\n"
        "rows = [GPU] if kind == '--query-gpu' else APPS\n"
        "for row in rows:\n"
        "    print(', '.join(row[f] for f in fields.split(',')))\n"
    )
    path.chmod(0o755)
    return path


class Check:
    """Runs `pulse check --json` on one transport (local, or the real sshd) with a config written for it."""

    def __init__(self, tmp_path: Path, sshd=None, container_id: str | None = None) -> None:
        self.tmp_path = tmp_path
        self.sshd = sshd
        self.container_id = container_id

    def config(self, nvidia_smi: Path | None) -> Path:
        lines = ["[target]", f'py_spy = "{PY_SPY}"']
        if nvidia_smi is not None:
            lines.append(f'nvidia_smi = "{nvidia_smi}"')
        if self.sshd is not None:
            lines += [
                f'host = "{self.sshd.alias}"',
                f'ssh_config = "{self.sshd.ssh_config}"',
                f'known_hosts = "{self.sshd.known_hosts}"',
            ]
        if self.container_id is not None:
            lines.append(f'container = {{ kind = "pct", id = "{self.container_id}" }}')
        lines += ["[stall]", "sample_window_s = 0.5"]
        path = self.tmp_path / f"check-{uuid.uuid4().hex[:8]}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def __call__(self, *flags: str, nvidia_smi: Path | None = None) -> tuple[int, dict, str]:
        argv = [sys.executable, "-m", "console.cli", "check", str(self.config(nvidia_smi)), "--json"]
        argv += ["--stall-after", f"{STALL_AFTER_S:g}", *flags]
        env = {**os.environ, "PATH": f"{TESTS_BIN}:{os.environ['PATH']}"}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        report = json.loads(done.stdout) if done.stdout.strip() else {}
        return done.returncode, report, done.stderr


@pytest.fixture(params=["local", "ssh"])
def check(request, tmp_path) -> Check:
    return Check(tmp_path, request.getfixturevalue("sshd") if request.param == "ssh" else None)


class Run:
    """A tests/procs program started as a run: stdout and stderr to its log, findable by its tag."""

    def __init__(self, procs: Processes, tmp_path: Path, program: str, *args: str, prefix: tuple[str, ...] = ()) -> None:
        self.tag = f"pulse-check-{uuid.uuid4().hex}"
        self.log = tmp_path / f"{self.tag}.log"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffering is the program's to choose
        env["PATH"] = f"{TESTS_BIN}:{env['PATH']}"
        with self.log.open("w") as out:
            self.popen = procs.start(
                [*prefix, sys.executable, str(PROCS / program), *args, "--tag", self.tag],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    @property
    def flags(self) -> tuple[str, ...]:
        # The pattern stands verbatim in the `pulse check` command line that carries it: over SSH
        # to this same machine that console is no ancestor of the agent, and must still never match.
        return ("--match", f"--tag {self.tag}", "--log", str(self.log))

    def wait_for_text(self, text: str) -> None:
        wait_for(lambda: text in self.log.read_text(), f"{text!r} in the run's log")

    def wait_silent(self) -> None:
        """Until the log has been silent longer than --stall-after."""
        wait_for(lambda: time.time() - self.log.stat().st_mtime > STALL_AFTER_S + 0.3, "the log to go silent")


def pids_of(report: dict) -> list[int]:
    return [p["pid"] for p in report["processes"]]


# -- each state, locally and over sshd ---------------------------------------------------------


def test_healthy(procs, tmp_path, check):
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1")
    run.wait_for_text("step 3")
    smi = nvidia_smi_stand_in(tmp_path, [run.popen.pid])
    status, report, _ = check(*run.flags, "--baseline", "14200", nvidia_smi=smi)
    assert (status, report["verdict"]) == (0, "healthy")
    assert pids_of(report) == [run.popen.pid]
    assert report["throughput"] == {"metric": "tokens_per_s", "current": 14200.0, "baseline": 14200.0, "ratio": 1.0}
    assert report["gpu_source"] == "nvidia-smi"
    assert report["gpus"][0]["processes"][0]["pid"] == run.popen.pid
    assert report["gpus"][0]["memory_used_mib"] == 21619
    assert report["stacks"] is None


def test_slow_against_the_baseline(procs, tmp_path, check):
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1", "--tok-s", "5000")
    run.wait_for_text("step 3")
    status, report, _ = check(*run.flags, "--baseline", "14200")
    assert (status, report["verdict"]) == (1, "slow")
    assert report["throughput"]["ratio"] == pytest.approx(5000 / 14200, abs=0.001)


def test_hung_on_a_queue_with_the_waiting_frame(procs, tmp_path, check):
    run = Run(procs, tmp_path, "hung_queue.py")
    run.wait_for_text("producer died")
    run.wait_silent()
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "hung")
    assert report["processes"][0]["cpu_pct"] < 5.0
    main = next(s for s in report["stacks"] if s["name"] == "MainThread")
    assert main["wait"] == "queue get"
    assert "Queue.get" in main["where"] and "pack_hidden" in main["where"]
    assert "traceback" in report["log"]["problem_kinds"]
    assert any(line.startswith("log silent") for line in report["evidence"])
    assert any("lifetime average" in line for line in report["evidence"])  # what ps would have shown


def test_buffered_stdout_into_a_file(procs, tmp_path, check):
    run = Run(procs, tmp_path, "busy_buffered.py")
    wait_for(lambda: alive(run.popen.pid), "the run to start")
    run.wait_silent()
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "buffered")
    process = report["processes"][0]
    assert process["stdout"] == str(run.log) and process["unbuffered"] is False
    assert process["cpu_pct"] > 5.0
    assert report["log"]["size"] == 0


def test_oom(procs, tmp_path, check):
    run = Run(procs, tmp_path, "oom_crash.py")
    run.popen.wait()
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "oom")
    assert report["processes"] == []
    assert "oom" in report["log"]["problem_kinds"]
    assert any("CUDA out of memory" in line for line in report["evidence"])


def test_a_real_triton_autotune_oom_is_named_by_its_exception_line(tmp_path, check):
    """The captured log of a Triton autotune that asked for more shared memory than an H200 has
    (tests/data/real/triton_oom): its traceback is one problem, quoted by its last line."""
    log = tmp_path / "triton_oom.log"
    log.write_bytes((ROOT / "tests" / "data" / "real" / "triton_oom" / "run.log").read_bytes())
    status, report, _ = check("--match", f"--tag [p]ulse-check-{uuid.uuid4().hex}", "--log", str(log))
    assert (status, report["verdict"]) == (1, "oom")
    assert [p["text"].split(",")[0] for p in report["log"]["problems"]] == ["triton.runtime.errors.OutOfResources: out of resource: shared memory"]
    assert report["evidence"][0].startswith("oom: triton.runtime.errors.OutOfResources: out of resource: shared memory")
    assert not any("Traceback" in line for line in report["evidence"])


def test_nan_loss_is_diverged(procs, tmp_path, check):
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1", "--loss", "nan")
    run.wait_for_text("step 2")
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "diverged")
    assert "nan" in report["log"]["problem_kinds"]


def test_dead(procs, tmp_path, check):
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1")
    run.wait_for_text("step 2")
    run.popen.kill()
    run.popen.wait()
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "dead")
    assert report["log"]["exists"] and report["log"]["size"] > 0


def test_launch_failed_when_nothing_runs_and_no_log(tmp_path, check):
    flags = ("--match", f"--tag [p]ulse-check-{uuid.uuid4().hex}", "--log", str(tmp_path / "never-written.log"))
    status, report, _ = check(*flags)
    assert (status, report["verdict"]) == (1, "launch_failed")
    assert report["log"]["exists"] is False


# -- inside a PID namespace (a stand-in container) ----------------------------------------------


def host_pid_of(run: Run) -> int:
    """The run's PID on the host: `pct` execs nsenter, whose child is the program."""
    return wait_for(lambda: (children(run.popen.pid) or [None])[0], "the program inside the namespace")


@pytest.mark.parametrize("transport", ["local", "ssh"])
def test_a_healthy_run_inside_a_pid_namespace_is_healthy_with_its_gpu_pids_unseen(
    procs, tmp_path, pid_namespace, request, transport
):
    sshd = request.getfixturevalue("sshd") if transport == "ssh" else None
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1", prefix=("pct", "exec", pid_namespace.id, "--"))
    run.wait_for_text("step 3")
    smi = nvidia_smi_stand_in(tmp_path, [host_pid_of(run)])
    status, report, _ = Check(tmp_path, sshd, pid_namespace.id)(*run.flags, nvidia_smi=smi)
    assert (status, report["verdict"]) == (0, "healthy")
    assert report["in_pid_namespace"] is True
    assert host_pid_of(run) not in pids_of(report)  # the namespace shows its own PID for the run
    assert report["gpus"][0]["processes"][0]["pid"] == host_pid_of(run)
    assert any("this PID namespace cannot see them" in line for line in report["evidence"])


def test_gpu_contexts_unseen_when_the_container_shows_no_run_but_the_gpu_holds_memory(
    procs, tmp_path, pid_namespace
):
    """nvidia-smi in a container lists host PIDs: no run in view is not 'contexts gone'."""
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1")  # outside the namespace: a host process
    run.wait_for_text("step 3")
    smi = nvidia_smi_stand_in(tmp_path, [run.popen.pid])
    flags = ("--match", f"--tag pulse-check-{uuid.uuid4().hex}", "--log", str(run.log))
    status, report, _ = Check(tmp_path, None, pid_namespace.id)(*flags, nvidia_smi=smi)
    assert (status, report["verdict"]) == (1, "gpu_contexts_unseen")
    assert report["processes"] == []
    assert "check from the host" in report["next_step"]


def test_hung_inside_a_pid_namespace_dumps_with_the_namespace_pid(procs, tmp_path, pid_namespace):
    run = Run(procs, tmp_path, "hung_queue.py", prefix=("pct", "exec", pid_namespace.id, "--"))
    run.wait_for_text("producer died")
    run.wait_silent()
    smi = nvidia_smi_stand_in(tmp_path, [host_pid_of(run)])
    status, report, _ = Check(tmp_path, None, pid_namespace.id)(*run.flags, nvidia_smi=smi)
    assert (status, report["verdict"]) == (1, "hung")
    assert report["in_pid_namespace"] is True
    assert any(s["wait"] == "queue get" for s in report["stacks"])


# -- the target or the config is wrong: exit 2, one line -----------------------------------------


def test_unreachable_target_is_exit_2_with_one_line(tmp_path, sshd):
    config = sshd.ssh_config.read_text().replace(f"Port {sshd.port}", "Port 1")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(config)
    toml = tmp_path / "unreachable.toml"
    toml.write_text(
        f'[target]\nhost = "{sshd.alias}"\nssh_config = "{ssh_config}"\nknown_hosts = "{sshd.known_hosts}"\n'
    )
    argv = [sys.executable, "-m", "console.cli", "check", str(toml), "--match", "train", "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "flags, says",
    [(("--match", "("), "--match"), (("--log", "/tmp/x.log"), "--match REGEX or --pidfile")],
)
def test_bad_config_is_exit_2_with_one_line(flags, says):
    argv = [sys.executable, "-m", "console.cli", "check", *flags, "--json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_text_report_without_json(procs, tmp_path):
    run = Run(procs, tmp_path, "healthy.py", "--interval", "0.1", "--tok-s", "5000")
    run.wait_for_text("step 3")
    argv = [sys.executable, "-m", "console.cli", "check", *run.flags, "--baseline", "14200", "--stall-after", "2"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"log: {run.log}" in done.stdout
    assert "throughput: 5,000 tok/s (baseline 14,200, 35%)" in done.stdout
    assert "verdict: SLOW — " in done.stdout and "below the baseline 14.2K (set in the config)" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("next: ")
