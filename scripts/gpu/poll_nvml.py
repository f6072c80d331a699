#!/usr/bin/env python3
"""NVML in the loop, on a GPU machine: one sample of a run, Pulse's agent against the manual probe.

    python3 scripts/gpu/poll_nvml.py --match REGEX --log LOG [--polls 60] [--out FILE.json]

Both ways run on this machine (no ssh: the GPU machine has no sshd), on the same run, and do
the same reads each poll: the run's processes, every GPU's figures, the compute apps, the
log's stat.

- `manual`: the one-liner without its ssh: `bash -c 'ps … | grep …; nvidia-smi --query-gpu=…;
  nvidia-smi --query-compute-apps=…; stat …'` (scripts/benchlib/world.py's manual_probe).
- `agent_nvml`: Pulse's sampling agent with `[gpus] source = "nvml"`, asked for the compute
  apps every sample (equal work); `agent_nvml_own_cadence`: as the console runs it (apps every
  5 s); `agent_smi`: the agent with `source = "nvidia-smi"` (the fallback), apps every sample.

Per poll: latency (the manual way's round trip; the agent's receipt here minus the time it began
the sample), and the CPU the poll cost (the manual way: bash and its children, by wait4; the
agent: its process's CPU over the polls, divided by them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from benchlib import procs  # noqa: E402
from benchlib.stats import ratio, summary  # noqa: E402
from benchlib.world import manual_probe  # noqa: E402
from console.config import Config, GpuConfig, RunConfig  # noqa: E402
from console.observe.sampler import AGENT_NAME, Sampler  # noqa: E402
from console.remote.target import LocalTarget  # noqa: E402

INTERVAL_S = 0.25
AGENT_WAYS = ("agent_nvml", "agent_nvml_own_cadence", "agent_smi")
WARMUP_SAMPLES = 2


def manual(probe: str, polls: int) -> dict:
    latencies, cpu = [], []
    for _ in range(polls):
        run = procs.run_timed(["bash", "-c", probe])
        if run.status != 0:
            raise RuntimeError(f"the manual probe failed with status {run.status}")
        latencies.append(run.wall_s * 1000)
        cpu.append(run.cpu_s * 1000)
        time.sleep(INTERVAL_S)
    return {"latency_ms": summary(latencies), "cpu_ms": summary(cpu)}


async def agent(match: str, log: str, source: str, polls: int, apps_every_s: float | None) -> dict:
    config = Config(run=RunConfig(match=match, log=log), gpus=GpuConfig(source=source))
    stream = Sampler(LocalTarget(), config, interval_s=INTERVAL_S, apps_every_s=apps_every_s).stream()
    latencies, gpus, apps, seen = [], 0, 0, 0
    agent_pid, before = None, 0.0
    try:
        async for sample in stream:
            received = time.time()
            seen += 1
            if seen == WARMUP_SAMPLES:
                (agent_pid,) = [p for p in procs.tree(os.getpid()) if AGENT_NAME in procs.cmdline(p)]
                before = procs.cpu_s(agent_pid, reaped=True)
            elif seen > WARMUP_SAMPLES:
                latencies.append((received - sample.time) * 1000)
                gpus = len(sample.gpus)
                apps = max(apps, sum(len(gpu.processes) for gpu in sample.gpus))
                if len(latencies) == polls:
                    break
        spent = procs.cpu_s(agent_pid, reaped=True) - before
    finally:
        await stream.aclose()
    return {"latency_ms": summary(latencies), "cpu_ms_per_poll": round(spent / polls * 1000, 2), "gpus": gpus, "apps_seen": apps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", required=True, help="regex over the run's command lines")
    parser.add_argument("--log", required=True, help="the run's log")
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--out", help="write the figures here as JSON (else stdout)")
    args = parser.parse_args()
    ways = {
        "manual": manual(manual_probe(args.match, args.log), args.polls),
        "agent_nvml": asyncio.run(agent(args.match, args.log, "nvml", args.polls, 0)),
        "agent_nvml_own_cadence": asyncio.run(agent(args.match, args.log, "nvml", args.polls, None)),
        "agent_smi": asyncio.run(agent(args.match, args.log, "nvidia-smi", args.polls, 0)),
    }
    hand_ms, hand_cpu_ms = ways["manual"]["latency_ms"]["median"], ways["manual"]["cpu_ms"]["median"]
    ways["ratios"] = {
        **{f"{way}_latency_speedup": ratio(hand_ms, ways[way]["latency_ms"]["median"]) for way in AGENT_WAYS},
        **{f"{way}_cpu_ratio": ratio(hand_cpu_ms, ways[way]["cpu_ms_per_poll"]) for way in AGENT_WAYS},
    }
    text = json.dumps(ways, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
