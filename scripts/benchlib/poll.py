"""1. Poll: one full sample of the run, Pulse's way against the ssh one-liners it replaces.

A sample is the run's processes, both nvidia-smi queries (the stand-in for eight H200s) and
the log's stat. Ways measured, each on the clean and on the slow-`.bashrc` server:

- `fresh_ssh`:   `ssh host 'ps …| grep …; nvidia-smi …; nvidia-smi …; stat …'` per poll
- `controlmaster`: the same through an OpenSSH ControlMaster socket (one TCP/SSH session)
- `asyncssh_exec`: Pulse's SshTarget, one connection, a new exec channel per poll
- `pulse_agent`:  Pulse's Sampler: one long-lived agent streaming samples over one channel
                  (latency = receipt here − the time the agent began the sample there), asking
                  for both nvidia-smi queries every sample: the same work as the manual probe
- `pulse_agent_own_cadence`: the same agent as the console runs it, asking for the compute
                  apps every 5 s (or when a GPU's memory jumps): less work than the manual probe

and `local_bash`: the same probe in a local `bash -c`, the floor. Latency per poll; client
CPU per poll (wait4 of the ssh/bash process, or this process's own CPU for Pulse); remote
CPU per poll (the sshd listener's whole tree: connection processes, shells, probes, agent).
A `*_no_gpu` set leaves the GPU read out altogether: not a measure of NVML (never measured here;
it needs a GPU machine), only of everything else.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

from benchlib import procs
from benchlib.stats import ratio, summary
from benchlib.world import World, stop_process, wait_for
from console.observe.sampler import Sampler
from console.remote.connect import make_target

SETTLE_S = 0.3
"""After the last poll: time for the server to reap its side, so its CPU is in the reading."""
AGENT_INTERVAL_S = 0.15
AGENT_WARMUP_SAMPLES = 2


def _remote(world: World, server: str) -> dict[str, float]:
    return procs.tree_cpu(world.servers[server].pid)


def _per_poll_ms(before: dict, after: dict, polls: int) -> float:
    return round(procs.cpu_delta(before, after)["total"] / polls * 1000, 2)


def manual(world: World, server: str | None, argv_for, polls: int, *, extra_client_pid: int | None = None) -> dict:
    """Run a command per poll (argv_for(i)), each reaped with wait4; the server's tree CPU around all of them."""
    latencies, client = [], []
    before = _remote(world, server) if server else None
    extra_before = procs.cpu_s(extra_client_pid) if extra_client_pid else 0.0
    for i in range(polls):
        run = procs.run_timed(argv_for(i))
        if run.status != 0:
            raise RuntimeError(f"poll command failed with status {run.status}: {argv_for(i)[-1][:80]}")
        latencies.append(run.wall_s * 1000)
        client.append(run.cpu_s * 1000)
    out = {"latency_ms": summary(latencies), "client_cpu_ms": summary(client)}
    if extra_client_pid:
        out["client_cpu_ms_master"] = round((procs.cpu_s(extra_client_pid) - extra_before) / polls * 1000, 2)
    if server:
        time.sleep(SETTLE_S)
        out["remote_cpu_ms"] = _per_poll_ms(before, _remote(world, server), polls)
    return out


def fresh_ssh(world: World, server: str, probe: str, polls: int) -> dict:
    argv = world.servers[server].ssh_argv(probe)
    return manual(world, server, lambda _: argv, polls)


def controlmaster(world: World, server: str, probe: str, polls: int) -> dict:
    ssh = world.servers[server]
    socket_path = world.dir / f"cm-{server}.sock"
    common = ["-F", str(ssh.ssh_config), "-o", f"ControlPath={socket_path}"]
    master = world.spawn(
        ["ssh", *common, "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N", ssh.alias],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if not wait_for(socket_path.exists, 15):
            raise RuntimeError("the ControlMaster socket did not appear")
        argv = ["ssh", *common, "-o", "ControlMaster=no", ssh.alias, probe]
        return manual(world, server, lambda _: argv, polls, extra_client_pid=master.pid)
    finally:
        stop_process(master)


async def asyncssh_exec(world: World, server: str, probe: str, polls: int) -> dict:
    target = make_target(world.target(server))
    try:
        await target.connect()
        await target.run("true", 30)
        latencies = []
        before, self_before = _remote(world, server), procs.self_cpu_s()
        for _ in range(polls):
            started = time.perf_counter()
            result = await target.run(probe, 30, login=False)
            latencies.append((time.perf_counter() - started) * 1000)
            if not result.ok:
                raise RuntimeError(f"probe over asyncssh failed: {result.stderr[:200]}")
        client = (procs.self_cpu_s() - self_before) / polls * 1000
        await asyncio.sleep(SETTLE_S)
        remote = _per_poll_ms(before, _remote(world, server), polls)
    finally:
        await target.close()
    return {"latency_ms": summary(latencies), "client_cpu_ms": {"median": round(client, 2)}, "remote_cpu_ms": remote}


async def pulse_agent(
    world: World, server: str, polls: int, *, gpu_source: str | None = None, apps_every_s: float | None = 0
) -> dict:
    """The agent's samples; `apps_every_s` 0 asks for the compute apps every sample (the manual
    probe's work), None leaves the agent's own cadence."""
    config = world.run_config(server, gpu_source=gpu_source)
    target = make_target(config.target)
    latencies = []
    before = self_before = None
    stream = Sampler(target, config, interval_s=AGENT_INTERVAL_S, apps_every_s=apps_every_s).stream()
    try:
        seen = 0
        async for sample in stream:
            received = time.time()
            seen += 1
            if seen == AGENT_WARMUP_SAMPLES:
                before, self_before = _remote(world, server), procs.self_cpu_s()
            elif seen > AGENT_WARMUP_SAMPLES:
                latencies.append((received - sample.time) * 1000)
                if len(latencies) == polls:
                    break
        client = (procs.self_cpu_s() - self_before) / polls * 1000
        remote = _per_poll_ms(before, _remote(world, server), polls)
    finally:
        await stream.aclose()
        await target.close()
    return {"latency_ms": summary(latencies), "client_cpu_ms": {"median": round(client, 2)}, "remote_cpu_ms": remote}


def measure(world: World, *, quick: bool) -> dict:
    """Every way on every server; figures per poll, and the ratios the goals name."""
    polls_slow_way = 3 if quick else 30
    polls_fast_way = 6 if quick else 60
    probe, probe_no_gpu = world.probe(), world.probe(gpus=False)
    out: dict = {"probe": probe}
    local = lambda p: (lambda _: ["bash", "-c", p])  # noqa: E731
    out["local_bash"] = manual(world, None, local(probe), polls_fast_way)
    out["local_bash_no_gpu"] = manual(world, None, local(probe_no_gpu), polls_fast_way)
    for server in ("clean", "slow"):
        ways = {
            "fresh_ssh": fresh_ssh(world, server, probe, polls_slow_way),
            "controlmaster": controlmaster(world, server, probe, polls_slow_way),
            "asyncssh_exec": asyncio.run(asyncssh_exec(world, server, probe, polls_slow_way)),
            "pulse_agent": asyncio.run(pulse_agent(world, server, polls_fast_way)),
            "pulse_agent_own_cadence": asyncio.run(pulse_agent(world, server, polls_fast_way, apps_every_s=None)),
            "fresh_ssh_no_gpu": fresh_ssh(world, server, probe_no_gpu, polls_slow_way),
            "pulse_agent_no_gpu": asyncio.run(pulse_agent(world, server, polls_fast_way, gpu_source="none")),
        }
        out[server] = ways
        out[server]["ratios"] = ratios(ways, out["local_bash"], out["local_bash_no_gpu"])
    return out


def _median(way: dict, key: str) -> float | None:
    value = way[key]
    return value if isinstance(value, (int, float)) else value.get("median")


def ratios(ways: dict, local: dict, local_no_gpu: dict) -> dict:
    agent, agent_ng, own = ways["pulse_agent"], ways["pulse_agent_no_gpu"], ways["pulse_agent_own_cadence"]
    return {
        "latency_speedup_vs_fresh_ssh": ratio(_median(ways["fresh_ssh"], "latency_ms"), _median(agent, "latency_ms")),
        "remote_cpu_ratio_vs_fresh_ssh": ratio(ways["fresh_ssh"]["remote_cpu_ms"], agent["remote_cpu_ms"]),
        "client_cpu_ratio_vs_fresh_ssh": ratio(_median(ways["fresh_ssh"], "client_cpu_ms"), _median(agent, "client_cpu_ms")),
        "latency_speedup_vs_controlmaster": ratio(_median(ways["controlmaster"], "latency_ms"), _median(agent, "latency_ms")),
        "latency_vs_local_bash": ratio(_median(agent, "latency_ms"), _median(local, "latency_ms"), 2),
        "own_cadence_latency_speedup_vs_fresh_ssh": ratio(_median(ways["fresh_ssh"], "latency_ms"), _median(own, "latency_ms")),
        "own_cadence_remote_cpu_ratio_vs_fresh_ssh": ratio(ways["fresh_ssh"]["remote_cpu_ms"], own["remote_cpu_ms"]),
        "no_gpu_latency_speedup_vs_fresh_ssh": ratio(
            _median(ways["fresh_ssh_no_gpu"], "latency_ms"), _median(agent_ng, "latency_ms")
        ),
        "no_gpu_remote_cpu_ratio_vs_fresh_ssh": ratio(ways["fresh_ssh_no_gpu"]["remote_cpu_ms"], agent_ng["remote_cpu_ms"]),
        "no_gpu_latency_vs_local_bash": ratio(_median(agent_ng, "latency_ms"), _median(local_no_gpu, "latency_ms"), 2),
    }
