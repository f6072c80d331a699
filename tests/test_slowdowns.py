"""Why a run is slow (issue 34), replayed from real H200 runs made slow in each way.

tests/data/real/slowdowns/ holds six jobs captured by `scripts/gpu/verdicts --set slowdowns` on one
H200 (2026-12-02): each trained at a steady rate, then slowed by one cause (meta.json's `truth`).
One look per job, taken 20-30 s into its slowdown: /proc of its processes with each thread's
schedstat 1 s apart, NVML (process samples, clocks, throttle reasons, power), and `py-spy record`
of every process (3 s at 50 Hz, idle threads too). The log as written up to the look gives the
rates. Each look goes through the code Pulse runs on a live target (roles, the record parser, the
learned baseline, the cause rules); the cause named must be the truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console import slowness
from console.config import Config
from console.evidence import tail_lines
from console.model import ProcessReading
from console.observe.pyspy import parse_record_raw
from console.observe.roles import label_processes
from console.state import RunState

DATA = Path(__file__).parent / "data" / "real" / "slowdowns"
LOOKS = {
    "slow_loader": ("at_85", "input-bound"),
    "slow_rank": ("at_85", "slow rank"),
    "cpu_starved": ("at_85", "CPU starvation"),
    "recompiles": ("at_85", "recompiling"),
    "gpu_neighbour": ("at_175", "neighbour on the GPU"),
    "power_neighbour": ("at_260", "neighbour on the GPU"),
}
RUN_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES")


def readings(rows: list[dict]) -> list[ProcessReading]:
    """The capture's /proc rows as the process agent reads them (the fields roles need)."""
    out = []
    for row in rows:
        stat = row["stat"]
        env = row.get("environ") if isinstance(row.get("environ"), dict) else {}
        children = tuple(r["pid"] for r in rows if r["stat"]["ppid"] == row["pid"])
        out.append(ProcessReading(row["pid"], stat["ppid"], stat["state"], 0.0, stat["num_threads"], 0.0, None,
                                  " ".join(row["cmdline"]), children=children,
                                  run_env=tuple((k, env[k]) for k in RUN_ENV if k in env)))
    return out


def schedstat(row: dict, key: str) -> dict[int, tuple[int, int]]:
    return {int(tid): (v["run_ns"], v["wait_ns"]) for tid, v in row.get(key, {}).items()}


def the_look(job: str) -> tuple[slowness.SlowLook, dict, float]:
    at, _ = LOOKS[job]
    d = DATA / job / at
    rows = json.loads((d / "processes.json").read_text())
    processes = label_processes(tuple(readings(rows)))
    records = {p.pid: parse_record_raw(f.read_text()) for p in processes if (f := d / "record_idle" / f"{p.pid}.txt").exists()}
    nvml = json.loads((d / "nvml.json").read_text())
    more = {g["index"]: g for g in nvml["more"]["gpus"]}
    run_pids = frozenset(r["pid"] for r in rows)
    gpus = tuple(
        slowness.GpuLook(
            i, g["utilization"]["gpu"], more[i]["sm_clock"], more[i]["sm_clock_max"], more[i]["power_mw"] / 1000,
            more[i]["power_limit_mw"] / 1000, more[i]["throttle_reasons"],
            tuple((s["pid"], float(s["smUtil"])) for s in g.get("process_utilization", [])), run_pids)
        for i, g in enumerate(nvml["gpus"])
    )
    meta = json.loads((d / "look.json").read_text())
    first, second = meta["machine"]
    memory = first["meminfo_kib"]
    host = slowness.HostLook(float(first["loadavg"][0]), first["cpus"],
                             second["vmstat"]["pswpin"] - first["vmstat"]["pswpin"],
                             memory["MemAvailable"] / memory["MemTotal"])
    looks = slowness.process_looks(processes, records, {r["pid"]: schedstat(r, "schedstat") for r in rows},
                                   {r["pid"]: schedstat(r, "schedstat_1s_later") for r in rows},
                                   affinity={r["pid"]: len(r["affinity"]) for r in rows if "affinity" in r})
    log = written_by(job, meta["monotonic"])
    since_slow = written_by(job, meta["monotonic"], since=meta["monotonic"] - 30)
    look = slowness.SlowLook(1.0, looks, gpus, host, slowness.recompile_lines(since_slow.splitlines()))
    return look, {"log": log}, meta["unix"]


def written_by(job: str, monotonic: float, since: float | None = None) -> str:
    """The log as it stood at `monotonic` (from `since` on), by the capture's write times."""
    data = (DATA / job / "run.log").read_bytes()
    times = [json.loads(line) for line in (DATA / job / "write_times.jsonl").read_text().splitlines()]
    end = max((t["offset"] for t in times if t["t"] <= monotonic), default=0)
    end = next((t["offset"] for t in times if t["t"] > monotonic), len(data))
    start = max((t["offset"] for t in times if since is not None and t["t"] <= since), default=0)
    return data[start:end].decode(errors="replace")


def rates(log: str) -> list[float]:
    state = RunState()
    state.add_lines(tail_lines(log, Config(), 0.0))
    return state.values(state.rate_metric) if state.rate_metric else []


@pytest.mark.parametrize("job", sorted(LOOKS))
def test_the_cause_named_is_the_truth(job):
    look, _, _ = the_look(job)
    cause = slowness.name_cause(look)
    assert cause.name == LOOKS[job][1], (cause, json.loads((DATA / job / "meta.json").read_text())["truth"])
    assert cause.evidence


@pytest.mark.parametrize("job", sorted(LOOKS))
def test_the_slowdown_is_seen_against_the_runs_own_log(job):
    look, texts, now = the_look(job)
    values = rates(texts["log"])
    baseline = slowness.from_log(values)
    assert baseline is not None, len(values)
    found = slowness.slowdown(values, baseline, Config().metrics.slow_fraction)
    assert found is not None, (values[-10:], baseline)
    assert "below its best sustained" in found.text("tokens/s", now)


def test_every_cause_has_its_next_step():
    from console.diagnose.rules import SLOW_STEPS

    assert sorted(SLOW_STEPS) == sorted(slowness.CAUSES)
