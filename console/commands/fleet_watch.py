"""`pulse watch --slurm-job ID --metrics HOST:PORT` (or --hosts): a fleet's nodes as Prometheus series.

The fleet console's Fleet (a Monitor per node) is judged once a second, as its screen is, and each
node's snapshot published with a `node` label beside `run` and `host` (console/journal/metrics.py);
each node's verdict change is printed. A fleet's watch keeps no journal and sends no alerts (both are
kept for one machine) and has no restart policy: that would go through the fleet's requeue or
resubmit (console/fleet/fleet_actions.py), with a look at every node's stacks first; it is not built.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from console.config import Config
from console.fleet.fleet import Fleet, FleetError
from console.journal.metrics import MetricsEndpoint, SnapshotCollector, snapshot_of
from console.targets import fleet_size

EXIT_OK = 0
EXIT_BAD = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_fleet_watch(config: Config, args: argparse.Namespace) -> int:
    """Serve the fleet's per-node metrics until SIGTERM or SIGINT (exit 0); a fleet or an address that
    cannot be had is one line, exit 2."""
    return asyncio.run(_fleet_watch(config))


def _error(text: str) -> int:
    print(f"pulse watch: {text}", file=sys.stderr)
    return EXIT_BAD


async def _fleet_watch(config: Config) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    collector = SnapshotCollector()
    endpoint = MetricsEndpoint(collector)
    assert config.watch.metrics is not None  # console.targets.fleet_refusal asks for it
    try:
        host, port = endpoint.start(*config.watch.metrics)
    except OSError as exc:
        where = ":".join(map(str, config.watch.metrics))
        return _error(f"--metrics {where}: cannot listen there ({exc.strerror or exc}); give a free HOST:PORT")
    try:
        try:
            fleet = await Fleet.open(config)
        except FleetError as exc:
            return _error(str(exc))
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        print(f"pulse watch: {fleet_size(config.target)}: {len(fleet.nodes)} nodes; metrics on http://{host}:{port}/metrics",
              file=sys.stderr, flush=True)
        try:
            await fleet.start()
            await _publish_until(stop, fleet, config, collector)
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            await fleet.close()
    finally:
        endpoint.stop()
    return EXIT_OK


async def _publish_until(stop: asyncio.Event, fleet: Fleet, config: Config, collector: SnapshotCollector) -> None:
    shown: dict[str, tuple[str | None, float | None]] = {node.name: (None, None) for node in fleet.nodes}
    while not stop.is_set():
        fleet.refresh()
        snapshots = []
        for node in fleet.nodes:
            name = node.verdict.name if node.verdict is not None else None
            if name != shown[node.name][0]:
                shown[node.name] = (name, time.time())
                if node.verdict is not None:
                    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {node.name}: {name}: {node.verdict.summary}", flush=True)
            labels = (("run", config.run.name), ("host", node.config.target.host or node.name), ("node", node.name))
            snapshots.append(snapshot_of(node.state, labels, verdict=name, verdict_since=shown[node.name][1]))
        collector.publish(snapshots)
        try:
            async with asyncio.timeout(1.0):
                await stop.wait()
        except TimeoutError:
            pass
