"""The GPU pane's graphs and the throughput graph's slowdown mark, as console.ui.run_figures computes
them (no Textual), on real H200 readings: the nvidia-smi captures (tests/fixtures/h200) and the six
slowdown runs (tests/data/real/slowdowns, each slowed one way at a time its meta.json's truth names)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from console import slowness
from console.config import MetricsConfig
from console.model import GpuReading
from console.observe.smi import parse_gpu_csv
from console.state import RunState
from console.ui.run_figures import gpu_graphs, graph_columns, throughput_view
from tests.real_captures import Capture
from tests.test_slowdowns import LOOKS

H200 = Path(__file__).parent / "fixtures" / "h200"
SLOWDOWNS = Path(__file__).parent / "data" / "real" / "slowdowns"
FRACTION = MetricsConfig().slow_fraction


def looked_gpu(job: str) -> GpuReading:
    """GPU 0 as NVML read it in `job`'s look, 20-30 s into its slowdown (utilisation, SM clock, power)."""
    at, _ = LOOKS[job]
    nvml = json.loads((SLOWDOWNS / job / at / "nvml.json").read_text())
    gpu, more = nvml["gpus"][0], nvml["more"]["gpus"][0]
    memory = sum(p["used_bytes"] for p in gpu["compute_processes"]) >> 20
    return GpuReading(0, gpu["uuid"], "NVIDIA H200", memory, 143771, float(gpu["utilization"]["gpu"]), None,
                      more["power_mw"] / 1000, more["power_limit_mw"] / 1000, sm_clock_mhz=float(more["sm_clock"]))


def idle_gpu() -> GpuReading:
    """The idle H200 as `nvidia-smi --query-gpu` printed it (header and units): 0 %, 78 W, SM at 345 MHz."""
    (gpu,) = parse_gpu_csv((H200 / "smi_query_gpu_csv.txt").read_text())
    return gpu


def test_a_gpu_row_graphs_its_readings_against_their_scales():
    idle, capped = idle_gpu(), looked_gpu("power_neighbour")
    view = gpu_graphs([(100.0, (idle,)), (101.0, (capped,))], {0: "target"}, by_role=False)
    (row,) = view.rows
    assert (row.label, row.role, view.span_s) == ("0", "target", 1.0)
    util, mem, power, sm = row.graphs
    assert [g.label for g in row.graphs] == ["util", "mem", "power", "SM"]
    assert util.levels == (0.0, capped.utilization_pct / 100) and util.latest == f"{capped.utilization_pct:.0f}%"
    assert mem.levels == (0.0, capped.memory_pct / 100)
    # Power against the GPU's own limit: the neighbour drives it to 688 of 700 W.
    assert power.levels == (idle.power_w / idle.power_limit_w, capped.power_w / capped.power_limit_w)
    assert power.latest == f"{capped.power_w:.0f}W" and power.levels[1] > 0.95
    # The SM clock against the highest held: the capped 1875 MHz is the top, the idle 345 MHz far below.
    assert sm.levels == (idle.sm_clock_mhz / capped.sm_clock_mhz, 1.0) and sm.latest == "1875MHz"


def test_no_sm_graph_without_a_clock_and_a_fault_is_named_not_drawn():
    unread = replace(looked_gpu("slow_loader"), sm_clock_mhz=None)
    faulty = replace(unread, index=1, error="[GPU requires reset]")
    view = gpu_graphs([(0.0, (unread, faulty)), (1.0, (unread, faulty))], {}, by_role=False)
    assert [g.label for g in view.rows[0].graphs] == ["util", "mem", "power"]
    assert view.rows[1].error == "[GPU requires reset]" and view.rows[1].graphs[0].levels == (None, None)
    assert gpu_graphs([], {}, by_role=False).rows == ()


def test_a_roles_row_is_the_mean_of_its_gpus_read():
    busy, capped = looked_gpu("slow_loader"), looked_gpu("power_neighbour")
    gpus = (busy, replace(capped, index=1), replace(idle_gpu(), index=2))
    view = gpu_graphs([(0.0, gpus)], {0: "target", 1: "target", 2: "drafter"}, by_role=True)
    target, drafter = view.rows
    assert (target.label, drafter.label) == ("target 0, 1", "drafter 2")
    util = target.graphs[0]
    assert util.levels == ((busy.utilization_pct + capped.utilization_pct) / 200,)
    assert util.latest == f"{(busy.utilization_pct + capped.utilization_pct) / 2:.0f}%"
    assert drafter.graphs[0].levels == (0.0,)


def test_graph_columns_put_the_newest_at_the_right_and_average_a_slice():
    assert graph_columns([0.5, 1.0], 4) == [None, None, 0.5, 1.0]
    assert graph_columns([0.0, 1.0, 1.0, 1.0, None, None], 3) == [0.5, 1.0, None]
    assert graph_columns([0.2], 0) == []


def truth_start(capture: Capture, at: str) -> float:
    """The monotonic time `capture`'s slowdown began: its meta.json's `from N s`, on the clock its looks are named by."""
    origin = capture.snapshot["monotonic"] - float(at.removeprefix("at_"))
    return origin + float(re.search(r"from (\d+) s", capture.meta["truth"]).group(1))


@pytest.mark.parametrize("job", sorted(LOOKS))
def test_the_slowdowns_start_is_marked_where_its_rates_fell_below_the_line(job):
    at, _ = LOOKS[job]
    capture = Capture(f"slowdowns/{job}", look=at)
    state = RunState(clock=lambda: capture.now)
    state.add_lines(capture.lines())
    metric = state.rate_metric
    assert metric is not None
    values = state.values(metric)
    found = slowness.slowdown(values, slowness.from_log(values), FRACTION)
    assert found is not None
    view = throughput_view(state, MetricsConfig(), capture.now, found)
    assert view.learned and view.baseline == found.baseline.rate and view.slow_from is not None
    # The mark is at the slowdown's first rate (the first shown, when it began before them); each rate
    # from it on is below the line, the one before it is not.
    limit = FRACTION * found.baseline.rate
    assert view.slow_from == max(len(view.rates) - found.below_for, 0)
    assert all(rate < limit for rate in view.rates[view.slow_from :])
    assert values[-found.below_for - 1] >= limit
    first = state.series[metric][-found.below_for]
    assert view.slow_for_s == pytest.approx(capture.now - first.time)
    # Seen within 20 s of the truth's start. (slow_rank's rate had already fallen below 80 % of its log's
    # best before its truth: the capture's other jobs shared the machine then. Its mark says so.)
    assert first.time - truth_start(capture, at) <= 20.0


def test_a_rate_back_above_the_line_ends_the_mark_and_no_verdict_draws_none():
    at, _ = LOOKS["slow_loader"]
    capture = Capture("slowdowns/slow_loader", look=at)
    state = RunState(clock=lambda: capture.now)
    lines = capture.lines()
    state.add_lines(lines)
    values = state.values("tokens_per_s") or state.values("samples_per_s")
    found = slowness.slowdown(values, slowness.from_log(values), FRACTION)
    assert found is not None
    assert throughput_view(state, MetricsConfig(), capture.now).slow_from is None
    # The run's own line at its best rate again, written after the verdict was reached.
    best = next(line for line in lines if (line.info.tokens_per_s or line.info.samples_per_s or 0) >= found.baseline.rate)
    state.add_lines([replace(best, number=lines[-1].number + 1, time=capture.now)])
    again = throughput_view(state, MetricsConfig(), capture.now, found)
    assert (again.slow_from, again.slow_for_s, again.learned) == (None, None, False)


def test_without_a_configured_baseline_the_rate_is_shown_against_the_one_its_verdict_uses_slow_or_not():
    at, _ = LOOKS["slow_loader"]
    capture = Capture("slowdowns/slow_loader", look=at)
    state = RunState(clock=lambda: capture.now)
    state.add_lines([line for line in capture.lines() if line.time < truth_start(capture, at)])  # before it slowed
    metric = state.rate_metric
    assert metric is not None
    learned = slowness.from_log(state.values(metric))
    assert learned is not None
    view = throughput_view(state, MetricsConfig(), capture.now, None, learned)
    assert (view.baseline, view.learned, view.slow_from) == (learned.rate, True, None)
    # A baseline the config sets is the one shown: the verdict measures by it too.
    configured = MetricsConfig(**{f"baseline_{metric}": 2 * learned.rate})
    view = throughput_view(state, configured, capture.now, None, slowness.Baseline(2 * learned.rate, "config"))
    assert (view.baseline, view.learned) == (2 * learned.rate, False)
    # Nothing learned yet: no baseline, as before.
    assert throughput_view(state, MetricsConfig(), capture.now).baseline is None
