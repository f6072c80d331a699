"""Fleet against a real Slurm: sbatch a scenario job, then `pulse check --slurm-job ID` and restart through Slurm."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.fleet.fleet import row_of
from console.fleet.slurm import SlurmClient
from console.fleet.slurm_text import expand_filename
from console.remote.target import LocalTarget
from tests.fleet.conftest import ROOT, Slurm

RANK = Path(__file__).parent / "jobs" / "rank.py"


def match(name: str) -> str:
    """The ranks of job `name` only (jobs share the one node): srun's and the agent's command lines start otherwise."""
    return rf"^\S*python3 -u \S*rank\.py \w+ {name}$"


def batch_script(folder: Path, name: str, mode: str, tasks: int = 1) -> Path:
    script = folder / f"{name}.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name={name}\n"
        f"#SBATCH --output={folder}/{name}-%j-%N.out\n"
        f"#SBATCH --ntasks={tasks} --overcommit\n"
        f"srun python3 -u {RANK} {mode} {name}\n"
    )
    return script


def pulse(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def healthy_job(slurm: Slurm, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("healthy")
    job_id = slurm.submit(batch_script(folder, "healthy", "healthy"))
    output = folder / f"healthy-{job_id}-{slurm.node}.out"
    slurm.wait_running(job_id, output=output)
    yield job_id, output, folder
    slurm.cancel(job_id)


def ssh_config_for_node(sshd, node: str, folder: Path) -> Path:
    """The test sshd's client config, answering to the Slurm node's name as well."""
    text = sshd.ssh_config.read_text().replace(f"Host {sshd.alias}", f"Host {sshd.alias} {node}", 1)
    path = folder / "ssh_config"
    path.write_text(text)
    return path


def test_check_over_srun_finds_the_node_processes_and_log(slurm: Slurm, healthy_job) -> None:
    """`pulse check --slurm-job` reads the node and the log pattern from Slurm and samples the node through srun."""
    job_id, output, _ = healthy_job
    done = pulse("check", "--slurm-job", job_id, "--reach", "srun", "--match", match("healthy"), "--json", env=slurm.env())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "healthy"
    assert report["job"]["state"] == "RUNNING" and report["job"]["nodes"] == slurm.node
    assert (report["nodes_total"], report["nodes_healthy"]) == (1, 1)
    node = report["nodes"][0]
    assert node["node"] == slurm.node and node["target"] == f"{slurm.node} (srun {job_id})"
    assert [p["cmdline"].split()[-3:] for p in node["processes"]] == [[str(RANK), "healthy", "healthy"]]
    assert node["log"]["path"] == str(output) and node["log"]["growth_bytes"] > 0
    assert node["throughput"]["current"] == 1000.0


def test_check_over_ssh_reaches_the_node_by_its_name(slurm: Slurm, healthy_job, sshd, tmp_path: Path) -> None:
    """The same job with the node reached over SSH by its Slurm name (~/.ssh/config maps it)."""
    job_id, output, _ = healthy_job
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'[target]\nssh_config = "{ssh_config_for_node(sshd, slurm.node, tmp_path)}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n[run]\nmatch = \'{match("healthy")}\'\n'
    )
    done = pulse("check", str(config), "--slurm-job", job_id, "--json", env=slurm.env())
    assert done.returncode == 0, done.stderr
    node = json.loads(done.stdout)["nodes"][0]
    assert node["target"] == slurm.node and node["verdict"] == "healthy"
    assert node["log"]["path"] == str(output)
    assert len(node["processes"]) == 1


async def test_scontrol_output_is_read_into_the_job(slurm: Slurm, healthy_job) -> None:
    """The real `scontrol show job -o` line: node list, output pattern, state; the pattern names the real file."""
    job_id, output, folder = healthy_job
    target = LocalTarget()
    client = SlurmClient(target)
    job = await client.job(job_id)
    assert (job.job_id, job.name, job.state, job.batch, job.requeue) == (job_id, "healthy", "RUNNING", True, True)
    assert job.stdout == f"{folder}/healthy-{job_id}-%N.out"  # Slurm fills %j itself, leaves %N
    assert await client.hostnames(job.nodes) == [slurm.node]
    assert expand_filename(job.stdout, job, node=slurm.node) == str(output)
    assert job.num_tasks == 1 and job.elapsed_s >= 0


def check_stuck_job(slurm: Slurm, folder: Path, name: str, mode: str, tasks: int, *, match_ranks: bool) -> dict:
    """Submit a job whose ranks stop, wait until every rank has started and the log is silent, then
    `pulse check --json` it over srun with py-spy (the venv's, named the way a config would: a login
    shell sets its own PATH); the job is cancelled after."""
    job_id = slurm.submit(batch_script(folder, name, mode, tasks=tasks))
    output = folder / f"{name}-{job_id}-{slurm.node}.out"
    try:
        slurm.wait_running(job_id, output=output)
        deadline = time.monotonic() + 20
        while output.read_text().count("started") < tasks and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # silent for longer than --stall-after
        config = folder / "fleet.toml"
        py_spy = Path(sys.executable).parent / "py-spy"
        run = f"[run]\nmatch = '{match(name)}'\n" if match_ranks else ""  # without: the job is the run
        config.write_text(f'[target]\nreach = "srun"\npy_spy = "{py_spy}"\n{run}')
        done = pulse("check", str(config), "--slurm-job", job_id, "--stall-after", "1", "--json", env=slurm.env())
    finally:
        slurm.cancel(job_id)
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout)


def test_hung_job_ranks_are_grouped_by_stack(slurm: Slurm, tmp_path: Path) -> None:
    """Three ranks hang: two wait on a queue (same stack), one in its data loader; py-spy on every rank says so."""
    report = check_stuck_job(slurm, tmp_path, "hang", "hang", 3, match_ranks=True)
    assert report["verdict"] == "hung", report["nodes"][0]["evidence"]
    assert len(report["nodes"][0]["processes"]) == 3
    groups = report["stack_groups"]
    assert groups, report["stack_lines"]
    assert [g["count"] for g in groups] == [2, 1]
    assert groups[0]["wait"] == "queue get" and "wait_for_peers (rank.py" in groups[0]["where"]
    assert "load_batch (rank.py" in groups[1]["where"]
    assert report["stack_lines"][0].startswith("2 ranks wait on queue get in ")
    assert report["stack_lines"][1].startswith(f"rank 2 ({slurm.node}, local 2) runs in load_batch (rank.py")
    assert sorted(rank for g in groups for rank in g["ranks"]) == [f"rank {i} ({slurm.node}, local {i})" for i in range(3)]


def test_two_task_straggler_is_hung_and_named_by_its_slurm_rank(slurm: Slurm, tmp_path: Path) -> None:
    """Rank 0 spins in its all-reduce while rank 1 sits in its data loader: hung, rank 1 named, from the ranks' stacks."""
    report = check_stuck_job(slurm, tmp_path, "straggle", "straggler", 2, match_ranks=False)
    node = report["nodes"][0]
    assert report["verdict"] == "hung", node["evidence"]
    assert "rank 1 is the straggler" in node["evidence"]
    assert report["stack_lines"][-1] == f"rank 1 ({slurm.node}, local 1) is the straggler"
    roles = sorted(p["role"] for p in node["processes"])
    assert roles == ["launcher", "launcher", "rank", "rank", "shell"]  # srun twice, the batch script's shell


def test_two_jobs_matching_one_regex_each_see_only_their_own(slurm: Slurm, healthy_job, tmp_path: Path) -> None:
    """Two jobs run rank.py at once; `--match 'rank\\.py'` matches both, yet each job's check holds only its own."""
    job_id, _, _ = healthy_job
    other = slurm.submit(batch_script(tmp_path, "other", "healthy"))
    try:
        slurm.wait_running(other, output=tmp_path / f"other-{other}-{slurm.node}.out")
        reports = {
            (job, name, how): json.loads(
                pulse("check", "--slurm-job", job, "--reach", "srun", *how, "--json", env=slurm.env()).stdout
            )
            for job, name in ((job_id, "healthy"), (other, "other"))
            for how in ((), ("--match", r"rank\.py"))
        }
    finally:
        slurm.cancel(other)
    for (job, name, how), report in reports.items():
        processes = report["nodes"][0]["processes"]
        mine = [p for p in processes if p["role"] != "shell"]  # the batch script's shell names its spool file
        assert mine and all(p["cmdline"].endswith(f"rank.py healthy {name}") for p in mine), (job, how, processes)
        assert [p["label"] for p in processes if p["role"] == "rank"] == ["rank 0"]
        assert {p["label"] for p in processes if p["role"] == "launcher"} == {"launcher (srun)"}
        assert report["verdict"] == "healthy"


async def test_resubmit_that_never_starts_training_fails_verify(slurm: Slurm, healthy_job, tmp_path: Path) -> None:
    """The new job only sleeps while another job's rank.py (same pattern) runs on the node: verify fails."""
    from console.config import Config, RunConfig, TargetConfig
    from console.fleet.fleet_actions import execute_fleet_restart, plan_fleet_restart

    never = tmp_path / "never.sbatch"
    never.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/never-%j.out\necho preparing\nsleep 600\n")
    job_id = slurm.submit(batch_script(tmp_path, "before", "healthy"))
    slurm.wait_running(job_id)
    config = Config(
        target=TargetConfig(slurm_job=job_id, reach="srun"), run=RunConfig(match=r"rank\.py", launch=f"sbatch {never}")
    )
    client = SlurmClient(LocalTarget())
    plan = await plan_fleet_restart(client, config, job_id)
    events = [e async for e in execute_fleet_restart(client, config, plan, verify_timeout_s=3, poll_s=0.3, audit=False)]
    new_ids = [e.data["job_id"] for e in events if getattr(e, "step", "") == "submit" and "job_id" in e.data]
    for ident in new_ids:
        slurm.cancel(ident)
    verify = [e for e in events if getattr(e, "step", "") == "verify"][-1]
    assert verify.status.value == "failed", verify
    assert f"{slurm.node}: no process of the job's run" in verify.detail


def test_restart_by_requeue_is_verified_on_the_node(slurm: Slurm, tmp_path: Path) -> None:
    """`pulse restart --slurm-job` requeues the job through Slurm, waits for it to run again and finds the run."""
    job_id = slurm.submit(batch_script(tmp_path, "requeue", "healthy"))
    slurm.wait_running(job_id)
    audit = tmp_path / "audit.jsonl"
    config = tmp_path / "fleet.toml"
    config.write_text(f'audit_log = "{audit}"\n[target]\nreach = "srun"\n[run]\nmatch = \'{match("requeue")}\'\n')
    try:
        done = pulse("restart", str(config), "--slurm-job", job_id, "--yes", env=slurm.env())
        restarts = slurm.run("scontrol", "show", "job", "-o", job_id)
    finally:
        slurm.cancel(job_id)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stop: scontrol requeue {job_id}" in done.stdout
    assert "[ ok ] verify:" in done.stdout
    assert " Restarts=1 " in restarts and "JobState=RUNNING" in restarts
    entry = json.loads(audit.read_text().splitlines()[-1])
    assert entry["action"] == "fleet restart" and entry["outcome"].startswith("ok")
    assert [s["step"] for s in entry["steps"]] == ["lock", "stop", "wait", "start", "verify"]


async def test_a_job_whose_restart_lock_is_held_is_not_restarted(slurm: Slurm, healthy_job, tmp_path: Path) -> None:
    """Another restart of the job (a watch, a person) holds its lock: the restart fails at its lock step, naming
    the holder, and asks nothing of Slurm (the job keeps running, never requeued)."""
    import asyncio

    from console.fleet.fleet_actions import job_lock_file
    from console.observe.remote_process import take_lock

    job_id, _, _ = healthy_job
    config = tmp_path / "fleet.toml"
    config.write_text(f'audit_log = "{tmp_path}/audit.jsonl"\n[target]\nreach = "srun"\n[run]\nmatch = \'{match("healthy")}\'\n')
    owner = {"what": "restart", "host": "login2", "user": "operator", "pid": 4242}
    lock = await take_lock(LocalTarget(), job_lock_file(job_id), owner)
    try:
        done = await asyncio.to_thread(pulse, "restart", str(config), "--slurm-job", job_id, "--yes", env=slurm.env())
    finally:
        await lock.release()
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"[FAIL] lock: another restart of job {job_id} holds its lock " in done.stdout
    assert "by Pulse PID 4242 on login2 (user operator)" in done.stdout and "; nothing done" in done.stdout
    shown = slurm.run("scontrol", "show", "job", "-o", job_id)
    assert " Restarts=0 " in shown and "JobState=RUNNING" in shown
    entry = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert entry["action"] == "fleet restart" and [s["step"] for s in entry["steps"]] == ["lock"]


def test_restart_by_resubmit_cancels_and_submits(slurm: Slurm, tmp_path: Path) -> None:
    """With [run] launch = "sbatch …", the old job is cancelled and a new one is submitted and verified."""
    script = batch_script(tmp_path, "resubmit", "healthy")
    job_id = slurm.submit(script)
    slurm.wait_running(job_id)
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'audit_log = "{tmp_path}/audit.jsonl"\n[target]\nreach = "srun"\n'
        f'[run]\nmatch = \'{match("resubmit")}\'\nlaunch = "sbatch {script}"\n'
    )
    done = pulse("restart", str(config), "--slurm-job", job_id, "--yes", env=slurm.env())
    new_ids = [line.rsplit(" ", 1)[1] for line in done.stdout.splitlines() if "[ ok ] submit: new job" in line]
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"stop: scancel {job_id}" in done.stdout
        assert len(new_ids) == 1 and new_ids[0] != job_id
        assert "JobState=CANCELLED" in slurm.run("scontrol", "show", "job", "-o", job_id)
        assert slurm.state(new_ids[0]) == "RUNNING"
    finally:
        for ident in new_ids:
            slurm.cancel(ident)


def test_unknown_job_is_one_line(slurm: Slurm) -> None:
    """A job Slurm does not know: exit 2 and one line saying so."""
    done = pulse("check", "--slurm-job", "999999", "--match", "x", env=slurm.env())
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "does not know job 999999" in done.stderr


async def test_the_fleet_asks_slurm_again_for_the_job_state(slurm: Slurm, healthy_job) -> None:
    """The fleet header's state and elapsed time come from Slurm on a timer, not once at start."""
    import asyncio

    from console.config import Config, RunConfig, TargetConfig
    from console.fleet.fleet import Fleet

    job_id, _, _ = healthy_job
    config = Config(target=TargetConfig(slurm_job=job_id, reach="srun"), run=RunConfig(match=match("healthy")))
    fleet = await Fleet.open(config)
    try:
        first = fleet.job.elapsed_s
        await asyncio.sleep(2.2)
        job = await fleet.refresh_job()
        assert job.state == "RUNNING" and job.elapsed_s >= first + 2
        assert fleet.summary().job is job
    finally:
        await fleet.close()


async def test_console_follows_a_resubmitted_job(slurm: Slurm, tmp_path: Path) -> None:
    """R resubmits: the old job's node is lost at once, the console switches to the new job and keeps the old ID."""
    from console.config import Config, RunConfig, TargetConfig
    from console.ui.dialogs.action_screen import ActionScreen
    from console.ui.screens.fleet_screen import FleetApp
    from tests.fleet.test_fleet_screen import wait_for

    script = batch_script(tmp_path, "follow", "healthy")
    job_id = slurm.submit(script)
    slurm.wait_running(job_id)
    config = Config(
        target=TargetConfig(slurm_job=job_id, reach="srun"),
        run=RunConfig(launch=f"sbatch {script}"),
        audit_log=str(tmp_path / "audit.jsonl"),
    )
    app = FleetApp(config)
    new_ids: list[str] = []
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_for(pilot, lambda: app.fleet is not None and app.fleet.nodes[0].state.latest is not None, tries=600)
            old_node = app.fleet.nodes[0]
            await pilot.press("R")
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", tries=600)
            await pilot.press("y")
            await wait_for(pilot, lambda: old_node.state.agent_lost is not None, tries=600)
            lost_row = row_of(old_node, 0.0)  # the node's agent ended with the job: lost, none of its old processes
            assert lost_row.connection == "lost" and lost_row.ranks == 0 and lost_row.rate is None
            await wait_for(pilot, lambda: app.fleet is not None and app.fleet.job.job_id != job_id, tries=1200)
            new_ids.append(app.fleet.job.job_id)
            await wait_for(pilot, lambda: isinstance(app.screen, ActionScreen) and app.screen.done, tries=1200)
            assert app.screen.ok, app.screen.query_one("#steps").render()
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.fleet.nodes[0].state.latest is not None, tries=600)
            app.repaint()
            header = str(app.fleet_screen.query_one("#fleet-header").render())
            assert f"job {new_ids[0]} follow · RUNNING" in header and f"(was {job_id})" in header
            processes = app.fleet.nodes[0].state.latest.processes
            assert [p.label for p in processes if p.role == "rank"] == ["rank 0"]
    finally:
        slurm.cancel(job_id)
        for ident in new_ids:
            slurm.cancel(ident)


def test_refused_ssh_to_the_node_suggests_srun(slurm: Slurm, healthy_job, tmp_path: Path) -> None:
    """`pulse check --slurm-job ID` alone reaches nodes by SSH; a node that refuses it is unreachable, with --reach srun named."""
    from tests.fleet.test_fleet_hosts import closed_port

    job_id, _, _ = healthy_job
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host {slurm.node}\n  HostName 127.0.0.1\n  Port {closed_port()}\n  BatchMode yes\n")
    done = pulse("check", "--slurm-job", job_id, "--ssh-config", str(ssh_config), "--json", env=slurm.env())
    assert done.returncode == 2, done.stderr
    node = json.loads(done.stdout)["nodes"][0]
    assert node["verdict"] == "unknown" and node["error"]
    assert "--reach srun" in node["summary"]
