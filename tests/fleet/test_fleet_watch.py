"""`pulse watch --hosts A,B --metrics HOST:PORT`: a fleet's nodes as Prometheus series, over the real sshd.

The real CLI on two nodes: the test sshd, where a real process writes throughput lines, and an alias
whose port nothing listens on. Scraped over HTTP and read with prometheus_client's parser.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fleet.test_fleet_hosts import fleet_toml, writer  # noqa: F401 - the writer fixture

ROOT = Path(__file__).resolve().parents[2]


def fleet_config(sshd, tmp_path: Path, log: Path) -> Path:
    config = tmp_path / "fleet.toml"
    config.write_text(fleet_toml(sshd, tmp_path, log, name="train"))
    return config


def pulse(*args: str, tmp_path: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.Popen([sys.executable, "-m", "console.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_fleet_watch_serves_each_nodes_series(sshd, tmp_path: Path, writer: Path) -> None:  # noqa: F811
    watch = pulse("watch", str(fleet_config(sshd, tmp_path, writer)), "--metrics", "127.0.0.1:0", tmp_path=tmp_path)
    try:
        said = watch.stderr.readline()
        assert said.startswith("pulse watch: 2 hosts (") and " 2 nodes; metrics on http://127.0.0.1:" in said, said
        url = said.rsplit(" ", 1)[-1].strip()

        def key(name: str, node: str, **more: str) -> tuple:
            return name, tuple(sorted({"run": "train", "host": node, "node": node, **more}.items()))

        rate = key("pulse_throughput", sshd.alias, metric="tokens_per_s")
        unreachable = key("pulse_verdict", "pulse-dead", verdict="unknown")
        seen: dict = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = scrape(url)
            if seen.get(rate) and seen.get(unreachable):
                break
            time.sleep(0.2)
        assert seen[rate] == 1500
        assert seen[key("pulse_link_state", sshd.alias, state="connected")] == 1
        assert seen[unreachable] == 1
        assert seen[key("pulse_link_state", "pulse-dead", state="connected")] == 0
    finally:
        watch.send_signal(signal.SIGTERM)
        out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    assert "pulse-dead: unknown: " in out


@pytest.mark.parametrize(
    ("target", "args", "message"),
    [
        (["--hosts", "a,b"], [],
         "pulse: watch: the target is 2 hosts (a, b): the run journal and alerts are kept for one machine or a Slurm"
         " job; a host list's watch serves each node's metrics: give --metrics HOST:PORT, or --host NODE"),
        (["--hosts", "a,b"], ["--metrics", ":0", "--restart-on", "hung", "--max-restarts", "1"],
         "pulse: watch: the target is 2 hosts (a, b): the restart policy restarts a fleet only through Slurm (its"
         " requeue or resubmit): give --slurm-job ID, or --host NODE, or drop --restart-on"),
        (["--slurm-job", "4242"], ["--restart-on", "hung", "--max-restarts", "1", "--read-only"],
         "pulse watch: --read-only: the restart policy (--restart-on, [watch] restart_on) restarts the run; drop one of them"),
        (["--slurm-job", "4242"], ["--restart-on", "hung"], "pulse watch: --restart-on: needs --max-restarts N (or [watch]"
                                                           " max_restarts): how many automatic restarts a window allows"),
        (["--hosts", "a,b"], ["journal"], "pulse: journal: the target is 2 hosts (a, b): the run journal is kept for one"
                                          " machine or a Slurm job; give --host NODE, or --slurm-job ID"),
    ],
)
def test_what_a_fleet_watch_cannot_do_is_one_line(tmp_path: Path, target, args, message) -> None:
    """Refused before any fleet is formed or journal opened: no Slurm is asked (job 4242 need not exist)."""
    command = ["journal", *target, "--match", "x"] if args == ["journal"] else ["watch", *target, "--match", "x", *args]
    watch = pulse(*command, tmp_path=tmp_path)
    out, err = watch.communicate(timeout=30)
    assert watch.returncode == 2 and err.splitlines() == [message.removeprefix("pulse: ")], err
    assert not (tmp_path / "state").exists()
