"""A run is a process tree: which process is the launcher, which a rank, which a rank's DataLoader worker.

Pure: from the processes of one sample (command lines, parents, RANK / LOCAL_RANK from their
environment) and the GPUs' process lists. Launchers are recognised by the program they run
(torchrun, `python -m torch.distributed.run`, deepspeed, `accelerate launch`, mpirun, srun, ...);
a worker is a child of a rank or of the run's main process with the same command line (a
fork), or started by multiprocessing's spawn / forkserver.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from console.model import GpuReading, ProcessReading

#: Programs that start the ranks of a run.
LAUNCHER_PROGRAMS = frozenset(
    "torchrun deepspeed accelerate-launch mpirun mpiexec orterun prterun srun slurmstepd".split()
)
#: Modules that do, run as `python -m MODULE`.
LAUNCHER_MODULES = frozenset(
    """torch.distributed.run torch.distributed.launch torch.distributed.elastic.agent.server.api
    deepspeed.launcher.runner deepspeed.launcher.launch accelerate.commands.launch""".split()
)
#: Command-line text of a child multiprocessing started with spawn or forkserver.
SPAWNED_CHILD_MARKS = ("multiprocessing.spawn", "multiprocessing-fork", "multiprocessing.forkserver")
#: Where a rank finds its rank: torchrun / deepspeed / accelerate, then MPI and Slurm's own names.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "LOCAL_RANK")
#: Where a rank finds its rank among the ranks of its node.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
SHELLS = frozenset("bash sh zsh dash fish ksh".split())
#: Roles whose process is the run itself: a rank or the main program, not a launcher, shell or helper.
RUN_ROLES = ("rank", "main")


#: Interpreter options that take the next word as their value (`-X faulthandler`, `-W ignore`).
PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W", "-Q"})


def python_run(words: list[str]) -> tuple[str, list[str]] | None:
    """What a Python interpreter's argv runs, and the words after it: the script's file name, the
    module of `-m`, or `-c` / `-` (the code, stdin); None when argv[0] is no Python or runs nothing."""
    if not words or not os.path.basename(words[0]).startswith("python"):  # python3.13t, python3.12-dbg too
        return None
    index = 1
    while index < len(words):
        word = words[index]
        if word == "-m":
            return (words[index + 1], words[index + 2 :]) if index + 1 < len(words) else None
        if word.startswith("-m") and len(word) > 2:
            return word[2:], words[index + 1 :]
        if word in ("-c", "-") or not word.startswith("-"):
            return os.path.basename(word) if word != "-c" else word, words[index + 1 :]
        index += 2 if word in PYTHON_VALUE_OPTIONS else 1
    return None


def program(cmdline: str) -> str:
    """The program a command line runs: the script or `-m` module after a Python interpreter, else argv[0]'s name."""
    words = cmdline.split()
    if not words:
        return ""
    run = python_run(words)
    return run[0] if run else os.path.basename(words[0]).removesuffix(":")  # `slurmstepd: [5.0]` names itself so


def script_and_args(cmdline: str) -> str:
    """What a command line runs, without the interpreter: `python3 -u /root/train.py --lr 3` →
    `train.py --lr 3`, `python -m torch.distributed.run …` → `torch.distributed.run …`."""
    run = python_run(cmdline.split())
    return " ".join([run[0], *run[1]]) if run else cmdline


def launcher_name(cmdline: str) -> str | None:
    """The launcher a command line is (e.g. 'torchrun', 'accelerate launch'), None when it is none."""
    name = program(cmdline)
    if name.removesuffix(".py") in LAUNCHER_PROGRAMS:
        return name.removesuffix(".py")
    if name in LAUNCHER_MODULES:
        return name
    if name == "accelerate" and " launch " in f" {cmdline} ":
        return "accelerate launch"
    return None


def _first_number(process: ProcessReading, names: tuple[str, ...]) -> int | None:
    env = dict(process.run_env)
    for name in names:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def rank_of(process: ProcessReading) -> int | None:
    """The rank its environment gives it (RANK_VARIABLES, first set wins), None outside a distributed run."""
    return _first_number(process, RANK_VARIABLES)


def local_rank_of(process: ProcessReading) -> int | None:
    """Its rank among its node's ranks (LOCAL_RANK_VARIABLES), None when nothing says."""
    return _first_number(process, LOCAL_RANK_VARIABLES)


def _gpus_of(process: ProcessReading, gpus: Iterable[GpuReading]) -> tuple[int, ...]:
    pids = process.any_pid
    return tuple(g.index for g in gpus if any(p.pid in pids for p in g.processes))


def label_processes(processes: tuple[ProcessReading, ...], gpus: tuple[GpuReading, ...] = ()) -> tuple[ProcessReading, ...]:
    """`processes` with role, rank, GPUs and label filled in (parents are labelled before their children).

    Roles: launcher, rank, worker (of a rank or of the main process), child (any other child of
    those), main (a run without ranks: its topmost Python program), shell, '' (unknown).
    """
    by_pid = {p.pid: p for p in processes}
    done: dict[int, ProcessReading] = {}

    def labelled(process: ProcessReading, depth: int = 0) -> ProcessReading:
        if process.pid in done:
            return done[process.pid]
        parent = by_pid.get(process.ppid)
        parent = labelled(parent, depth + 1) if parent is not None and depth < 64 else None
        done[process.pid] = result = _label(process, parent, _gpus_of(process, gpus))
        return result

    return tuple(labelled(p) for p in processes)


def _label(process: ProcessReading, parent: ProcessReading | None, gpus: tuple[int, ...]) -> ProcessReading:
    on = f" · GPU {','.join(map(str, gpus))}" if gpus else ""
    launcher = launcher_name(process.cmdline)
    rank = rank_of(process)
    if launcher is not None:
        return replace(process, role="launcher", rank=None, gpus=gpus, label=f"launcher ({launcher})")
    if parent is not None and parent.role == "worker":  # forkserver's children: workers of the same owner
        return replace(process, role="worker", rank=parent.rank, gpus=gpus, label=parent.label.split(" · ")[0] + on)
    if parent is not None and parent.role in ("rank", "main"):
        forked = process.cmdline == parent.cmdline or any(mark in process.cmdline for mark in SPAWNED_CHILD_MARKS)
        owner = f"rank {parent.rank}" if parent.role == "rank" else f"pid {parent.pid}"
        role = "worker" if forked else "child"
        return replace(process, role=role, rank=parent.rank, gpus=gpus, label=f"{role} of {owner}{on}")
    if program(process.cmdline) in SHELLS:  # before the rank: a Slurm batch script's shell has SLURM_PROCID=0
        return replace(process, role="shell", rank=None, gpus=gpus, label="shell")
    if rank is not None:
        return replace(process, role="rank", rank=rank, gpus=gpus, label=f"rank {rank}{on}")
    if parent is None or parent.role in ("shell", "launcher"):
        return replace(process, role="main", rank=None, gpus=gpus, label=f"main{on}")
    return replace(process, role="", rank=None, gpus=gpus, label=on.removeprefix(" · "))


# -- helpers started by the dozen ----------------------------------------------------------------

#: Programs a compile runs (inductor's compile workers are Python; the CUDA toolchain is not).
COMPILER_PROGRAMS = frozenset("ptxas nvcc cicc nvlink fatbinary cc1 cc1plus gcc g++ clang clang++ ld ld.gold ld.lld".split())
#: `python …/torch/_inductor/compile_worker/__main__.py …`: one of inductor's pool of compile workers.
COMPILE_WORKER_MARK = "_inductor/compile_worker"


def compile_helper(process: ProcessReading) -> str | None:
    """'compile worker' or the compiler's name ('ptxas') for a process a compile started; None otherwise."""
    if COMPILE_WORKER_MARK in process.cmdline:
        return "compile worker"
    name = os.path.basename(process.cmdline.split(" ", 1)[0])
    return name if name in COMPILER_PROGRAMS else None


def fold_helpers(processes: tuple[ProcessReading, ...], busy_pct: float) -> tuple[ProcessReading, ...]:
    """`processes` with the helpers a compile started (inductor's compile workers, ptxas, nvcc) folded
    into one reading per owner: the first helper stands for them all, labelled '17 compile workers of
    pid 1104 (1 busy: ptxas)', with their summed CPU. A lone helper stays as it is."""
    by_pid = {p.pid: p for p in processes}
    groups: dict[int, list[ProcessReading]] = {}
    for process in processes:
        if compile_helper(process) is None:
            continue
        owner = process.ppid
        while owner in by_pid and compile_helper(by_pid[owner]) is not None:
            owner = by_pid[owner].ppid
        groups.setdefault(owner, []).append(process)
    folded: dict[int, ProcessReading | None] = {}
    for owner, members in groups.items():
        if len(members) < 2:
            continue
        busy = [p for p in members if p.cpu_pct is not None and p.cpu_pct > busy_pct]
        names = [name if (name := compile_helper(p)) and name != "compile worker" else f"worker {p.pid}" for p in busy]
        said = f" ({len(busy)} busy: {', '.join(names[:3])}{', …' if len(names) > 3 else ''})" if busy else ""
        cpus = [p.cpu_pct for p in members if p.cpu_pct is not None]
        first = min(members, key=lambda p: p.pid)
        label = f"{len(members)} compile workers of pid {owner}{said}"
        folded.update({p.pid: None for p in members})
        folded[first.pid] = replace(first, label=label, role="helpers", cpu_pct=sum(cpus) if cpus else None)
    return tuple(kept for p in processes if (kept := folded.get(p.pid, p)) is not None)
