"""`pulse watch --metrics HOST:PORT`: the run as Prometheus metrics, served by prometheus_client.

The watch loop publishes a `RunSnapshot` (plain data, built from its RunState and its verdict) once
a second; the collector reads only the newest published tuple of snapshots (one reference, replaced
whole), so the HTTP server's thread never reads the live state the loop writes. Seconds since the
verdict changed are counted at the scrape, from the snapshot's time of the change.

Every metric is labelled `run` and `host`, and, for a fleet's nodes, `node`. A Slurm job's watch
also publishes the job itself, labelled `run` and `host` (where Slurm is asked), `node` empty: its
verdict (the nodes' worst), the automatic restarts of the job and the alerts; a node has no counters
of its own (the job is what is restarted and alerted on):

| metric | type | more labels | what |
| --- | --- | --- | --- |
| pulse_verdict | gauge | verdict | 1 for the current verdict, 0 for every other (console.verdicts.VERDICTS) |
| pulse_verdict_age_seconds | gauge | | seconds since the verdict last changed |
| pulse_throughput | gauge | metric | the newest throughput the log gave: tokens_per_s, samples_per_s or it_per_s |
| pulse_loss | gauge | | the newest loss the log gave |
| pulse_step, pulse_total_steps | gauge | | the step, and the steps in all, as the log gave them |
| pulse_gpu_utilization_percent | gauge | gpu | from the newest sample |
| pulse_gpu_memory_used_bytes, pulse_gpu_memory_total_bytes | gauge | gpu | |
| pulse_gpu_power_watts, pulse_gpu_temperature_celsius | gauge | gpu | |
| pulse_link_state | gauge | state | 1 for the link's state now (connecting, connected, reconnecting, failed) |
| pulse_restarts_total | counter | | automatic restarts this watch tried (a job's: its requeues or resubmits) |
| pulse_alerts_total | counter | | alerts this watch sent |

A figure Pulse has not read (no log line with a loss yet, a GPU that says N/A) is left out, never 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from console.verdicts import VERDICTS
from console.model import ConnectionStatus, GpuReading
from console.state import RATE_METRICS, RunState

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """What the endpoint shows of one run (or one node of a fleet) as of one second of the watch loop."""

    labels: tuple[tuple[str, str], ...]
    """(name, value) of the labels every metric of it carries: run, host[, node]."""
    verdict: str | None = None
    verdict_since: float | None = None
    """Wall time the verdict last changed."""
    throughput: tuple[tuple[str, float], ...] = ()
    loss: float | None = None
    step: int | None = None
    total_steps: int | None = None
    gpus: tuple[GpuReading, ...] = ()
    link: str | None = None
    """The link's state; None for what has no link of its own (a Slurm job: each node has one)."""
    restarts: int | None = None
    """Automatic restarts, and alerts, of what the watch acts on; None for a fleet's node (its job counts them)."""
    alerts: int | None = None


def snapshot_of(
    state: RunState, labels: Iterable[tuple[str, str]], *, verdict: str | None, verdict_since: float | None,
    restarts: int | None = None, alerts: int | None = None,
) -> RunSnapshot:
    """The snapshot of `state` now: the newest value of each series, the newest sample's GPUs, the link."""
    latest = state.latest
    return RunSnapshot(
        labels=tuple(labels),
        verdict=verdict,
        verdict_since=verdict_since,
        throughput=tuple((name, value) for name in RATE_METRICS if (value := state.latest_value(name)) is not None),
        loss=state.latest_value("loss"),
        step=state.step,
        total_steps=state.total_steps,
        gpus=latest.gpus if latest is not None else (),
        link=state.connection.status.value,
        restarts=restarts,
        alerts=alerts,
    )


class SnapshotCollector:
    """A prometheus_client collector over the snapshots the watch loop publishes."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._snapshots: tuple[RunSnapshot, ...] = ()

    def publish(self, snapshots: Iterable[RunSnapshot]) -> None:
        """From the watch loop: what the next scrape shows (the whole tuple replaced at once)."""
        self._snapshots = tuple(snapshots)

    def collect(self) -> Iterator[Metric]:
        """From the server's thread: the metric families of the newest snapshots."""
        snapshots = self._snapshots
        now = self.clock()
        names = sorted({name for s in snapshots for name, _ in s.labels}, key=["run", "host", "node"].index)

        def family(kind: type, name: str, text: str, *more: str):
            return kind(name, text, labels=[*names, *more])

        def values(s: RunSnapshot) -> list[str]:
            given = dict(s.labels)
            return [given.get(name, "") for name in names]

        verdict = family(GaugeMetricFamily, "pulse_verdict", "1 for the run's current verdict, 0 for the others", "verdict")
        age = family(GaugeMetricFamily, "pulse_verdict_age_seconds", "Seconds since the verdict last changed")
        rate = family(GaugeMetricFamily, "pulse_throughput", "The newest throughput the log gave", "metric")
        loss = family(GaugeMetricFamily, "pulse_loss", "The newest loss the log gave")
        step = family(GaugeMetricFamily, "pulse_step", "The step the log gave last")
        total = family(GaugeMetricFamily, "pulse_total_steps", "The steps in all, as the log gave them")
        gpu = {
            "utilization_pct": family(GaugeMetricFamily, "pulse_gpu_utilization_percent", "GPU utilisation", "gpu"),
            "memory_used_mib": family(GaugeMetricFamily, "pulse_gpu_memory_used_bytes", "GPU memory used", "gpu"),
            "memory_total_mib": family(GaugeMetricFamily, "pulse_gpu_memory_total_bytes", "GPU memory in all", "gpu"),
            "power_w": family(GaugeMetricFamily, "pulse_gpu_power_watts", "GPU power draw", "gpu"),
            "temperature_c": family(GaugeMetricFamily, "pulse_gpu_temperature_celsius", "GPU temperature", "gpu"),
        }
        link = family(GaugeMetricFamily, "pulse_link_state", "1 for the state of the link to the target now", "state")
        restarts = family(CounterMetricFamily, "pulse_restarts", "Automatic restarts this watch tried")
        alerts = family(CounterMetricFamily, "pulse_alerts", "Alerts this watch sent")
        for s in snapshots:
            v = values(s)
            for name in VERDICTS:
                verdict.add_metric([*v, name], 1.0 if name == s.verdict else 0.0)
            if s.verdict_since is not None:
                age.add_metric(v, max(0.0, now - s.verdict_since))
            for metric, value in s.throughput:
                rate.add_metric([*v, metric], value)
            for figure, shown in ((loss, s.loss), (step, s.step), (total, s.total_steps)):
                if shown is not None:
                    figure.add_metric(v, float(shown))
            for g in s.gpus:
                for field, metric in gpu.items():
                    value = getattr(g, field)
                    if value is not None:
                        metric.add_metric([*v, str(g.index)], float(value) * (MIB if field.endswith("_mib") else 1))
            if s.link is not None:
                for state in ConnectionStatus:
                    link.add_metric([*v, state.value], 1.0 if state.value == s.link else 0.0)
            for counter, count in ((restarts, s.restarts), (alerts, s.alerts)):
                if count is not None:
                    counter.add_metric(v, float(count))
        yield from (verdict, age, rate, loss, step, total, *gpu.values(), link, restarts, alerts)


class MetricsEndpoint:
    """prometheus_client's HTTP server for one collector, in a daemon thread of its own."""

    def __init__(self, collector: SnapshotCollector) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (port 0: a free one); the address bound. OSError when it cannot listen there."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None


class MetricsError(Exception):
    """The endpoint cannot listen where it was asked to: one line naming the address."""


def serve_metrics(collector: SnapshotCollector, address: tuple[str, int]) -> tuple[MetricsEndpoint, str]:
    """An endpoint serving `collector` at `address` (`--metrics HOST:PORT`), and its URL; MetricsError when it cannot listen there."""
    endpoint = MetricsEndpoint(collector)
    try:
        host, port = endpoint.start(*address)
    except OSError as exc:
        given = ":".join(map(str, address))
        raise MetricsError(f"--metrics {given}: cannot listen there ({exc.strerror or exc}); give a free HOST:PORT") from None
    return endpoint, f"http://{host}:{port}/metrics"
