"""Issue 11 rows 1-3: a command that names other targets never acts on this machine instead.

Every command against every kind of target: this machine and `--host` act there (the tests of
check, dump, restart and warmup cover those); `--hosts` and `--slurm-job` act on those nodes or
refuse in one line with exit 2. Each refusal runs in its own PID namespace beside a live run
that the wrong fallback would have signalled, dumped or relaunched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from console.actions.audit import AuditLog
from console.config import TargetConfig
from console.remote.connect import make_target
from console.remote.target import TargetError
from tests.fleet.conftest import Slurm, slurm  # noqa: F401  (slurm is a fixture)
from tests.fleet.test_slurm import batch_script, match
from tests.safety.namespace import HEALTHY, REPO, in_namespace, pulse_beside_a_run

PY_SPY = str(Path(sys.executable).parent / "py-spy")


def run_argv(tag: str) -> list[str]:
    return [sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.05"]


def run_flags(tmp_path: Path, tag: str) -> list[str]:
    return ["--match", tag, "--launch", " ".join(run_argv(tag)), "--log", str(tmp_path / "train.log")]


def warmup_config(tmp_path: Path, marks: Path, extra: str = "") -> Path:
    config = tmp_path / "warm.toml"
    config.write_text(
        f'audit_log = "{tmp_path}/audit.jsonl"\n{extra}'
        f'[warmup]\ncommand = "echo warm {{gpu}} {{seq_len}} >> {marks}"\ngpus = [0]\nseq_lens = [128]\n'
    )
    return config


def audit_entries(tmp_path: Path) -> list[dict]:
    return AuditLog(tmp_path / "audit.jsonl").entries() + AuditLog(tmp_path / ".local/state/pulse/audit.jsonl").entries()


# -- refused: nothing on this machine is touched -----------------------------------------------


@pytest.mark.parametrize("where", ["flag", "config"])
def test_restart_on_a_host_list_refuses_and_the_local_run_lives(tmp_path: Path, where: str) -> None:
    """Row 1: `restart --hosts nodeA,nodeB --match … --launch … --yes` stopped the local run; now exit 2, one line."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    if where == "flag":
        target = ["--hosts", "nodeA,nodeB"]
    else:
        config = tmp_path / "fleet.toml"
        config.write_text('[target]\nhosts = ["nodeA", "nodeB"]\n')
        target = [str(config)]
    argv = ["restart", *target, *run_flags(tmp_path, tag), "--yes"]
    result = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=argv, run=run_argv(tag))
    assert result["rc"] == 2
    assert result["err"] == (
        "restart: the target is 2 hosts (nodeA, nodeB): Pulse restarts several nodes only through Slurm "
        "(--slurm-job ID); restart one node with --host NODE\n"
    )
    assert result["out"] == ""
    assert result["run_alive"]
    assert audit_entries(tmp_path) == []


@pytest.mark.parametrize("command", ["check", "dump", "restart", "warmup"])
def test_a_slurm_job_that_does_not_run_is_refused_not_run_locally(slurm: Slurm, tmp_path: Path, command: str) -> None:
    """Rows 2-3: `dump --slurm-job 123` dumped the local process, warmup planned 'on local:'; now one line, exit 2."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    marks = tmp_path / "warm.marks"
    argv = [command, str(warmup_config(tmp_path, marks)), "--slurm-job", "999999", *run_flags(tmp_path, tag)]
    argv += ["--yes"] * (command in ("restart", "warmup"))
    result = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=argv, run=run_argv(tag))
    assert result["rc"] == 2, result["err"]
    assert result["err"].count("\n") == 1 and "does not know job 999999" in result["err"]
    assert str(result["run_pid"]) not in result["out"] and "local" not in result["out"]
    assert result["run_alive"]
    assert not marks.exists()
    assert audit_entries(tmp_path) == []


def test_dump_of_one_pid_on_a_fleet_is_refused(tmp_path: Path) -> None:
    """A PID means one machine: with a host list it would be the wrong machine's PID."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    argv = ["dump", "--hosts", "nodeA,nodeB", "--pid", "1"]
    result = in_namespace(pulse_beside_a_run, folder=str(tmp_path), argv=argv, run=run_argv(tag))
    assert result["rc"] == 2
    assert result["err"] == (
        "dump: --pid names a process on one machine, but the target is 2 hosts (nodeA, nodeB): give --host NODE with --pid\n"
    )
    assert result["out"] == "" and result["run_alive"]


def test_classify_takes_no_target(tmp_path: Path) -> None:
    """classify reads a file or standard input and acts on no machine: a target flag is a usage error."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "console.cli", "classify", "--hosts", "a,b"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "pulse classify: error: unrecognized arguments: --hosts"


@pytest.mark.parametrize("target", [TargetConfig(hosts=("a", "b")), TargetConfig(slurm_job="123"),
                                    TargetConfig(host="login", slurm_job="123")])
def test_no_single_machine_target_stands_in_for_a_fleet(target: TargetConfig) -> None:
    """The console (and every one-host action) builds its target here: a fleet is refused, never made local."""
    with pytest.raises(TargetError, match="names a fleet"):
        make_target(target)


# -- acted on: every node, over the real sshd --------------------------------------------------


def two_node_config(sshd, tmp_path: Path, body: str) -> Path:
    """[target] hosts = the test sshd under two names, as two nodes."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(sshd.ssh_config.read_text().replace(f"Host {sshd.alias}", f"Host {sshd.alias} node-b", 1))
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'audit_log = "{tmp_path}/audit.jsonl"\n'
        f'[target]\nhosts = ["{sshd.alias}", "node-b"]\nssh_config = "{ssh_config}"\n'
        f'known_hosts = "{sshd.known_hosts}"\npy_spy = "{PY_SPY}"\n{body}'
    )
    return config


def cli(*argv: str, home: Path) -> dict:
    """`pulse ARGV` here (nothing it does signals a process): its exit code and output, as a scene reports them."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "console.cli", *argv], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    return {"rc": done.returncode, "out": done.stdout, "err": done.stderr}


@pytest.fixture
def node_run(tmp_path: Path):
    """The run the nodes see (both names reach this machine): a real process, ended by PID."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(run_argv(tag), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    yield tag, process.pid
    process.kill()
    process.wait()


def test_dump_on_a_host_list_dumps_the_run_on_every_node(sshd, tmp_path: Path, node_run) -> None:
    tag, pid = node_run
    config = two_node_config(sshd, tmp_path, f'[run]\nmatch = "{tag}"\n')
    result = cli("dump", str(config), "--json", home=tmp_path)
    assert result["rc"] == 0, result["err"]
    nodes = json.loads(result["out"])
    assert [n["node"] for n in nodes] == [sshd.alias, "node-b"]
    assert all(n["error"] is None and [p["pid"] for p in n["processes"]] == [pid] for n in nodes)


def test_warmup_on_a_host_list_runs_on_every_node_and_audits_each(sshd, tmp_path: Path) -> None:
    """Row 3, acted on: one warmup per node (the same machine under two names: two marks), one audit entry each."""
    marks = tmp_path / "warm.marks"
    config = two_node_config(sshd, tmp_path, "")
    config.write_text(config.read_text() + warmup_config(tmp_path, marks).read_text().split("\n", 1)[1])
    result = cli("warmup", str(config), "--yes", home=tmp_path)
    assert result["rc"] == 0, result["out"] + result["err"]
    assert result["out"].startswith(f"warmup on 2 node(s): {sshd.alias}, node-b:\n")
    assert marks.read_text() == "warm 0 128\nwarm 0 128\n"
    assert sorted(e["host"] for e in AuditLog(tmp_path / "audit.jsonl").entries()) == sorted(
        [sshd.alias, "node-b"]
    )


def test_check_on_a_host_list_looks_at_every_node(sshd, tmp_path: Path, node_run) -> None:
    tag, _ = node_run
    config = two_node_config(sshd, tmp_path, f'[run]\nmatch = "{tag}"\n')
    result = cli("check", str(config), "--json", home=tmp_path)
    assert result["rc"] in (0, 1), result["err"]
    assert sorted(n["node"] for n in json.loads(result["out"])["nodes"]) == sorted([sshd.alias, "node-b"])


@pytest.fixture
def slurm_run(slurm: Slurm, tmp_path: Path):
    """A running one-node Slurm job whose rank prints progress; cancelled through Slurm."""
    job_id = slurm.submit(batch_script(tmp_path, "safety", "healthy"))
    slurm.wait_running(job_id, output=tmp_path / f"safety-{job_id}-{slurm.node}.out")
    yield job_id
    slurm.cancel(job_id)


def test_dump_and_warmup_on_a_slurm_job_act_on_its_node(slurm: Slurm, slurm_run: str, tmp_path: Path) -> None:
    """Rows 2-3, acted on: the job's rank is dumped and the warmup runs in the job's allocation (srun), audited there."""
    marks = tmp_path / "warm.marks"
    config = warmup_config(tmp_path, marks, f'[target]\nreach = "srun"\npy_spy = "{PY_SPY}"\n'
                                            f"[run]\nmatch = '{match('safety')}'\n")
    env = {**slurm.env(), "HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    dump = subprocess.run([sys.executable, "-m", "console.cli", "dump", str(config), "--slurm-job", slurm_run, "--json"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert dump.returncode == 0, dump.stderr
    [node] = json.loads(dump.stdout)
    assert node["node"] == slurm.node and node["error"] is None
    assert "rank.py" in " ".join(f["file"] for g in node["processes"][0]["groups"] for f in g["frames"])
    warm = subprocess.run([sys.executable, "-m", "console.cli", "warmup", str(config), "--slurm-job", slurm_run, "--yes"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert warm.stdout.startswith(f"warmup on 1 node(s): {slurm.node}:\n")
    assert marks.read_text() == "warm 0 128\n"
    [entry] = AuditLog(tmp_path / "audit.jsonl").entries()
    assert entry["action"] == "warmup" and entry["host"] == f"{slurm.node} (srun {slurm_run})"


# -- one machine: this one, or --host --------------------------------------------------------


def one_machine_config(sshd, tmp_path: Path, where: str, tag: str, marks: Path) -> Path:
    """The run's config on this machine, or on the test sshd (`--host` in the config, as the flag would be)."""
    target = "" if where == "local" else (
        f'[target]\nhost = "{sshd.alias}"\nssh_config = "{sshd.ssh_config}"\nknown_hosts = "{sshd.known_hosts}"\n'
    )
    target += f'py_spy = "{PY_SPY}"\n' if target else f'[target]\npy_spy = "{PY_SPY}"\n'
    return warmup_config(tmp_path, marks, f"{target}[run]\nmatch = '{tag}'\n")


@pytest.mark.parametrize("where", ["local", "host"])
@pytest.mark.parametrize("command", ["check", "dump", "warmup"])
def test_one_machine_commands_act_on_that_machine(sshd, tmp_path: Path, node_run, where: str, command: str) -> None:
    """The other half of the matrix: this machine, or the one --host names (restart: tests/test_restart.py)."""
    tag, pid = node_run
    marks = tmp_path / "warm.marks"
    label = "local" if where == "local" else sshd.alias
    config = str(one_machine_config(sshd, tmp_path, where, tag, marks))
    if command == "check":
        result = cli("check", config, "--json", home=tmp_path)
        assert result["rc"] in (0, 1), result["err"]
        report = json.loads(result["out"])
        assert report["target"] == label and [p["pid"] for p in report["processes"]] == [pid]
    elif command == "dump":
        result = cli("dump", config, "--json", home=tmp_path)
        assert result["rc"] == 0, result["err"]
        assert [d["pid"] for d in json.loads(result["out"])] == [pid]
    else:
        result = cli("warmup", config, "--yes", home=tmp_path)
        assert result["rc"] == 0, result["out"] + result["err"]
        assert result["out"].startswith(f"on {label}:\n") and marks.read_text() == "warm 0 128\n"
        assert [e["host"] for e in AuditLog(tmp_path / "audit.jsonl").entries()] == [label]


def test_warmup_on_a_host_list_with_an_unwritable_audit_log_is_refused_up_front(sshd, tmp_path: Path) -> None:
    """As on one machine: no node is touched unless the audit log can be written, or --no-audit says so."""
    marks = tmp_path / "warm.marks"
    config = two_node_config(sshd, tmp_path, "")
    config.write_text(config.read_text() + warmup_config(tmp_path, marks).read_text().split("\n", 1)[1])
    (tmp_path / "audit.jsonl").mkdir()
    refused = cli("warmup", str(config), "--yes", home=tmp_path)
    assert refused["rc"] == 2 and refused["out"] == ""
    assert refused["err"].startswith(f"warmup: audit log {tmp_path / 'audit.jsonl'} cannot be written (")
    assert not marks.exists()
    unaudited = cli("warmup", str(config), "--yes", "--no-audit", home=tmp_path)
    assert unaudited["rc"] == 0, unaudited
    assert marks.read_text() == "warm 0 128\nwarm 0 128\n"
