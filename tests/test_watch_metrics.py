"""`pulse watch --metrics`'s endpoint (console/journal/metrics.py): the real prometheus_client HTTP server
on 127.0.0.1, scraped over HTTP and read back with prometheus_client's parser. The whole watch, on a
real run that hangs and is restarted, is scraped in tests/safety/test_watch_restart.py."""

from __future__ import annotations

import threading
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from console.journal.metrics import MetricsEndpoint, SnapshotCollector, snapshot_of
from console.model import ConnectionState, ConnectionStatus, GpuReading, LogLine, Sample
from console.observe.lines import classify_line
from console.state import RunState

LABELS = (("run", "train"), ("host", "gpu-box"))


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def a_state() -> RunState:
    state = RunState()
    lines = ["step 41/100 | loss 1.93 | 9.5K tok/s", "step 42/100 | loss 1.91 | 9.8K tok/s"]
    state.add_lines([LogLine(n + 1, text, classify_line(text), time=float(n)) for n, text in enumerate(lines)])
    gpus = (GpuReading(0, "GPU-0", "H200", 81000, 143771, 97.0, 64.0, 612.5, 700.0),
            GpuReading(1, "GPU-1", "H200", None, 143771, None, 40.0, None, 700.0))  # what nvidia-smi gave as [N/A]
    state.add_sample(Sample(time=100.0, gpus=gpus))
    state.set_connection(ConnectionState(ConnectionStatus.RECONNECTING, "connection lost"))
    return state


def test_the_endpoint_serves_the_published_snapshot_and_leaves_out_what_was_not_read():
    collector = SnapshotCollector(clock=lambda: 1_000_030.0)
    endpoint = MetricsEndpoint(collector)
    host, port = endpoint.start("127.0.0.1", 0)
    try:
        url = f"http://{host}:{port}/metrics"
        first = scrape(url)
        assert ("pulse_verdict", ()) not in first and not any(v for v in first.values())  # nothing published yet
        collector.publish([snapshot_of(a_state(), LABELS, verdict="slow", verdict_since=1_000_000.0, restarts=2, alerts=5)])
        seen = scrape(url)
    finally:
        endpoint.stop()
    run = (("host", "gpu-box"), ("run", "train"))

    def at(name: str, **more: str) -> float:
        return seen[(name, tuple(sorted((*run, *more.items()))))]

    assert at("pulse_verdict", verdict="slow") == 1 and at("pulse_verdict", verdict="healthy") == 0
    assert at("pulse_verdict_age_seconds") == 30
    assert at("pulse_throughput", metric="tokens_per_s") == 9800 and at("pulse_loss") == 1.91
    assert at("pulse_step") == 42 and at("pulse_total_steps") == 100
    assert at("pulse_gpu_utilization_percent", gpu="0") == 97 and at("pulse_gpu_power_watts", gpu="0") == 612.5
    assert at("pulse_gpu_memory_used_bytes", gpu="0") == 81000 * 2**20
    assert at("pulse_gpu_temperature_celsius", gpu="1") == 40
    assert not any(name in ("pulse_gpu_utilization_percent", "pulse_gpu_memory_used_bytes", "pulse_gpu_power_watts")
                   and ("gpu", "1") in labels for name, labels in seen)  # [N/A] is left out, never 0
    assert at("pulse_link_state", state="reconnecting") == 1 and at("pulse_link_state", state="connected") == 0
    assert at("pulse_restarts_total") == 2 and at("pulse_alerts_total") == 5


def test_a_fleet_is_one_series_per_node_and_scrapes_never_wait_on_the_loop():
    collector = SnapshotCollector()
    endpoint = MetricsEndpoint(collector)
    host, port = endpoint.start("127.0.0.1", 0)
    state = a_state()
    errors: list[BaseException] = []

    def scrape_often() -> None:
        try:
            for _ in range(20):
                scrape(f"http://{host}:{port}/")
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    try:
        scraper = threading.Thread(target=scrape_often)
        scraper.start()
        for n in range(200):  # the loop publishing while the server's thread reads
            collector.publish([snapshot_of(state, (*LABELS, ("node", f"node{i}")), verdict="healthy",
                                           verdict_since=float(n)) for i in range(3)])
        scraper.join(timeout=30)
        seen = scrape(f"http://{host}:{port}/metrics")
    finally:
        endpoint.stop()
    assert not errors
    nodes = {dict(labels)["node"] for name, labels in seen if name == "pulse_step"}
    assert nodes == {"node0", "node1", "node2"}
