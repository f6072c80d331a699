"""The local side of sampling: agent lines into Samples, the stream over LocalTarget and real sshd.

Real agents on real targets, a real run process, a stand-in nvidia-smi replaying the H200
captures; parse tests feed the exact shapes the agent prints and the garbage a target can send.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.config import Config, GpuConfig, RunConfig, TargetConfig
from console.model import GpuProcess, GpuReading, ProcessReading, Sample
from console.observe import agent, sampler, smi
from console.observe.sampler import SampleError, Sampler, gpu_processes_unseen, parse_line, parse_sample, sample_once
from console.remote.connect import make_target
from console.remote.target import LocalTarget, Target, TargetError
from tests.test_agent import FIXTURES, SMI_GPU_FIELDS, alive, spawn, stand_in_smi, unique_name  # noqa: F401

SMI_APPS_BUSY = (FIXTURES / "smi_apps_busy_noheader.txt").read_text()
#: The columns of the H200 captures (fixtures/h200/README.md).
CAPTURED_GPU_FIELDS = SMI_GPU_FIELDS.split(",")


def captured_gpu_csv(name: str) -> str:
    """An H200 `--query-gpu` capture cut down to the columns Pulse asks for, as nvidia-smi would print them."""
    rows = []
    for line in (FIXTURES / name).read_text().splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        by_field = dict(zip(CAPTURED_GPU_FIELDS, cells))
        rows.append(", ".join(by_field[field] for field in smi.GPU_QUERY_FIELDS) + "\n")
    return "".join(rows)


SMI_GPU_BUSY = captured_gpu_csv("smi_query_gpu_busy.txt")


def nvml_line(**overrides) -> dict:
    """A line as the agent prints it on an NVML host."""
    line = {
        "t": 1795990000.5,
        "gpu_source": "nvml",
        "gpu_error": None,
        "gpus": [
            {
                "index": 0, "uuid": "GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9", "name": "NVIDIA H200",
                "memory_used_mib": 21619, "memory_total_mib": 143771, "utilization_pct": 0.0,
                "temperature_c": 38, "power_w": 122.83, "power_limit_w": 700.0, "sm_clock_mhz": 345,
                "processes": [{"pid": 447, "used_mib": 21610, "name": "python3"}], "error": None,
            }
        ],
        "smi_gpu_csv": None,
        "smi_apps_csv": None,
        "processes": [
            {
                "pid": 12, "ppid": 1, "state": "S", "elapsed_s": 12.0, "threads": 18, "rss_mib": 812.5,
                "cpu_pct": 0.0, "cpu_s": 9.75, "cmdline": "python3 -u hung.py", "nspid": [12],
                "stdout": "/workspace/train.log", "unbuffered": True, "env": {}, "children": [13],
                "thread_cpu": [{"tid": 12, "name": "python3", "cpu_pct": 0.0, "state": "S"}],
            }
        ],
        "process_error": None,
        "in_pid_namespace": True,
        "log": {"path": "/workspace/train.log", "exists": True, "size": 1024, "mtime": 1795990000.0, "inode": 77,
                "mode": 0o100644},
    }  # fmt: skip
    line.update(overrides)
    return line


def smi_line(gpu_csv: str | None, apps_csv: str | None, **overrides) -> dict:
    return nvml_line(gpu_source="nvidia-smi", gpus=[], smi_gpu_csv=gpu_csv, smi_apps_csv=apps_csv, **overrides)


# -- parsing ---------------------------------------------------------------------------------


def test_an_nvml_line_becomes_a_sample() -> None:
    sample = parse_sample(nvml_line())
    (gpu,) = sample.gpus
    assert gpu == GpuReading(
        index=0, uuid="GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9", name="NVIDIA H200",
        memory_used_mib=21619, memory_total_mib=143771, utilization_pct=0.0, temperature_c=38,
        power_w=122.83, power_limit_w=700.0, sm_clock_mhz=345, processes=(GpuProcess(447, 21610, "python3"),),
    )  # fmt: skip
    (process,) = sample.processes
    assert (process.pid, process.children, process.unbuffered, process.nspid) == (12, (13,), True, (12,))
    assert process.thread_cpu[0].name == "python3" and process.thread_cpu[0].cpu_pct == 0.0
    assert sample.in_pid_namespace and sample.log.inode == 77 and sample.time == 1795990000.5


def test_an_nvidia_smi_line_is_parsed_from_its_raw_csv() -> None:
    sample = parse_sample(smi_line(SMI_GPU_BUSY, SMI_APPS_BUSY))
    assert sample.gpu_source == "nvidia-smi" and sample.gpu_error is None
    assert sample.gpus == tuple(smi.attach_processes(smi.parse_gpu_csv(SMI_GPU_BUSY), smi.parse_apps_csv(SMI_APPS_BUSY)))
    (gpu,) = sample.gpus
    assert gpu.memory_used_mib == 21619 and [p.pid for p in gpu.processes] == [447]


@pytest.mark.parametrize(
    ("garbage", "error"),
    [
        ("<html>502 Bad Gateway</html>\n", "nvidia-smi: <html>502 Bad Gateway</html>"),
        ("0, GPU-x, NVIDIA H200, lots, of\n", "nvidia-smi line 1: expected 10 columns, got 5: "),
    ],
)
def test_garbage_from_nvidia_smi_is_a_gpu_error_not_a_crash(garbage: str, error: str) -> None:
    sample = parse_sample(smi_line(garbage, ""))
    assert sample.gpus == ()
    assert sample.gpu_error.startswith(error) and "\n" not in sample.gpu_error


def test_not_available_values_are_none_and_gpu_faults_are_kept() -> None:
    # The H200 idle capture's power draw and a second GPU that needs a reset.
    na = SMI_GPU_BUSY.replace("122.83", "[N/A]")
    faulty = "1, GPU-7a1c, NVIDIA H200, [GPU requires reset], 143771, [GPU requires reset], 40, 80.00, 700.00, [GPU requires reset]\n"
    sample = parse_sample(smi_line(na + faulty, ""))
    assert sample.gpu_error is None
    assert sample.gpus[0].power_w is None and sample.gpus[0].memory_used_mib == 21619
    assert sample.gpus[1].error == "[GPU requires reset]" and sample.gpus[1].memory_used_mib is None


def test_a_bad_gpu_row_is_named_and_the_other_gpus_still_show() -> None:
    sample = parse_sample(smi_line(SMI_GPU_BUSY + "1, GPU-y, NVIDIA H200, oops\n", SMI_APPS_BUSY))
    assert [g.index for g in sample.gpus] == [0]
    assert sample.gpu_error.startswith("nvidia-smi line 2: expected 10 columns, got 4")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("Welcome to Ubuntu 22.04 LTS", "not JSON: 'Welcome to Ubuntu 22.04 LTS'"),
        ("[1, 2]", "the line is list, not an object"),
        ('{"gpu_source": "nvml"}', "the line has no 't'"),
        (json.dumps(nvml_line(gpu_source="rocm")), "gpu_source is 'rocm', not nvml, nvidia-smi or none"),
        (json.dumps(nvml_line(processes=[{"pid": "12", "ppid": 1}])), "a process's pid is '12', not an integer"),
        (json.dumps(nvml_line(gpus={"index": 0})), "gpus is dict, not a list"),
    ],
)
def test_lines_that_are_not_samples_say_why_in_one_line(line: str, message: str) -> None:
    with pytest.raises(SampleError) as caught:
        parse_line(line)
    assert str(caught.value) == message


def test_text_from_the_target_is_made_safe_for_a_terminal() -> None:
    hostile = "python3 train.py \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J--evil"
    line = nvml_line()
    line["processes"][0]["cmdline"] = hostile
    line["processes"][0]["thread_cpu"][0]["name"] = "\x1b[31mred"
    sample = parse_sample(line)
    assert sample.processes[0].cmdline == "python3 train.py --evil"
    assert sample.processes[0].thread_cpu[0].name == "red"


# -- unseen GPU processes --------------------------------------------------------------------


def gpu(memory_used_mib: int, *pids: int) -> GpuReading:
    return GpuReading(0, "GPU-0", "NVIDIA H200", memory_used_mib, 143771, 0.0, 38, 120.0, 700.0,
                      tuple(GpuProcess(pid, 21610) for pid in pids))  # fmt: skip


def run_process(pid: int, *nspid: int) -> ProcessReading:
    return ProcessReading(pid, 1, "S", 10.0, 18, 800.0, 0.0, "python3 train.py", nspid=nspid or (pid,))


@pytest.mark.parametrize(
    ("in_namespace", "gpus", "processes", "unseen"),
    [
        (True, [gpu(21619, 91342)], [run_process(447)], True),  # host PID on the GPU, namespace PID in /proc
        (True, [gpu(21619)], [run_process(447)], True),  # memory held, the driver lists nobody
        (True, [gpu(21619, 91342)], [run_process(91342, 91342, 447)], False),  # NSpid links them
        (True, [gpu(21619, 447)], [run_process(447)], False),
        (True, [gpu(0)], [run_process(447)], False),  # idle GPU: nothing to miss
        (False, [gpu(21619, 91342)], [run_process(447)], False),  # on the host PIDs are comparable
    ],
)
def test_gpu_processes_unseen(in_namespace: bool, gpus, processes, unseen: bool) -> None:
    sample = Sample(0.0, gpus=tuple(gpus), processes=tuple(processes), in_pid_namespace=in_namespace)
    assert gpu_processes_unseen(sample) is unseen


# -- streams from real agents ----------------------------------------------------------------


def config_for(name: str, tmp_path: Path, target: TargetConfig | None = None, **gpus) -> Config:
    return Config(
        target=target or TargetConfig(),
        run=RunConfig(match=rf"{name}\.py", log=str(tmp_path / f"{name}_{{started}}.log")),
        gpus=GpuConfig(**gpus) if gpus else GpuConfig(source="auto", poll_s=0.2),
    )


def start_run(spawn, tmp_path: Path, name: str, *prefix: str, body: str = "import time; time.sleep(300)") -> subprocess.Popen:
    script = tmp_path / f"{name}.py"
    script.write_text(body + "\n")
    log = tmp_path / f"{name}_20260101.log"
    log.write_text("step 1\n")
    return spawn([*prefix, sys.executable, str(script)], stdout=log.open("a"))


def replaying_smi_in(folder: Path, apps_csv: str) -> Path:
    (folder / "apps.csv").write_text(apps_csv)
    (folder / "gpu.csv").write_text(SMI_GPU_BUSY)
    return stand_in_smi(
        folder,
        f"""case "$1" in
          "--query-gpu={','.join(smi.GPU_QUERY_FIELDS)}") cat {folder}/gpu.csv ;;
          "--query-compute-apps={','.join(smi.APP_QUERY_FIELDS)}") cat {folder}/apps.csv ;;
          *) echo "Field \\"$1\\" is not a valid field to query." >&2; exit 2 ;;
        esac
        """,
    )


def agent_pids(name: str) -> list[int]:
    """Live sampling agents (started through the bootstrap) watching `name`."""
    return [
        r["pid"]
        for r in agent.scan_processes()
        if agent.is_pulse_program(r["argv"])
        and sampler.AGENT_NAME in r["argv"]
        and any(name in word for word in r["argv"])
        and alive(r["pid"])
    ]


async def until(condition, what: str, timeout: float = 20.0):
    """Poll `condition` without blocking the event loop; fail naming `what` after `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := condition()):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def first_samples(target: Target, config: Config, count: int) -> list[Sample]:
    samples: list[Sample] = []
    stream = Sampler(target, config).stream()
    try:
        async for sample in stream:
            samples.append(sample)
            if len(samples) == count:
                break
    finally:
        await stream.aclose()
    return samples


async def test_stream_over_local_target_follows_the_run_and_hangs_up(spawn, tmp_path: Path) -> None:
    name = unique_name()
    run = start_run(spawn, tmp_path, name)
    config = config_for(name, tmp_path)
    stream = Sampler(LocalTarget(), config).stream()
    first = await anext(stream)
    second = await anext(stream)
    (agent_pid,) = agent_pids(name)
    await stream.aclose()
    for sample in (first, second):
        assert [p.pid for p in sample.processes] == [run.pid]
    assert first.processes[0].cpu_pct is None and second.processes[0].cpu_pct is not None
    assert second.processes[0].stdout.endswith(f"{name}_20260101.log")
    assert second.log.path == str(tmp_path / f"{name}_20260101.log") and second.log.size == 7
    await until(lambda: not alive(agent_pid), "the agent to exit after the stream closed")


async def test_sample_once_gives_a_cpu_delta_over_the_window(spawn, tmp_path: Path) -> None:
    name = unique_name()
    run = start_run(spawn, tmp_path, name, body="while True: pass")
    first, second = await sample_once(LocalTarget(), config_for(name, tmp_path), 0.5)
    assert first.processes[0].cpu_pct is None
    assert second.processes[0].pid == run.pid and second.processes[0].cpu_pct > 10
    assert second.time - first.time >= 0.5
    assert agent_pids(name) == []


async def test_nvidia_smi_through_the_sampler_gives_gpus_with_processes(spawn, tmp_path: Path) -> None:
    name = unique_name()
    start_run(spawn, tmp_path, name)
    smi_path = replaying_smi_in(tmp_path, SMI_APPS_BUSY)
    config = config_for(name, tmp_path, TargetConfig(nvidia_smi=str(smi_path)), source="nvidia-smi", poll_s=0.2)
    _, sample = await sample_once(LocalTarget(), config, 0.1)
    assert (sample.gpu_source, sample.gpu_error) == ("nvidia-smi", None)
    (gpu,) = sample.gpus
    assert (gpu.name, gpu.memory_used_mib, gpu.memory_total_mib) == ("NVIDIA H200", 21619, 143771)
    assert [(p.pid, p.used_mib) for p in gpu.processes] == [(447, 21610)]


async def test_noise_before_the_agent_is_flagged_and_skipped(spawn, tmp_path: Path) -> None:
    name = unique_name()
    run = start_run(spawn, tmp_path, name)
    # A login that prints a banner on stdout before the interpreter starts.
    noisy = stand_in_smi(tmp_path, f'echo "Welcome to the GPU box"\nexec {sys.executable} "$@"\n')
    config = config_for(name, tmp_path, TargetConfig(python=str(noisy)))
    problems: list[str] = []
    stream = Sampler(make_target(config.target), config, on_problem=problems.append).stream()
    sample = await anext(stream)
    await stream.aclose()
    assert sample.processes[0].pid == run.pid
    assert problems == ["agent sent a line that is not a sample (not JSON: 'Welcome to the GPU box'); skipped"]


async def test_a_missing_interpreter_is_one_clear_error(tmp_path: Path) -> None:
    config = config_for("x", tmp_path, TargetConfig(python=str(tmp_path / "no-python3")))
    with pytest.raises(TargetError) as caught:
        await sample_once(make_target(config.target), config, 0.1)
    message = str(caught.value)
    assert message.startswith("local: the sampling agent exited with status 127: ")
    assert message.endswith("(set [target] python to an interpreter that exists there)")
    assert "\n" not in message


# -- over a real sshd --------------------------------------------------------------------------


async def test_stream_over_ssh_yields_the_runs_process(spawn, tmp_path: Path, sshd) -> None:
    name = unique_name()
    run = start_run(spawn, tmp_path, name)
    target = make_target(sshd.target_config())
    try:
        samples = await first_samples(target, config_for(name, tmp_path, sshd.target_config()), 2)
    finally:
        await target.close()
    assert [[p.pid for p in s.processes] for s in samples] == [[run.pid], [run.pid]]
    assert samples[1].processes[0].cpu_pct is not None
    await until(lambda: agent_pids(name) == [], "the remote agent to exit after the stream closed")


async def test_inside_a_container_over_ssh_host_gpu_pids_are_unseen(spawn, tmp_path: Path, sshd, pid_namespace) -> None:
    name = unique_name()
    pct = str(Path(__file__).parent / "bin" / "pct")
    run = start_run(spawn, tmp_path, name, pct, "exec", pid_namespace.id, "--")

    def host_pid_of_the_run() -> int | None:
        for record in agent.scan_processes():
            if record["argv"][:2] == [sys.executable, str(tmp_path / f"{name}.py")]:
                return record["pid"]
        return None

    host_pid = await until(host_pid_of_the_run, "the run inside the namespace")
    # The driver lists the run under its host PID, as a real one does from inside a container.
    smi_path = replaying_smi_in(tmp_path, SMI_APPS_BUSY.replace(" 447,", f" {host_pid},"))
    target_config = sshd.target_config(container=pid_namespace.container, nvidia_smi=str(smi_path))
    config = config_for(name, tmp_path, target_config, source="auto", poll_s=0.2)
    target = make_target(target_config)
    try:
        _, sample = await sample_once(target, config, 0.2)
    finally:
        await target.close()
    assert sample.in_pid_namespace
    (process,) = sample.processes
    assert process.pid != host_pid and process.nspid == (process.pid,)
    assert [p.pid for p in sample.gpus[0].processes] == [host_pid]
    assert gpu_processes_unseen(sample)
    assert run.poll() is None


def test_an_error_said_by_two_readings_is_said_once():
    """Issue 33: "nvidia-smi not found (…); NVML: …; nvidia-smi not found (…)" in one line."""
    from console.observe.sampler import joined_errors

    smi = "nvidia-smi not found (no NVIDIA driver tools on this PATH?)"
    assert joined_errors(f"{smi}; NVML: NVML Shared Library Not Found", smi) == f"{smi}; NVML: NVML Shared Library Not Found"
    assert joined_errors(None, None) is None
