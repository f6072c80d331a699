"""Plain data read from a run: GPUs, processes, the log, connection state.

Every layer passes these around, the config included; nothing here does I/O or imports Textual.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal


class LineKind(str, Enum):
    """What a log line says about the run."""

    OOM = "oom"
    NAN = "nan"
    TRACEBACK = "traceback"
    NCCL_TIMEOUT = "nccl_timeout"
    CUDA_ERROR = "cuda_error"
    KILLED = "killed"
    WARNING = "warning"
    NORMAL = "normal"


#: Kinds an operator must look at; warnings and normal lines are not problems.
PROBLEM_KINDS = frozenset(
    {
        LineKind.OOM,
        LineKind.NAN,
        LineKind.TRACEBACK,
        LineKind.NCCL_TIMEOUT,
        LineKind.CUDA_ERROR,
        LineKind.KILLED,
    }
)


@dataclass(frozen=True, slots=True)
class LineInfo:
    """The kind of one log line and the metrics it states (None where it says nothing)."""

    kind: LineKind = LineKind.NORMAL
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    it_per_s: float | None = None
    loss: float | None = None
    step: int | None = None
    total_steps: int | None = None
    lr: float | None = None
    grad_norm: float | None = None
    mfu: float | None = None
    """Model FLOPs utilization as the log prints it: a percentage (nanoGPT, torchtitan) or, for composer, a fraction."""
    continues: bool = False
    """The line continues the block of the line before it in its stream (a traceback's frame, an
    error's next message line, a C++ stack): set by LineReader, never by classify_line alone."""
    nonfinite_loss: float | None = None
    """The loss as written when it is nan or inf (`loss` is then None: the series hold finite values)."""

    def as_json(self) -> dict:
        return {
            "kind": self.kind.value,
            "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s,
            "it_per_s": self.it_per_s,
            "loss": self.loss,
            "step": self.step,
            "total_steps": self.total_steps,
            "lr": self.lr,
            "grad_norm": self.grad_norm,
            "mfu": self.mfu,
        }


@dataclass(frozen=True, slots=True)
class ProgressLine:
    """The redraw a progress bar (tqdm, Lightning, accelerate, Keras) shows now, before its newline."""

    text: str
    info: LineInfo
    """What classify_line reads from the redraw: step, total, rate, postfix loss."""
    time: float
    """Local monotonic time the redraw was written, as LogLine.time: the follower dates what it
    reads by the file's mtime then (a backlog read at start-up is history, not news)."""
    rate: float | None = None
    rate_unit: str | None = None
    """The rate as the bar prints it: `6.59` `it/s`, `1.31` `s/it`, `2.1K` `examples/s`."""
    elapsed_s: float | None = None
    eta_s: float | None = None
    """Seconds left by the bar's own estimate, as of `time`."""
    postfix: tuple[tuple[str, str], ...] = ()
    """`loss=1.2, lr=3e-05` after the rate, as (name, value) pairs."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One received log line, already made safe for a terminal."""

    number: int
    """1-based position among all lines received from the run's logs."""
    text: str
    info: LineInfo
    cut: bool = False
    """True when the line was longer than the bound and its tail was dropped."""
    time: float = 0.0
    sgr: tuple[tuple[int, int, str], ...] = ()
    """The line's own colours: (start, end, SGR parameters) spans over `text` (textsafe.sanitize_styled)."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU, as the driver reports it (host PID namespace)."""

    pid: int
    used_mib: int | None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one moment. None means the tool said [N/A] / [Not Supported]."""

    index: int
    uuid: str
    name: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[GpuProcess, ...] = ()
    error: str | None = None
    """Set when the GPU itself reports a fault, e.g. '[GPU requires reset]'."""
    process_sm_pct: tuple[tuple[int, float], ...] | None = None
    """(pid, SM %) of each process using it, from NVML process samples or `nvidia-smi pmon`;
    None when not read (only a diagnosis reads it, never the 1 Hz loop). Host PIDs."""
    sm_clock_mhz: float | None = None
    """Its SM clock now; None when the source does not read it."""

    @property
    def memory_pct(self) -> float | None:
        """Memory used as a percentage of the total; None when either is unknown."""
        used, total = self.memory_used_mib, self.memory_total_mib
        return used * 100 / total if used is not None and total else None


@dataclass(frozen=True, slots=True)
class GpuRole:
    """The GPUs of one role (a line of the compact GPU pane), with each figure over those read without a fault."""

    role: str
    """The config's role name; '' for GPUs it gives none."""
    gpus: tuple[GpuReading, ...]

    @property
    def faults(self) -> tuple[GpuReading, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.error)

    @property
    def readable(self) -> tuple[GpuReading, ...]:
        return tuple(gpu for gpu in self.gpus if not gpu.error)

    def figures(self, name: str) -> list[float]:
        """One field of each readable GPU that has it ('utilization_pct', 'memory_pct', ...)."""
        return [value for value in (getattr(gpu, name) for gpu in self.readable) if value is not None]

    @property
    def memory_used_gib(self) -> list[float]:
        return [mib / 1024 for mib in self.figures("memory_used_mib")]

    @property
    def memory_total_mib(self) -> float | None:
        """The largest total among them (a role's GPUs are normally alike); None when none is known."""
        return max((total for total in self.figures("memory_total_mib") if total), default=None)


def gpus_by_role(gpus: tuple[GpuReading, ...], roles: dict[int, str]) -> list[GpuRole]:
    """The GPUs grouped by their role, each role where its first GPU comes in index order."""
    groups: dict[str, list[GpuReading]] = {}
    for gpu in gpus:
        groups.setdefault(roles.get(gpu.index, ""), []).append(gpu)
    return [GpuRole(role, tuple(members)) for role, members in groups.items()]


@dataclass(frozen=True, slots=True)
class ThreadCpu:
    """One thread of a process and its CPU% over the last sampling interval."""

    tid: int
    name: str
    """The thread's comm: 'python3', 'pt_autograd_0', 'cuda-EvtHandlr', ..."""
    cpu_pct: float | None
    """Above 0 as the agent sends it (an idle thread, or one on the first sample, is not sent); None
    where a rate was not known."""
    state: str


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One process of the run, read from /proc on the target."""

    pid: int
    ppid: int
    state: str
    """The single-letter state of /proc/PID/stat: R, S, D, Z, T, ..."""
    elapsed_s: float
    threads: int
    rss_mib: float
    cpu_pct: float | None
    """CPU% over the last sampling interval (utime+stime delta); None on the first sample."""
    cmdline: str
    nspid: tuple[int, ...] = ()
    """/proc/PID/status NSpid: this PID as seen from the reader's namespace inwards."""
    stdout: str | None = None
    """Where fd 1 points (readlink /proc/PID/fd/1), when readable."""
    unbuffered: bool | None = None
    """True when `-u` or PYTHONUNBUFFERED is set; None when it could not be read."""
    children: tuple[int, ...] = ()
    """PIDs of its direct children (DataLoader workers, ranks), each also a reading of the sample."""
    thread_cpu: tuple[ThreadCpu, ...] = ()
    """The threads that used CPU since the last sample (the agent sends no idle one)."""
    cpu_s: float | None = None
    """CPU seconds (utime+stime) over the process's life: cpu_s / elapsed_s is what `ps` calls %CPU."""
    run_env: tuple[tuple[str, str], ...] = ()
    """Its RANK, LOCAL_RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES and flight-recorder paths, where set."""
    role: str = ""
    """Its place in the run (console.observe.roles): launcher, rank, worker, main, child, or '' unknown."""
    rank: int | None = None
    """The rank it is (a rank) or serves (a DataLoader worker); None outside a distributed run."""
    label: str = ""
    """What the operator reads: 'launcher (torchrun)', 'rank 1 · GPU 1', 'worker of rank 1'."""
    gpus: tuple[int, ...] = ()
    """Indices of the GPUs the driver lists it on."""

    @property
    def any_pid(self) -> frozenset[int]:
        """This process's PID as any namespace numbers it: its own and its NSpid (a driver in a
        container reports host PIDs)."""
        return frozenset((self.pid, *self.nspid))


def run_pids(processes: Iterable[ProcessReading]) -> frozenset[int]:
    """The run's PIDs as any namespace may number them: the one reader of that fact (ProcessReading.any_pid)."""
    return frozenset(pid for process in processes for pid in process.any_pid)


#: What a path is, by the file type of its st_mode, when it is not a regular file.
_FILE_TYPES = {stat.S_IFDIR: "directory", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
               stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFLNK: "symbolic link"}  # fmt: skip


def file_kind(mode: int) -> str:
    """'file' for a regular file's st_mode, else what it is ('character device', 'FIFO', ...)."""
    return "file" if stat.S_ISREG(mode) else _FILE_TYPES.get(stat.S_IFMT(mode), "special file")


@dataclass(frozen=True, slots=True)
class LogStatus:
    """The run's log file as stat() saw it."""

    path: str
    exists: bool
    size: int = 0
    mtime: float = 0.0
    inode: int = 0
    kind: str = "file"
    """What the path is (file_kind): only a regular file's size and mtime tell of the run's writes;
    /dev/zero's say nothing, a FIFO's neither."""


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything one poll of a target returns."""

    time: float
    """The target's clock (time.time() there) when the sample was taken."""
    gpus: tuple[GpuReading, ...] = ()
    gpu_source: str = "none"
    """'nvml', 'nvidia-smi' or 'none'."""
    gpu_error: str | None = None
    processes: tuple[ProcessReading, ...] = ()
    process_error: str | None = None
    in_pid_namespace: bool = False
    """True when the observing side runs inside a PID namespace (a container):
    the driver's PIDs are then the host's and will not match the run's."""
    log: LogStatus | None = None


class ConnectionStatus(str, Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """What the operator is told about the link to the target."""

    status: ConnectionStatus
    detail: str = ""
    retry_at: float | None = None
    """Monotonic time of the next attempt while reconnecting."""

    def describe(self, now: float) -> str:
        if self.status is ConnectionStatus.RECONNECTING and self.retry_at is not None:
            wait = max(0.0, self.retry_at - now)
            text = f"reconnecting in {wait:.0f} s"
        else:
            text = self.status.value
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to the run or the console, for the event ring."""

    time: float
    kind: str
    text: str
    data: dict = field(default_factory=dict)


ContainerKind = Literal["pct", "docker", "kubectl"]
CONTAINER_KINDS: tuple[ContainerKind, ...] = ("pct", "docker", "kubectl")


@dataclass(frozen=True, slots=True)
class Container:
    """Where on the host the run lives: `pct exec ID --`, `docker exec -i NAME`, `kubectl exec -i POD --`."""

    kind: ContainerKind
    id: str
    namespace: str | None = None
    """kubectl only: the pod's namespace."""

    def describe(self) -> str:
        return f"{self.kind} {self.id}" + (f" -n {self.namespace}" if self.namespace else "")


METRIC_NAMES = (
    "tokens_per_s", "samples_per_s", "it_per_s", "loss", "step", "total_steps", "lr", "grad_norm", "mfu"
)


@dataclass(frozen=True, slots=True)
class MetricPattern:
    """An extra regex from the config: a named group gives the metric's value."""

    name: str
    """One of METRIC_NAMES."""
    regex: str
