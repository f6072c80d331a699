"""nvidia-smi CSV parsing on the H200 captures, with and without header/units, and on broken output."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.model import GpuProcess, GpuReading, gpus_by_role
from console.observe.smi import (
    APP_QUERY_ARGS,
    APP_QUERY_FIELDS,
    GPU_QUERY_ARGS,
    GPU_QUERY_FIELDS,
    ParseError,
    attach_processes,
    parse_apps_csv,
    parse_gpu_csv,
)

H200 = Path(__file__).parent / "fixtures" / "h200"
UUID = "GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9"
# The columns the captures were taken with (see fixtures/h200/README.md).
CAPTURE_FIELDS = (
    "index,uuid,name,memory.used,memory.total,utilization.gpu,utilization.memory,"
    "temperature.gpu,power.draw,power.limit,clocks.sm,fan.speed,pstate"
).split(",")
IDLE = GpuReading(0, UUID, "NVIDIA H200", 0, 143771, 0.0, 37.0, 78.06, 700.0, sm_clock_mhz=345.0)


def capture(name: str) -> str:
    return (H200 / name).read_text()


def test_header_and_units_capture() -> None:
    assert parse_gpu_csv(capture("smi_query_gpu_csv.txt")) == [IDLE]


def test_noheader_nounits_capture_with_its_fields() -> None:
    assert parse_gpu_csv(capture("smi_query_gpu_noheader_nounits.txt"), CAPTURE_FIELDS) == [IDLE]
    busy = parse_gpu_csv(capture("smi_query_gpu_busy.txt"), CAPTURE_FIELDS)
    assert busy == [GpuReading(0, UUID, "NVIDIA H200", 21619, 143771, 0.0, 38.0, 122.83, 700.0, sm_clock_mhz=1980.0)]


def test_pulse_own_query_format() -> None:
    row = "3, GPU-aaaa, NVIDIA H200, 80123, 143771, 97, 61, 688.10, 700.00, 1875\n"
    assert parse_gpu_csv(row) == [GpuReading(3, "GPU-aaaa", "NVIDIA H200", 80123, 143771, 97.0, 61.0, 688.1, 700.0, sm_clock_mhz=1875.0)]
    assert GPU_QUERY_ARGS == (f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,noheader,nounits")
    assert APP_QUERY_ARGS[0] == "--query-compute-apps=gpu_uuid,pid,used_memory,process_name"


def test_wrong_column_count_is_one_line_error() -> None:
    with pytest.raises(ParseError, match=r"^nvidia-smi line 1: expected 10 columns, got 13") as caught:
        parse_gpu_csv(capture("smi_query_gpu_busy.txt"))
    assert "\n" not in str(caught.value)


def test_not_available_is_none_and_faults_set_error() -> None:
    text = (
        "0, GPU-a, NVIDIA H200, [N/A], 143771, [Not Supported], N/A, [N/A], 700.00, [N/A]\n"
        "1, GPU-b, NVIDIA H200, [GPU requires reset], [GPU requires reset], [GPU requires reset], "
        "[Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error]\n"
    )
    ok, broken = parse_gpu_csv(text)
    assert ok == GpuReading(0, "GPU-a", "NVIDIA H200", None, 143771, None, None, None, 700.0)
    assert broken.index == 1 and broken.memory_used_mib is None and broken.power_w is None
    assert broken.error == "[GPU requires reset], [Unknown Error]"


def test_a_roles_figures_leave_out_faults_and_unknowns() -> None:
    """The compact GPU pane's line per role: ranges over the GPUs read without a fault, the faulted ones named."""
    text = (
        "0, GPU-a, NVIDIA H200, 80123, 143771, 97, 61, 688.10, 700.00, 1980\n"
        "1, GPU-b, NVIDIA H200, [N/A], 143771, [Not Supported], 58, 640.00, 700.00, [N/A]\n"
        "2, GPU-c, NVIDIA H200, [GPU requires reset], [GPU requires reset], [GPU requires reset], "
        "[Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error]\n"
        "3, GPU-d, NVIDIA H200, 21619, 143771, 0, 38, 122.83, 700.00, 1980\n"
    )
    gpus = tuple(parse_gpu_csv(text))
    target, drafter = gpus_by_role(gpus, {0: "target", 1: "target", 2: "target", 3: "drafter"})
    assert (target.role, [g.index for g in target.gpus], drafter.role) == ("target", [0, 1, 2], "drafter")
    assert [g.index for g in target.faults] == [2] and [g.index for g in target.readable] == [0, 1]
    assert target.memory_used_gib == [80123 / 1024] and target.memory_total_mib == 143771
    assert target.figures("memory_pct") == [80123 * 100 / 143771]
    assert (target.figures("utilization_pct"), target.figures("temperature_c")) == ([97.0], [61.0, 58.0])
    (unnamed,) = gpus_by_role(gpus[1:2], {})
    assert (unnamed.role, unnamed.memory_used_gib, unnamed.memory_total_mib) == ("", [], 143771)


def test_bad_rows_are_skipped_and_reported_when_asked() -> None:
    text = "0, GPU-a, NVIDIA H200, 1, 2, 3, 4, 5, 6, 7\nxx, GPU-b\n2, GPU-c, NVIDIA H200, lots, 2, 3, 4, 5, 6, 7\n"
    errors: list[str] = []
    assert [gpu.index for gpu in parse_gpu_csv(text, errors=errors)] == [0]
    assert errors == [
        "nvidia-smi line 2: expected 10 columns, got 2: 'xx, GPU-b'",
        "nvidia-smi line 3: memory.used is 'lots', not a number",
    ]
    with pytest.raises(ParseError, match="line 2"):
        parse_gpu_csv(text)


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
        "bash: nvidia-smi: command not found\n",
    ],
)
def test_tool_failure_text_becomes_the_message(text: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_gpu_csv(text)
    assert str(caught.value) == f"nvidia-smi: {text.strip()}"


def test_empty_output_means_no_gpus() -> None:
    assert parse_gpu_csv("") == []
    assert parse_apps_csv("") == []


def test_apps_captures() -> None:
    process = GpuProcess(447, 21610, "python3")
    assert parse_apps_csv(capture("smi_apps_busy.txt")) == [(UUID, process)]
    assert parse_apps_csv(capture("smi_apps_busy_noheader.txt")) == [(UUID, process)]
    assert parse_apps_csv(capture("smi_apps_idle.txt")) == []
    assert parse_apps_csv(capture("smi_apps_after_kill.txt")) == []  # header only, 3 columns


def test_apps_without_name_column_and_awkward_values() -> None:
    assert parse_apps_csv("GPU-a, 12, [N/A]\n", fields=("gpu_uuid", "pid", "used_memory")) == [
        ("GPU-a", GpuProcess(12, None, None))
    ]
    weird = "GPU-a, 13, 100, python3 -c print(1, 2)\nGPU-a, 14, 5, [Not Found]\n"
    assert parse_apps_csv(weird) == [
        ("GPU-a", GpuProcess(13, 100, "python3 -c print(1, 2)")),
        ("GPU-a", GpuProcess(14, 5, None)),
    ]
    errors: list[str] = []
    assert parse_apps_csv("GPU-a, notapid, 5, x\n", errors=errors) == []
    assert errors == ["nvidia-smi line 1: pid is 'notapid', not a number"]


def test_attach_processes_by_uuid() -> None:
    gpus = parse_gpu_csv(capture("smi_query_gpu_csv.txt")) + [
        GpuReading(1, "GPU-other", "NVIDIA H200", 0, 143771, 0.0, 30.0, 70.0, 700.0)
    ]
    apps = parse_apps_csv(capture("smi_apps_busy.txt")) + [("GPU-gone", GpuProcess(9, 1, "x"))]
    first, second = attach_processes(gpus, apps)
    assert first.processes == (GpuProcess(447, 21610, "python3"),)
    assert second.processes == ()
    assert APP_QUERY_FIELDS[:2] == ("gpu_uuid", "pid")
