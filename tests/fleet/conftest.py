"""A real single-node Slurm for the fleet tests, started once per session by scripts/slurm-up."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Long enough for the job to be scheduled (~2 s here) and its first lines written.
JOB_START_TIMEOUT_S = 30.0


@dataclass
class Slurm:
    """The running test cluster: its folder, SLURM_CONF, and the one node (this machine)."""

    dir: Path
    conf: str
    node: str

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": self.conf}

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def submit(self, script: Path) -> str:
        return self.run("sbatch", "--parsable", str(script)).strip().split(";")[0]

    def state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T").strip()

    def wait_running(self, job_id: str, *, output: Path | None = None) -> None:
        """Until the job runs (and, when given, its output file has a line)."""
        deadline = time.monotonic() + JOB_START_TIMEOUT_S
        while True:
            running = self.state(job_id) == "RUNNING"
            if running and (output is None or (output.exists() and output.stat().st_size > 0)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not running with output after {JOB_START_TIMEOUT_S:g} s")
            time.sleep(0.1)

    def cancel(self, job_id: str) -> None:
        subprocess.run(["scancel", job_id], env=self.env(), capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    """slurmctld, slurmd and munged from Debian's packages, all state in a throwaway folder."""
    if shutil.which("slurmctld") is None and os.geteuid() != 0:
        pytest.skip("Slurm is not installed and installing it needs root (scripts/setup --test)")
    folder = tmp_path_factory.mktemp("slurm")
    # Each pytest-xdist worker runs a cluster of its own on this one machine, and a job's processes are
    # told by their SLURM_JOB_ID: two clusters counting from 1 would give a job the other's processes.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    env = {**os.environ, "PULSE_SLURM_FIRST_JOB_ID": str(1 + 100_000 * worker)}
    started = subprocess.run([str(ROOT / "scripts/slurm-up"), str(folder)], capture_output=True, text=True, timeout=600,
                             env=env)
    if started.returncode != 0:
        subprocess.run([str(ROOT / "scripts/slurm-down"), str(folder)], capture_output=True, timeout=60)
        pytest.fail(f"scripts/slurm-up failed: {started.stderr.strip()[-500:]}")
    conf = started.stdout.strip().rpartition("=")[2]
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf  # LocalTarget's commands (scontrol, srun) inherit it
    try:
        yield Slurm(folder, conf, socket.gethostname().split(".")[0])
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        subprocess.run([str(ROOT / "scripts/slurm-down"), str(folder)], capture_output=True, timeout=60)
