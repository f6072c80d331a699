"""`pulse watch --slurm-job ID --restart-on hung`: the restart policy on a real Slurm job (issue 37's fleet item).

The job is tests/fleet/jobs/rank.py `stalls` under the test cluster (tests/fleet/conftest.py): it trains
for 5 s and then waits forever, idle, every time it runs, so the requeued job hangs again. The watch is
the real CLI, reaching the node through srun with the venv's py-spy; its alerts are appended to a file
by the `[alerts] command` sink.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from console.config import Config, RunConfig, TargetConfig
from console.diagnose import Verdict
from console.fleet.fleet import job_verdict
from console.fleet.slurm_text import parse_job
from console.journal.store import journal_path
from tests.fleet.conftest import Slurm
from tests.fleet.test_fleet_watch import pulse, scrape
from tests.fleet.test_slurm import batch_script, match
from tests.test_restart import wait_for


def policy_config(folder: Path, name: str) -> Path:
    """The job's watch on the default stall path (no `[stall] log_silent_s`: hung once its quiet passes its
    own rhythm's limit), restarted after 2 s more, at most once; alerts at once, to a file."""
    config = folder / "fleet.toml"
    config.write_text(
        f'audit_log = "{folder}/audit.jsonl"\n'
        f'[target]\nreach = "srun"\npy_spy = "{Path(sys.executable).parent / "py-spy"}"\n'
        f"[run]\nname = \"train\"\nmatch = '{match(name)}'\n"
        "[stall]\nsample_window_s = 0.5\n[gpus]\npoll_s = 0.5\n"
        "[alerts]\nhold_s = 0\nrecover_s = 0\nmin_interval_s = 0\nterminal = false\n"
        f'command = "cat >> {folder}/alerts.jsonl; echo >> {folder}/alerts.jsonl"\n'
        '[watch]\nrestart_on = ["hung"]\nmax_restarts = 1\nrestart_after = "2s"\n'
    )
    return config


def alerts(folder: Path) -> list[dict]:
    path = folder / "alerts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def slurm_job(slurm: Slurm, job_id: str):
    return parse_job(slurm.run("scontrol", "show", "job", "-o", job_id))


def read(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    done = pulse(*args, tmp_path=tmp_path)
    out, err = done.communicate(timeout=60)
    return subprocess.CompletedProcess(args, done.returncode, out, err)


def test_a_hung_job_is_requeued_once_and_the_next_hang_past_the_limit_is_alerted_and_left_alone(
    slurm: Slurm, tmp_path: Path
) -> None:
    job_id = slurm.submit(batch_script(tmp_path, "stalls", "stalls"))
    config = policy_config(tmp_path, "stalls")
    try:
        slurm.wait_running(job_id, output=tmp_path / f"stalls-{job_id}-{slurm.node}.out")
        started = time.monotonic()
        watch = pulse("watch", str(config), "--slurm-job", job_id, "--metrics", "127.0.0.1:0", tmp_path=tmp_path)
        try:
            said = watch.stderr.readline()
            assert f"pulse watch: Slurm job {job_id}: 1 nodes; journal " in said, said
            wait_for(lambda: time.sleep(0.2) or watch.poll() is not None
                     or any(a["event"] == "restart_limit" for a in alerts(tmp_path)), "the second hang to meet the limit", 90)
            assert watch.poll() is None, "the watch ended"
            took = time.monotonic() - started
            job = slurm_job(slurm, job_id)
            time.sleep(2.0)  # more verdicts: the hung job is left alone
            after = slurm_job(slurm, job_id)
            metrics = scrape(said.rsplit(" ", 1)[-1].strip())
        finally:
            watch.send_signal(signal.SIGTERM)
            out, err = watch.communicate(timeout=60)
    finally:
        slurm.cancel(job_id)
    assert watch.returncode == 0, err
    print(f"hang, requeue, hang again, limit: {took:.1f} s")
    # Requeued once through Slurm (the same ID runs again), then left alone.
    assert (job.restarts, job.state) == (1, "RUNNING") and (after.restarts, after.state) == (1, "RUNNING")

    # The restart went through `pulse restart --slurm-job ID --yes`'s path: its audit records, verified.
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    restarts = [r for r in audit if r["action"] == "fleet restart"]
    assert [r["record"] for r in restarts] == ["started", "finished"], restarts
    assert restarts[-1]["outcome"].startswith("ok"), restarts[-1]
    assert [s["step"] for s in restarts[-1]["steps"]] == ["lock", "stop", "wait", "start", "verify"]
    assert f"stop: scontrol requeue {job_id}" in out

    # Each restart is an alert with its outcome; the limit is one alert; the watch went on watching.
    events = [a["event"] for a in alerts(tmp_path)]
    assert events.count("restart") == 1 and events.count("restart_limit") == 1, events
    restart = next(a for a in alerts(tmp_path) if a["event"] == "restart")
    assert restart["verdict"] == "hung" and restart["run"] == "train"
    assert restart["summary"] == f"automatic restart: restarted: job {job_id}: the run is alive on 1 node(s)", restart
    limit = next(a for a in alerts(tmp_path) if a["event"] == "restart_limit")
    assert "1 automatic restart in the last 6h 00m already (max 1): not restarting; still watching" in limit["summary"]
    assert f"following job {job_id} on 1 node(s): {slurm.node}" in out

    # The evidence saved in the job's journal before the requeue: the job's verdict, every node's stacks, log, GPUs.
    journal = read("journal", str(config), "--slurm-job", job_id, "--json", tmp_path=tmp_path)
    assert journal.returncode == 0, journal.stderr
    policy = [e for e in json.loads(journal.stdout)["entries"] if e["kind"] == "policy"]
    assert [e["data"]["event"] for e in policy] == ["restart", "outcome", "limit"], policy
    saved = policy[0]["data"]
    assert (saved["verdict"], saved["job_id"]) == ("hung", job_id)
    assert saved["summary"].startswith(f"0/1 nodes healthy: hung on {slurm.node}: {slurm.node}: ")
    [node] = saved["nodes"]
    assert node["node"] == slurm.node and node["verdict"] == "hung" and node["processes"]
    assert any('thread "MainThread"' in line and "rank.py" in line for line in node["stacks"]), node["stacks"]
    assert node["log_tail"][-1] == "rank 0 step 25 tokens/s: 1000.0 loss 1.50", node["log_tail"]
    assert node["gpus"], node
    assert policy[1]["data"]["outcome"] == "restarted"
    assert {"verdict", "action", "alert", "watch"} <= {e["kind"] for e in json.loads(journal.stdout)["entries"]}

    text = read("journal", str(config), "--slurm-job", job_id, tmp_path=tmp_path).stdout
    assert "automatic restart 1 of at most 1 in 6h 00m: evidence saved (1 node(s), " in text
    assert f"restarting as pulse restart --slurm-job {job_id} --yes" in text
    assert f"node {slurm.node}:" in text and "stacks:" in text and "last log lines:" in text
    report = read("report", str(config), "--slurm-job", job_id, tmp_path=tmp_path).stdout
    assert report.startswith(f"# Pulse report: train on Slurm job {job_id} on this machine\n")
    assert "- **Automatic restarts:** 1" in report and "## Automatic restarts and the evidence each saved" in report

    # The metrics count the job's restarts and alerts on its own series (its node label empty: absent, to Prometheus).
    job_series = (("host", restart["host"]), ("node", ""), ("run", "train"))
    assert metrics[("pulse_restarts_total", job_series)] == 1
    assert metrics[("pulse_alerts_total", job_series)] == len(alerts(tmp_path))
    assert metrics[("pulse_verdict", (*job_series, ("verdict", "hung")))] == 1
    assert not [key for key in metrics if key[0] == "pulse_restarts_total" and ("node", slurm.node) in key[1]]


def test_the_jobs_verdict_is_its_worst_nodes_said_of_the_job() -> None:
    """What the policy acts on: one node hung and one unreachable is hung (unknown is the lesser), said where."""
    hung = Verdict("hung", "the run is alive and idle; quiet 40s", ["log silent 40s"], "dump the stacks", "dump")
    lost = Verdict("unknown", "node unreachable: timed out", ["timed out"], "check the node")
    healthy = Verdict("healthy", "the run is alive and its log progresses", ["log grew"], "")
    verdict = job_verdict([("gpu01", healthy), ("gpu02", hung), ("gpu03", lost)])
    assert (verdict.name, verdict.step) == ("hung", "dump")
    assert verdict.summary == "1/3 nodes healthy: hung on gpu02: gpu02: the run is alive and idle; quiet 40s"
    assert verdict.evidence == ["gpu02: log silent 40s"]
    assert job_verdict([("gpu01", healthy)]).summary == "1/1 nodes healthy"


def test_a_slurm_jobs_journal_is_the_jobs_on_the_host_slurm_is_asked_on(tmp_path: Path, monkeypatch) -> None:
    """`pulse journal --slurm-job ID` finds the watch's journal whatever else the config names of the run."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    watched = journal_path(Config(target=TargetConfig(slurm_job="42", reach="srun"), run=RunConfig(name="train", match="x")))
    assert watched == journal_path(Config(target=TargetConfig(slurm_job="42")))
    others = {journal_path(Config(target=TargetConfig(slurm_job="43"))),
              journal_path(Config(target=TargetConfig(slurm_job="42", host="login1"))),
              journal_path(Config(target=TargetConfig(host="login1"), run=RunConfig(name="slurm-42")))}
    assert watched not in others and len(others) == 3
    assert watched.name.startswith("local-slurm-42-") and watched.parent == tmp_path / "pulse" / "journal"
