#!/usr/bin/env python3
"""Scale simulation of a fleet: N simulated nodes (in-process SSH servers on 127.0.0.1), polled at 1 Hz.

    .venv/bin/python scripts/bench_fleet.py [--nodes 64] [--seconds 20] [--json]

A child process hosts the nodes: one asyncssh server per node on its own 127.0.0.1 port
(console.demo.server, which runs each exec request as a real process), and one real writer
process appending throughput lines to a log that every node follows. This process is the
console: a Fleet of N nodes from `[target] hosts`, a Monitor per node (one connection, one
sampling agent, one log follower each), verdicts refreshed every second as the fleet screen
does. It measures once every node is sampling (its first sample in) and one sampling period has
passed, or once start-up runs past its limit (0.3 s a node, 120 s at least), as far as it got (the
figures say how far: `start`; `all_nodes_sampling_after_s` is null, and no goal is met, when start-up
did not finish).
Reported: the console's CPU (% of one core) and RSS, in total and per node, while it
polls; the time to form the fleet's verdict from what the monitors hold (the fleet screen's
1 s refresh, and `d`: a fleet diagnosis that starts nothing new on a monitored node); and the
time of a fresh fleet diagnosis as `pulse check` does it (a new agent on every node at once;
here all N nodes' agents share this machine's cores, unlike real nodes). Goal: 256 nodes under 10 % of
one core, fleet verdict under 5 s. The nodes' own agents run in the child and are not counted.

A fleet paces itself (console/fleet/fleet.py): past 64 nodes each node is sampled less often, so
that the console takes at most 64 samples a second, and a node's log is read at most once a
second and sent as often as the node is sampled, in one message; `--unpaced` measures the fleet as it was before: every node at 1 Hz, each
write of its log a message. The simulated nodes are asyncssh servers, which send an
SSH_MSG_IGNORE before every packet: the console decrypts two packets per message where an
OpenSSH node sends one, so these figures are on the high side.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WRITER = "import time\nwhile True:\n    print('step 1 tokens/s: 1000.0 loss 2.0', flush=True)\n    time.sleep(0.5)\n"


async def serve(count: int, folder: Path) -> None:
    """The nodes: `count` SSH servers; writes ssh_config and known_hosts naming node01.., then waits for stdin EOF."""
    from console.demo.server import DemoSshServer

    # A home of their own: the nodes' login shells skip this machine's ~/.bashrc (pyenv init and its
    # rehash lock, which a node killed mid-rehash would leave behind for every other shell here).
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home)}
    servers = []
    for index in range(count):
        server = DemoSshServer(folder / f"node{index + 1:02d}", env)
        server.dir.mkdir(parents=True, exist_ok=True)
        await server.start()
        servers.append(server)
    config, known = [], []
    for index, server in enumerate(servers):
        config.append(
            f"Host node{index + 1:02d}\n  HostName 127.0.0.1\n  Port {server.port}\n  User {server.user}\n"
            f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n"
        )
        known.append(server.known_hosts.read_text())
    (folder / "ssh_config").write_text("".join(config))
    (folder / "known_hosts").write_text("".join(known))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for server in servers:
        await server.close()


#: How long start-up may take a node: every node's agents start on this one machine, behind one
#: process's SSH servers, and past 64 nodes a node is sampled less often (1,024 nodes: every 16 s).
START_S_PER_NODE = 0.3
#: A fresh fleet diagnosis starts an agent on every node at once, all on this machine's cores: past
#: this (--fresh-limit) it is reported as not finished rather than holding the figures already measured.
FRESH_DIAGNOSIS_LIMIT_S = 120.0


def start_report(nodes) -> dict:
    """How far start-up got: nodes sampling (one sample or more) and sampled twice, connections by
    status, the commonest reasons an agent was lost, and the open-file limit (a node takes a
    connection here and several descriptors in the nodes' process)."""
    status = collections.Counter(n.state.connection.status.name for n in nodes)
    lost = collections.Counter(n.state.agent_lost for n in nodes if n.state.agent_lost)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "nodes_sampling": sum(len(n.state.samples) >= 1 for n in nodes),
        "nodes_sampled_twice": sum(len(n.state.samples) >= 2 for n in nodes),
        "connections": dict(status),
        "agents_lost": "; ".join(f"{k} nodes: {why[:160]}" for why, k in lost.most_common(3)) or "none lost",
        "open_files": f"{soft}/{hard}",
    }


def restart_reasons(nodes) -> str:
    """The commonest reasons the nodes' samplers stopped and were restarted (their `sampler`
    events), with node names and figures made alike so that one cause counts once."""
    reasons = collections.Counter(
        re.sub(r"\d+(?:\.\d+)?", "N", event.text.removeprefix("sampling stopped: ").rpartition("; restarting in")[0])
        for n in nodes
        for event in n.state.events
        if event.kind == "sampler" and event.text.startswith("sampling stopped: ")
    )
    return "; ".join(f"{k}: {why[:200]}" for why, k in reasons.most_common(3)) or "none"


def raise_open_files() -> None:
    """Open files up to the hard limit: a node takes descriptors on both sides."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def phase(text: str) -> None:
    print(f"bench_fleet: {text}", file=sys.stderr, flush=True)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def console(count: int, seconds: float, folder: Path, log: Path, fresh_limit_s: float = FRESH_DIAGNOSIS_LIMIT_S) -> dict:
    from console.config import parse_config
    from console.fleet.fleet import Fleet
    from console.fleet.fleet_diagnose import diagnose_fleet

    hosts = ", ".join(f'"node{i + 1:02d}"' for i in range(count))
    config = parse_config(
        f'[target]\nhosts = [{hosts}]\nssh_config = "{folder}/ssh_config"\nknown_hosts = "{folder}/known_hosts"\n'
        f'[run]\nlog = "{log}"\nmatch = \'bench_writer[.]py\'\n[gpus]\npoll_s = 1.0\n'
    )
    rss_before = rss_mib()
    fleet = await Fleet.open(config)
    connected = time.monotonic()
    phase(f"{count} nodes: starting a monitor on each")
    await fleet.start()
    try:
        # Every node sampling (its agent started and read), then one sampling period to settle: a
        # large fleet's nodes are sampled every `count / 64` s, so a second sample can be a period away.
        start_limit_s = max(120.0, START_S_PER_NODE * count)
        while sum(len(n.state.samples) >= 1 for n in fleet.nodes) < count and time.monotonic() - connected < start_limit_s:
            await asyncio.sleep(0.2)
        ready_s = time.monotonic() - connected
        at_start = start_report(fleet.nodes)
        complete = at_start["nodes_sampling"] == count
        phase(f"{at_start['nodes_sampling']} of {count} nodes sampling after {ready_s:.1f} s"
              f"{'' if complete else ' (start-up limit reached: measured as it is)'}; measuring {seconds:g} s")
        await asyncio.sleep(max(2.0, fleet.nodes[0].config.gpus.poll_s))
        cpu0, wall0 = time.process_time(), time.monotonic()
        received0 = [n.state.samples_received for n in fleet.nodes]
        samples0 = sum(received0)
        refresh_s = []
        while time.monotonic() - wall0 < seconds:
            started = time.perf_counter()
            fleet.refresh()
            fleet.rows(time.monotonic())
            fleet.summary()
            refresh_s.append(time.perf_counter() - started)
            await asyncio.sleep(1.0)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        samples = sum(n.state.samples_received for n in fleet.nodes) - samples0
        rss = rss_mib()
        summary = fleet.summary()
        restarts = sum(n.monitor.sampler_restarts for n in fleet.nodes if n.monitor)
        restarted_because = restart_reasons(fleet.nodes)
        phase("a fleet diagnosis from the monitors' samples")
        started = time.perf_counter()
        diagnosis = await diagnose_fleet(fleet.nodes, window_s=1.0, dump_ranks="never")
        diagnose_s = time.perf_counter() - started
        phase("a fresh fleet diagnosis (as pulse check: a new agent on every node)")
        started, fresh_cpu0 = time.perf_counter(), time.process_time()
        # Not wait_for: it waits for the cancelled work to end, and a cancelled channel read can
        # take minutes (fleet._bounded); the work left over ends with the process.
        fresh = asyncio.ensure_future(diagnose_fleet([replace(n, monitor=None) for n in fleet.nodes], window_s=1.0, dump_ranks="never"))
        await asyncio.wait({fresh}, timeout=fresh_limit_s)
        fresh_s = time.perf_counter() - started
        # The console's own share of it: near fresh_s, the console is what bounds it; far below, the nodes are.
        fresh_cpu_s = time.process_time() - fresh_cpu0
        fresh_headline = fresh.result().headline() if fresh.done() else None
        if not fresh.done():
            fresh.cancel()
    finally:
        phase("closing")
        await fleet.close()
    cpu_pct = 100.0 * cpu / wall
    pacing = fleet.nodes[0].monitor.log_pacing if fleet.nodes[0].monitor else None
    return {
        "nodes": count,
        "node_poll_s": fleet.nodes[0].config.gpus.poll_s,
        "node_log_read_s": pacing.read_s if pacing else None,
        "node_log_send_s": pacing.send_s if pacing else None,
        "measured_s": round(wall, 1),
        "all_nodes_sampling_after_s": round(ready_s, 2) if complete else None,
        "start": {**at_start, "after_s": round(ready_s, 2), "limit_s": round(start_limit_s)},
        "nodes_sampled_in_window": sum(n.state.samples_received > before for n, before in zip(fleet.nodes, received0)),
        "samples_per_s": round(samples / wall, 1),
        "sampler_restarts": restarts,
        "sampler_restarted_because": restarted_because,
        "console_cpu_pct_of_one_core": round(cpu_pct, 2),
        "console_cpu_pct_per_node": round(cpu_pct / count, 3),
        "console_rss_mib": round(rss, 1),
        "console_rss_mib_per_node": round((rss - rss_before) / count, 2),
        "fleet_verdict_from_held_samples_ms": round(1000 * max(refresh_s), 2),
        "fleet_diagnosis_s": round(diagnose_s, 2),
        "fleet_diagnosis_headline": diagnosis.headline(),
        "fresh_diagnosis_s": round(fresh_s, 2) if fresh_headline is not None else None,
        "fresh_diagnosis_headline": fresh_headline or f"not finished in {fresh_limit_s:g} s",
        "fresh_diagnosis_console_cpu_s": round(fresh_cpu_s, 2),
        "fleet_verdict": summary.worst,
        "nodes_healthy": f"{summary.healthy}/{summary.nodes}",
        "goal_cpu_under_10pct": complete and cpu_pct < 10.0,  # a fleet only part started costs less: not met
        "goal_verdict_under_5s": diagnose_s < 5.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--unpaced", action="store_true",
        help="every node at [gpus] poll_s and each write of its log a message, however large the fleet (as before pacing)",
    )
    parser.add_argument("--fresh-limit", type=float, default=FRESH_DIAGNOSIS_LIMIT_S, metavar="SECONDS",
                        help=f"how long the fresh fleet diagnosis may take before it is reported unfinished (default {FRESH_DIAGNOSIS_LIMIT_S:g})")
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    raise_open_files()
    if args.serve:
        asyncio.run(serve(args.nodes, Path(args.serve)))
        return 0
    with tempfile.TemporaryDirectory(prefix="pulse-bench-fleet-") as tmp:
        folder = Path(tmp)
        script = folder / "bench_writer.py"
        script.write_text(WRITER)
        log = folder / "train.log"
        with open(log, "ab") as out:
            writer = subprocess.Popen([sys.executable, "-u", str(script)], stdout=out, stderr=subprocess.STDOUT)
        nodes = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(folder), "--nodes", str(args.nodes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            if nodes.stdout.readline().strip() != "ready":
                print("bench_fleet: the simulated nodes did not start", file=sys.stderr)
                return 1
            if args.unpaced:
                from console.fleet import fleet

                fleet.FLEET_SAMPLES_PER_S, fleet.NODE_LOG_READ_S = float("inf"), None
            # Not asyncio.run: its teardown would wait on tasks that Fleet.close gave up on.
            result = asyncio.new_event_loop().run_until_complete(console(args.nodes, args.seconds, folder, log, args.fresh_limit))
        finally:
            nodes.stdin.close()
            try:
                nodes.wait(timeout=30)
            except subprocess.TimeoutExpired:
                nodes.kill()
                nodes.wait()
            writer.kill()
            writer.wait()
    result["host"] = f"{os.cpu_count()} cores, max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:40} {value}")
    return 0 if result["goal_cpu_under_10pct"] and result["goal_verdict_under_5s"] else 1


if __name__ == "__main__":
    sys.exit(main())
