"""The demo's stand-in nvidia-smi prints what the real one prints (fixtures/h200) and Pulse's parsers read it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.demo.machine import GPU_COUNT, UUIDS, write_state
from console.demo.nvidia_smi import main as nvidia_smi_main
from console.observe.smi import (
    APP_QUERY_ARGS,
    GPU_QUERY_ARGS,
    parse_apps_csv,
    parse_gpu_csv,
    parse_pmon,
)

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
ROOT = Path(__file__).resolve().parents[1]
CAPTURED_GPU_FIELDS = (
    "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,utilization.memory,"
    "temperature.gpu,power.draw,power.limit,clocks.sm,fan.speed,pstate"
)


def nvidia_smi(*args: str, state: Path | None = None) -> subprocess.CompletedProcess:
    """The stand-in as a real process, the way the demo's launcher runs it."""
    argv = [sys.executable, "-S", "-m", "console.demo.nvidia_smi"]
    if state is not None:
        argv += ["--state", str(state)]
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=30
    )


@pytest.fixture
def busy_state(tmp_path: Path) -> Path:
    """A state file whose owner is a live process (this test), as a running trainer writes it."""
    path = tmp_path / "gpus.json"
    gpus = [
        {
            "index": i,
            "memory_used_mib": 101842 if i < 5 else 46204,
            "utilization_gpu_pct": 98,
            "utilization_memory_pct": 44,
            "temperature_c": 65,
            "power_w": 631.5,
            "sm_mhz": 1980,
        }
        for i in range(GPU_COUNT)
    ]
    now = time.time()
    write_state(path, {"pid": os.getpid(), "updated": now, "busy_until": now + 600, "gpus": gpus})
    return path


def test_idle_query_matches_the_captured_h200_byte_for_byte():
    out = nvidia_smi(CAPTURED_GPU_FIELDS, "--format=csv")
    captured = (FIXTURES / "smi_query_gpu_csv.txt").read_text().splitlines()
    lines = out.stdout.splitlines()
    assert out.returncode == 0
    assert lines[:2] == captured  # header and GPU 0 (the captured card's UUID)
    assert len(lines) == 1 + GPU_COUNT


def test_noheader_nounits_matches_the_capture():
    out = nvidia_smi(CAPTURED_GPU_FIELDS, "--format=csv,noheader,nounits")
    captured = (FIXTURES / "smi_query_gpu_noheader_nounits.txt").read_text().splitlines()
    assert out.stdout.splitlines()[0] == captured[0]


def test_apps_header_is_the_real_one_and_idle_lists_no_process():
    out = nvidia_smi("--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv")
    assert out.stdout == (FIXTURES / "smi_apps_idle.txt").read_text()


def test_a_live_trainer_holds_memory_on_every_gpu(busy_state):
    out = nvidia_smi("--query-compute-apps=gpu_uuid,pid,used_memory,process_name", "--format=csv", state=busy_state)
    lines = out.stdout.splitlines()
    assert lines[0] == (FIXTURES / "smi_apps_busy.txt").read_text().splitlines()[0]
    assert len(lines) == 1 + GPU_COUNT
    uuid, pid, used, name = lines[1].split(", ")
    assert (uuid, int(pid), used) == (UUIDS[0], os.getpid(), "101833 MiB")
    assert name == sys.executable or Path(name).name.startswith("python")


def test_pulse_parsers_read_what_pulse_asks_for(busy_state):
    gpus = parse_gpu_csv(nvidia_smi(*GPU_QUERY_ARGS, state=busy_state).stdout)
    apps = parse_apps_csv(nvidia_smi(*APP_QUERY_ARGS, state=busy_state).stdout)
    assert [g.index for g in gpus] == list(range(GPU_COUNT))
    assert {g.name for g in gpus} == {"NVIDIA H200"}
    assert gpus[0].memory_total_mib == 143771
    assert gpus[0].memory_used_mib == 101842 and gpus[0].utilization_pct == 98
    assert gpus[7].memory_used_mib == 46204
    assert {uuid for uuid, _ in apps} == set(UUIDS)


def test_the_parsers_also_read_the_headed_form_with_units(busy_state):
    fields = GPU_QUERY_ARGS[0]
    gpus = parse_gpu_csv(nvidia_smi(fields, "--format=csv", state=busy_state).stdout)
    assert gpus[3].power_w == 631.5 and gpus[3].temperature_c == 65


def test_memory_is_released_a_moment_after_the_process_is_gone(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = tmp_path / "gpus.json"
    reading = {"index": 0, "memory_used_mib": 90000, "utilization_gpu_pct": 99, "utilization_memory_pct": 40,
               "temperature_c": 66, "power_w": 640.0, "sm_mhz": 1980}
    gpus = [dict(reading, index=i) for i in range(GPU_COUNT)]
    write_state(state, {"pid": dead.pid, "updated": time.time(), "busy_until": time.time() + 60, "gpus": gpus})
    query = ("--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits", "-i", "0")
    assert nvidia_smi(*query, state=state).stdout == "0, 90000, 0\n"  # the driver still tearing down
    apps = nvidia_smi("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv", state=state)
    assert apps.stdout == (FIXTURES / "smi_apps_after_kill.txt").read_text()
    write_state(state, {"pid": dead.pid, "updated": time.time() - 10, "busy_until": 0, "gpus": gpus})
    assert nvidia_smi(*query, state=state).stdout == "0, 0, 0\n"


def test_list_gpus_matches_the_capture():
    out = nvidia_smi("-L", "-i", "0")
    assert out.stdout == (FIXTURES / "smi_L.txt").read_text()


def test_loop_prints_the_header_once():
    """-lms repeats the rows until killed; the header comes once, as with the real tool."""
    process = subprocess.Popen(
        [sys.executable, "-S", "-m", "console.demo.nvidia_smi", "--query-gpu=index", "--format=csv", "-lms", "50",
         "-i", "2"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
    )
    try:
        lines = [process.stdout.readline() for _ in range(3)]
    finally:
        process.kill()
        process.wait()
    assert lines == ["index\n", "2\n", "2\n"]


def test_an_unknown_field_is_refused_like_the_real_tool(capsys):
    assert nvidia_smi_main(["--query-gpu=index,bogus", "--format=csv"]) == 2
    assert 'Field "bogus" is not a valid field to query.' in capsys.readouterr().err


def test_pmon_is_the_real_layout_and_names_the_trainer_on_every_gpu(busy_state):
    done = nvidia_smi("pmon", "-c", "1", "-s", "u", state=busy_state)
    assert done.returncode == 0, done.stderr
    real = (ROOT / "tests" / "data" / "real" / "torchrun_hang" / "smi_pmon.txt").read_text().splitlines()
    assert done.stdout.splitlines()[:2] == real[:2]
    assert parse_pmon(done.stdout) == {i: ((os.getpid(), 98.0),) for i in range(GPU_COUNT)}
    idle = nvidia_smi("pmon", "-c", "1")
    assert parse_pmon(idle.stdout) == {i: () for i in range(GPU_COUNT)}
