"""Labelling a run's process tree: launcher, rank N, worker of rank N, with its GPUs."""

from __future__ import annotations

import pytest

from console.model import GpuProcess, GpuReading, ProcessReading
from console.observe.roles import label_processes, launcher_name, python_run


def proc(pid: int, ppid: int, cmdline: str, **env: str) -> ProcessReading:
    return ProcessReading(
        pid=pid, ppid=ppid, state="S", elapsed_s=10.0, threads=4, rss_mib=100.0, cpu_pct=0.0,
        cmdline=cmdline, run_env=tuple(sorted(env.items())),
    )


def gpu(index: int, *pids: int) -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "NVIDIA H200", 1000, 143771, 0.0, 30.0, 100.0, 700.0,
                      tuple(GpuProcess(pid, 500) for pid in pids))


@pytest.mark.parametrize(
    "cmdline, launcher",
    [
        ("/usr/bin/python3 /opt/venv/bin/torchrun --nproc_per_node 2 train.py", "torchrun"),
        ("python -m torch.distributed.run --nproc_per_node=8 train.py", "torch.distributed.run"),
        ("python3 -m torch.distributed.launch --use_env train.py", "torch.distributed.launch"),
        ("/usr/bin/python3 /usr/local/bin/deepspeed --num_gpus 8 train.py --deepspeed ds.json", "deepspeed"),
        ("python -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMF19 train.py", "deepspeed.launcher.launch"),
        ("/opt/venv/bin/python /opt/venv/bin/accelerate launch --num_processes 2 train.py", "accelerate launch"),
        ("mpirun -np 16 python train.py", "mpirun"),
        ("srun --ntasks-per-node 8 python train.py", "srun"),
        ("python -u train.py --launcher torchrun", None),
        ("python -m pytest tests", None),
    ],
)
def test_launchers_by_the_program_they_run(cmdline, launcher):
    assert launcher_name(cmdline) == launcher


def test_a_torchrun_tree_is_launcher_ranks_and_their_workers_with_their_gpus():
    tree = (
        proc(100, 1, "/usr/bin/python3 /opt/venv/bin/torchrun --nproc_per_node 2 train.py"),
        proc(101, 100, "/usr/bin/python3 -u train.py", RANK="0", LOCAL_RANK="0", WORLD_SIZE="2"),
        proc(102, 100, "/usr/bin/python3 -u train.py", RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"),
        proc(103, 102, "/usr/bin/python3 -u train.py", RANK="1", LOCAL_RANK="1", WORLD_SIZE="2"),
        proc(104, 101, "/usr/bin/python3 -m torch._inductor.compile_worker --pool=8", RANK="0"),
    )
    out = {p.pid: p for p in label_processes(tree, (gpu(0, 101, 710), gpu(1, 102)))}
    assert [(out[pid].role, out[pid].rank, out[pid].label) for pid in (100, 101, 102, 103, 104)] == [
        ("launcher", None, "launcher (torchrun)"),
        ("rank", 0, "rank 0 · GPU 0"),
        ("rank", 1, "rank 1 · GPU 1"),
        ("worker", 1, "worker of rank 1"),
        ("child", 0, "child of rank 0"),
    ]
    assert out[101].gpus == (0,)


def test_a_single_process_run_is_main_with_spawned_workers():
    tree = (
        proc(700, 1, "bash -c python train.py"),
        proc(711, 700, "python train.py --bs 8"),
        proc(712, 711, "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) --multiprocessing-fork"),
        proc(713, 711, "python train.py --bs 8"),
    )
    out = {p.pid: p for p in label_processes(tree, (gpu(0, 711),))}
    assert [out[pid].label for pid in (700, 711, 712, 713)] == ["shell", "main · GPU 0", "worker of pid 711", "worker of pid 711"]


def test_mpi_and_slurm_ranks_are_read_from_their_own_variables():
    tree = (proc(1, 0, "mpirun -np 2 python train.py"), proc(2, 1, "python train.py", OMPI_COMM_WORLD_RANK="1"))
    assert [p.label for p in label_processes(tree)] == ["launcher (mpirun)", "rank 1"]


def test_forkserver_workers_belong_to_the_rank_that_started_the_forkserver():
    tree = (
        proc(1, 0, "torchrun --nproc_per_node 1 train.py"),
        proc(2, 1, "python -u train.py", RANK="0"),
        proc(3, 2, "python -c from multiprocessing.forkserver import main; main(12, 13, ['__main__'])"),
        proc(4, 3, "python -c from multiprocessing.forkserver import main; main(12, 13, ['__main__'])"),
    )
    assert [p.label for p in label_processes(tree)][2:] == ["worker of rank 0", "worker of rank 0"]


def test_a_slurm_job_tree_seen_on_a_real_node():
    """The tree and environments `scontrol listpids` and /proc showed for a 2-task job on the test Slurm:
    the batch script's shell carries SLURM_PROCID=0 yet is a shell; srun is a launcher; the tasks are ranks."""
    job = {"SLURM_JOB_ID": "1"}
    tree = (
        proc(25814, 1, "slurmstepd: [1.batch]"),
        proc(25818, 25814, "/bin/bash /tmp/s/spool/slurmd-vm/job00001/slurm_script", SLURM_PROCID="0", SLURM_LOCALID="0", **job),
        proc(25819, 25818, "srun python3 -u rank.py hang x", SLURM_PROCID="0", SLURM_LOCALID="0", **job),
        proc(25822, 25819, "srun python3 -u rank.py hang x", SLURM_PROCID="0", SLURM_LOCALID="0", **job),
        proc(25829, 1, "slurmstepd: [1.0]"),
        proc(25834, 25829, "/usr/bin/python3 -u rank.py hang x", SLURM_PROCID="0", SLURM_LOCALID="0", **job),
        proc(25835, 25829, "/usr/bin/python3 -u rank.py hang x", SLURM_PROCID="1", SLURM_LOCALID="1", **job),
    )
    labels = [(p.pid, p.role, p.label) for p in label_processes(tree)]
    assert labels == [
        (25814, "launcher", "launcher (slurmstepd)"),
        (25818, "shell", "shell"),
        (25819, "launcher", "launcher (srun)"),
        (25822, "launcher", "launcher (srun)"),
        (25829, "launcher", "launcher (slurmstepd)"),
        (25834, "rank", "rank 0"),
        (25835, "rank", "rank 1"),
    ]


@pytest.mark.parametrize(
    ("cmdline", "runs"),
    [
        ("/usr/bin/python3.11 -u -X faulthandler /root/train.py --lr 3", ("train.py", ["--lr", "3"])),
        ("python -mtorch.distributed.run --nproc_per_node 2 train.py", ("torch.distributed.run", ["--nproc_per_node", "2", "train.py"])),
        ("python3 -c import time; time.sleep(9)", ("-c", ["import", "time;", "time.sleep(9)"])),
        ("python3 -u", None),
        ("python3.13t -m torch.distributed.run --nproc 8 t.py", ("torch.distributed.run", ["--nproc", "8", "t.py"])),
        ("/opt/conda/bin/torchrun --nproc_per_node 8 train.py", None),
    ],
)
def test_what_a_python_command_line_runs(cmdline, runs):
    """One reader of a Python interpreter's argv for the roles (program) and the process table (script_and_args)."""
    assert python_run(cmdline.split()) == runs
