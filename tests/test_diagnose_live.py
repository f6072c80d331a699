"""`pulse check --json` on real process trees, locally and over the real sshd: a torchrun-like
job whose rank 1 never reaches the all-reduce, and a DataLoader-like run whose workers hang
while an unrelated process keeps the (stand-in) GPU busy.

The tests run in a PID namespace of their own (scripts/test), so the agent's view is a container's,
and the stand-in GPU lists the run's processes as a driver does there (DRIVER_PIDS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.real_captures import HOST_PID_OFFSET
from tests.test_check import CAPTURED_GPU_FIELDS, H200, PROCS, Run, check, write_nvidia_smi  # noqa: F401  (fixture)
from tests.test_restart import procs  # noqa: F401  (fixture)

#: `nvidia-smi pmon -c 1 -s u` as a 550-series driver prints it: two header lines, then one row per process.
PMON_HEADER = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %    name \n"
)


#: The PID a driver lists for a process of a PID namespace, asked from inside it: its host PID (NVIDIA's
#: answer through the 5xx series: github.com/NVIDIA/nvidia-docker/issues/1483), which the namespace
#: does not share; or, as driver 580.159.04 did on the H200 (README, "Proof on a real GPU"), its PID there.
DRIVER_PIDS = {"host PIDs": lambda pid: pid + HOST_PID_OFFSET, "namespace PIDs": lambda pid: pid}


def shared_gpu_stand_in(folder: Path, run_pid: int, other_pid: int) -> Path:
    """An nvidia-smi for one H200 at 95 % in use, all of it by `other_pid`; the run's pid holds memory, idle."""
    gpu = dict(zip(CAPTURED_GPU_FIELDS, (H200 / "smi_query_gpu_busy.txt").read_text().strip().split(", ")))
    gpu["utilization.gpu"] = "95"
    uuid_ = gpu["uuid"]
    apps = [
        {"gpu_uuid": uuid_, "pid": str(other_pid), "used_memory": "30512", "process_name": "python3"},
        {"gpu_uuid": uuid_, "pid": str(run_pid), "used_memory": "21610", "process_name": "python3"},
    ]
    pmon = PMON_HEADER + (
        f"    0    {other_pid:>7}     C     95     41      -      -      -      -    python3        \n"
        f"    0    {run_pid:>7}     C      -      -      -      -      -      -    python3        \n"
    )
    return write_nvidia_smi(folder, gpu, apps, pmon)


def by_label(report: dict) -> dict[str, dict]:
    return {p["label"].split(" · ")[0]: p for p in report["processes"]}


def test_a_two_rank_hang_names_the_rank_not_in_the_all_reduce(procs, tmp_path, check):
    run = Run(procs, tmp_path, "torchrun", "--nproc_per_node", "2", str(PROCS / "straggler_rank.py"))
    run.wait_for_text("rank 0 step 5")
    run.wait_for_text("rank 1 step 5")
    run.wait_silent()
    status, report, _ = check(*run.flags)
    assert (status, report["verdict"]) == (1, "hung"), report["summary"]
    roles = by_label(report)
    assert set(roles) == {"launcher (torchrun)", "rank 0", "rank 1"}
    assert roles["rank 0"]["rank"] == 0 and roles["rank 1"]["rank"] == 1
    assert roles["rank 0"]["cpu_pct"] > 5.0  # spinning: busy by the CPU counter, yet waiting
    rank1 = roles["rank 1"]["pid"]
    assert report["summary"].startswith("rank 0 waits in all_reduce; rank 1 is not in it, in read_batch (straggler_rank.py:")
    assert f"rank 1 (pid {rank1}) stopped in read_batch (straggler_rank.py:" in "\n".join(report["evidence"])
    assert "rank 1 is the straggler" in report["evidence"]
    dumped = {s["pid"] for s in report["stacks"]}
    assert dumped == {roles["rank 0"]["pid"], rank1}  # every rank, never the launcher
    main0 = next(s for s in report["stacks"] if s["main"] and s["label"].startswith("rank 0"))
    assert (main0["collective"], main0["wait"]) == ("all_reduce", "NCCL collective")


@pytest.mark.parametrize("driver", sorted(DRIVER_PIDS))
def test_a_dataloader_hang_on_a_gpu_busy_with_another_job_is_hung(procs, tmp_path, check, driver):
    """Whose the GPU's use is goes unread in a PID namespace, but every process of the run waits: hung."""
    run = Run(procs, tmp_path, "loader_hang.py")
    other = procs.start([sys.executable, str(PROCS / "busy_buffered.py")], stdout=subprocess.DEVNULL)
    run.wait_for_text("waiting for the next batch")
    main = run.popen.pid
    listed = DRIVER_PIDS[driver]
    smi = shared_gpu_stand_in(tmp_path, listed(main), listed(other.pid))
    run.wait_silent()
    status, report, _ = check(*run.flags, nvidia_smi=smi)
    assert (status, report["verdict"]) == (1, "hung"), report["summary"]
    labels = sorted(p["label"] for p in report["processes"])
    main_label = "main" if driver == "host PIDs" else "main · GPU 0"  # a host PID names none of the run's
    assert labels == [main_label, f"worker of pid {main}", f"worker of pid {main}"]
    assert other.pid not in [p["pid"] for p in report["processes"]]
    evidence = "\n".join(report["evidence"])
    held = ", ".join(str(pid) for pid in sorted(map(listed, (main, other.pid))))
    unseen = f"GPU memory held by pid {held}: this PID namespace cannot see them (host PIDs)"
    assert (unseen in evidence) == (driver == "host PIDs")
    assert report["gpus"][0]["utilization_pct"] == 95.0
    assert report["summary"].startswith("the main thread waits on its DataLoader workers (loader_hang.py:")
    assert f"2 DataLoader workers of main (pid {main}) blocked in Dataset.__getitem__ (loader_hang.py:" in evidence
