"""Samples of a run from a target: the agent (agent.py) runs there, this side turns its lines into Samples.

One long-lived agent per target streams one JSON line a second over one channel (≈9 ms a
sample even behind a slow login shell, against ≈120 ms for a fresh exec). `Sampler.stream`
yields Samples until the agent or its channel ends; `sample_once` takes the two samples a
CPU% delta needs, for `pulse check` and the diagnosis. Everything the agent sends is
untrusted text from the target: shapes are checked and strings made safe for a terminal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace

from console.config import Config
from console.model import GpuProcess, GpuReading, LogStatus, ProcessReading, Sample, ThreadCpu, file_kind, run_pids
from console.observe import agent, smi
from console.observe.follow import log_pattern
from console.observe.protocol import Hello, ProtocolError, check_hello, field
from console.observe.roles import label_processes
from console.observe.textsafe import sanitize
from console.remote.program import BANNER_MAX_BYTES, open_program, program_source, reap
from console.remote.target import LineReader, Target, TargetError

AGENT_SOURCE = program_source(agent)
AGENT_NAME = agent.PROGRAM
#: No line for this long means the agent or the link is stuck (an nvidia-smi call may take SMI_TIMEOUT_S twice).
STALE_MIN_S = 4 * agent.SMI_TIMEOUT_S
#: The first line also waits for the login shell: conda/pyenv init, and pyenv's rehash lock
#: that makes every `bash -l` wait up to 60 s while another shell holds it. Giving up sooner
#: would kill shells mid-rehash and leave that lock behind for the next ones.
FIRST_SAMPLE_S = 90.0
#: GPU memory in use below this is the driver's own, not a context of the run.
IDLE_GPU_MEMORY_MIB = 16
MAX_TEXT = 1000
#: The longest line the agent sends (it trims its own lines to this); a longer one is refused.
MAX_LINE_BYTES = agent.LINE_MAX_BYTES
#: Lines in a row that are not samples before the agent is given up as broken (one is skipped with a problem).
MAX_BAD_LINES = 100

ProblemCallback = Callable[[str], None]


class SampleError(ProtocolError):
    """An agent line that is not a sample: one line saying what is wrong with it."""


def _fields(obj: dict, what: str) -> Callable[[str], object]:
    """A reader of `obj`'s fields: each must be present (it may be null where the protocol allows)."""
    return lambda key: field(obj, key, what, SampleError)


def agent_args(
    config: Config, interval_s: float, count: int, *, process_utilization: bool = False, apps_every_s: float | None = None
) -> list[str]:
    """The agent's argv for `config` (see agent.build_parser): `--name=value`, as a regex may start with '-'."""
    run = config.run
    return [
        f"--interval={interval_s:g}",
        f"--count={count}",
        f"--match={run.match or ''}",
        f"--pidfile={run.pidfile or ''}",
        f"--log={log_pattern(run.log) if run.log else ''}",
        f"--gpu-source={config.gpus.source}",
        f"--nvidia-smi={config.target.nvidia_smi}",
        f"--smi-gpu-fields={','.join(smi.GPU_QUERY_FIELDS)}",
        f"--smi-app-fields={','.join(smi.APP_QUERY_FIELDS)}",
        *(["--process-utilization"] if process_utilization else []),
        *([] if apps_every_s is None else [f"--apps-every={apps_every_s:g}"]),
        *([f"--slurm-job={run.slurm_job}"] if run.slurm_job else []),
    ]


# -- parsing (pure) --------------------------------------------------------------------------


def _safe(value: object) -> str:
    return sanitize(str(value), MAX_TEXT)[0]


def _optional_text(value: object) -> str | None:
    return None if value is None else _safe(value)


def _number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SampleError(f"{what} is {value!r:.40}, not a number")
    return value


def _mib(value: object, what: str) -> int | None:
    """Memory in whole MiB, as the agent sends it (bytes // 2**20)."""
    number = _number(value, what)
    return None if number is None else int(number)


def _optional_str(value: object, what: str) -> str | None:
    """A raw text the protocol sends as a string or null."""
    if value is not None and not isinstance(value, str):
        raise SampleError(f"{what} is {value!r:.40}, not a string")
    return value


def _present_number(value: object, what: str) -> float:
    """A number the protocol never leaves null."""
    number = _number(value, what)
    if number is None:
        raise SampleError(f"{what} is null, not a number")
    return number


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SampleError(f"{what} is {value!r:.40}, not an integer")
    return value


def _list(value: object, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SampleError(f"{what} is {type(value).__name__}, not a list")
    return value


def _dict(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise SampleError(f"{what} is {type(value).__name__}, not an object")
    return value


def _gpu_process(raw: object) -> GpuProcess:
    process = _fields(_dict(raw, "a GPU process"), "a GPU process")
    return GpuProcess(
        pid=_int(process("pid"), "a GPU process's pid"),
        used_mib=_mib(process("used_mib"), "a GPU process's used_mib"),
        name=_optional_text(process("name")),
    )


def _nvml_gpu(raw: object) -> GpuReading:
    gpu = _fields(_dict(raw, "a GPU"), "a GPU")
    processes = tuple(_gpu_process(p) for p in _list(gpu("processes"), "a GPU's processes"))
    return GpuReading(
        index=_int(gpu("index"), "a GPU's index"),
        uuid=_safe(gpu("uuid")),
        name=_safe(gpu("name")),
        memory_used_mib=_mib(gpu("memory_used_mib"), "memory_used_mib"),
        memory_total_mib=_mib(gpu("memory_total_mib"), "memory_total_mib"),
        utilization_pct=_number(gpu("utilization_pct"), "utilization_pct"),
        temperature_c=_number(gpu("temperature_c"), "temperature_c"),
        power_w=_number(gpu("power_w"), "power_w"),
        power_limit_w=_number(gpu("power_limit_w"), "power_limit_w"),
        sm_clock_mhz=_number(gpu("sm_clock_mhz"), "sm_clock_mhz"),
        processes=processes,
        error=_optional_text(gpu("error")),
    )


def _smi_gpus(gpu_csv: str | None, apps_csv: str | None) -> tuple[tuple[GpuReading, ...], str | None]:
    """GPUs from nvidia-smi's raw CSV; garbage becomes an error line, never an exception.

    A row that cannot be read is left out and named in the error, so the other GPUs still show.
    """
    if gpu_csv is None:
        return (), None
    errors: list[str] = []
    try:
        gpus: Iterable[GpuReading] = smi.parse_gpu_csv(gpu_csv, errors=errors)
        if apps_csv is not None:
            gpus = smi.attach_processes(gpus, smi.parse_apps_csv(apps_csv, errors=errors))
    except smi.ParseError as exc:
        return (), _safe(exc)
    return tuple(gpus), _safe("; ".join(errors)) if errors else None


def _thread(raw: object) -> ThreadCpu:
    thread = _fields(_dict(raw, "a thread"), "a thread")
    return ThreadCpu(
        tid=_int(thread("tid"), "a thread's tid"),
        name=_safe(thread("name")),
        cpu_pct=_number(thread("cpu_pct"), "a thread's cpu_pct"),
        state=_safe(thread("state")),
    )


def _process(raw: object) -> ProcessReading:
    process = _fields(_dict(raw, "a process"), "a process")
    return ProcessReading(
        pid=_int(process("pid"), "a process's pid"),
        ppid=_int(process("ppid"), "a process's ppid"),
        state=_safe(process("state")),
        elapsed_s=_present_number(process("elapsed_s"), "elapsed_s"),
        threads=_int(process("threads"), "threads"),
        rss_mib=_present_number(process("rss_mib"), "rss_mib"),
        cpu_pct=_number(process("cpu_pct"), "cpu_pct"),
        cpu_s=_number(process("cpu_s"), "cpu_s"),
        cmdline=_safe(process("cmdline")),
        nspid=tuple(_int(n, "an NSpid") for n in _list(process("nspid"), "nspid")),
        stdout=_optional_text(process("stdout")),
        unbuffered=unbuffered if isinstance(unbuffered := process("unbuffered"), bool) else None,
        children=tuple(_int(c, "a child pid") for c in _list(process("children"), "children")),
        thread_cpu=tuple(_thread(t) for t in _list(process("thread_cpu"), "thread_cpu")),
        run_env=tuple(
            (name, _safe(value))
            for name, value in sorted(_dict(process("env"), "a process's env").items())
            if name in agent.RUN_ENV_KEYS
        ),
    )


def _log(raw: object) -> LogStatus | None:
    if raw is None:
        return None
    log_field = _fields(_dict(raw, "log"), "the log")
    exists = bool(log_field("exists"))
    mode = _int(log_field("mode"), "the log's mode")
    return LogStatus(
        path=_safe(log_field("path")),
        exists=exists,
        size=_int(log_field("size"), "the log's size"),
        mtime=_present_number(log_field("mtime"), "the log's mtime"),
        inode=_int(log_field("inode"), "the log's inode"),
        kind=file_kind(mode) if exists else "file",
    )


def joined_errors(*errors: str | None) -> str | None:
    """Errors in one line, each said once: reading the GPUs and their processes' use can fail alike
    ("nvidia-smi not found" twice in one line)."""
    said: list[str] = []
    for error in errors:
        for part in (error or "").split("; "):
            if part and part not in said:
                said.append(part)
    return "; ".join(said) or None


def parse_sample(obj: dict) -> Sample:
    """A Sample from one decoded agent line; SampleError when its shape is wrong."""
    obj = _dict(obj, "the line")
    line = _fields(obj, "the line")
    time = _present_number(line("t"), "t")
    source = line("gpu_source")
    gpu_error = _optional_text(line("gpu_error"))
    # Both ways of reading GPUs are always in the line; gpu_source says which one holds them.
    nvml_gpus, smi_gpu_csv, smi_apps_csv = line("gpus"), line("smi_gpu_csv"), line("smi_apps_csv")
    if source == "nvidia-smi":
        gpus, parse_error = _smi_gpus(_optional_str(smi_gpu_csv, "smi_gpu_csv"), _optional_str(smi_apps_csv, "smi_apps_csv"))
        gpu_error = joined_errors(gpu_error, parse_error)
    elif source in ("nvml", "none"):
        gpus = tuple(_nvml_gpu(g) for g in _list(nvml_gpus, "gpus"))
    else:
        raise SampleError(f"gpu_source is {source!r:.40}, not nvml, nvidia-smi or none")
    processes = tuple(_process(p) for p in _list(line("processes"), "processes"))
    gpus, use_error = _with_process_use(gpus, obj)
    if use_error:
        gpu_error = joined_errors(gpu_error, use_error)
    return Sample(
        time=time,
        gpus=gpus,
        gpu_source=source,
        gpu_error=gpu_error,
        processes=label_processes(processes, gpus),
        process_error=_optional_text(line("process_error")),
        in_pid_namespace=line("in_pid_namespace") is True,
        log=_log(line("log")),
    )


def _with_process_use(gpus: tuple[GpuReading, ...], obj: dict) -> tuple[tuple[GpuReading, ...], str | None]:
    """The GPUs with their per-process SM % when the line carries it (NVML `process_sm` or pmon's text);
    a GPU the answer does not list keeps None (not read), never an empty list (none of its use is anyone's)."""
    error = _optional_text(obj.get("process_sm_error"))
    if obj.get("smi_pmon") is not None:
        try:
            by_index = smi.parse_pmon(str(obj["smi_pmon"]))
        except smi.ParseError as exc:
            return gpus, _safe(exc)
    elif obj.get("process_sm") is not None:
        raw = _dict(obj["process_sm"], "process_sm")
        by_index = {}
        for index, rows in raw.items():
            if not str(index).isdigit():
                raise SampleError(f"process_sm has GPU {index!r:.20}, not an index")
            pairs = []
            for row in _list(rows, "a GPU's process_sm"):
                pid, pct = _list(row, "a process_sm row")[:2]
                pairs.append((_int(pid, "a process_sm pid"), _number(pct, "a process_sm value") or 0.0))
            by_index[int(index)] = tuple(pairs)
    else:
        return gpus, error
    return tuple(replace(g, process_sm_pct=by_index.get(g.index)) for g in gpus), error


def parse_line(line: str) -> Sample:
    """A Sample from one raw agent line; SampleError (one line) when it is not one."""
    try:
        obj = json.loads(line)
    except ValueError:
        raise SampleError(f"not JSON: {_safe(line[:80])!r}") from None
    return parse_sample(obj)


def gpu_processes_unseen(sample: Sample) -> bool:
    """True when the GPUs are busy but none of their processes is one of the run's, seen from a container.

    Inside a PID namespace the driver reports host PIDs, so the run's own PIDs (and the
    NSpid chains that /proc gives for them) may all be missing from the GPU's list although
    its contexts are alive; an empty GPU process list there does not mean they are gone.
    """
    if not sample.in_pid_namespace:
        return False
    gpu_pids = {p.pid for g in sample.gpus for p in g.processes}
    busy = bool(gpu_pids) or any((g.memory_used_mib or 0) >= IDLE_GPU_MEMORY_MIB for g in sample.gpus)
    if not busy:
        return False
    return not (gpu_pids & run_pids(sample.processes))


# -- the channel -----------------------------------------------------------------------------


class Sampler:
    """Samples of the run on `target`, from one long-lived agent there.

    `on_problem` hears about each line that was not a sample (it is skipped; MAX_BAD_LINES in a
    row end the stream); why the agent ended comes as the TargetError that ends the stream, as
    does a line over MAX_LINE_BYTES or one that does not come in time.
    """

    def __init__(
        self,
        target: Target,
        config: Config,
        *,
        interval_s: float | None = None,
        apps_every_s: float | None = None,
        on_problem: ProblemCallback | None = None,
    ) -> None:
        self.target = target
        self.config = config
        self.interval_s = config.gpus.poll_s if interval_s is None else interval_s
        self.apps_every_s = apps_every_s
        """nvidia-smi compute-apps every this many seconds (None: the agent's own APPS_EVERY_S)."""
        self.on_problem = on_problem
        self.bad_lines = 0
        self.hello: Hello | None = None
        """What the agent said of itself (its Python and pynvml versions), once it has."""

    async def stream(self) -> AsyncIterator[Sample]:
        """Samples until the agent ends (TargetError saying why) or the caller stops iterating."""
        async for sample in self._samples(self.interval_s, 0):
            yield sample

    async def _samples(self, interval_s: float, count: int, process_utilization: bool = False) -> AsyncIterator[Sample]:
        args = agent_args(
            self.config, interval_s, count, process_utilization=process_utilization, apps_every_s=self.apps_every_s
        )
        channel = await open_program(
            self.target, AGENT_SOURCE, args, name=AGENT_NAME, python=self.target.python
        )
        stale_s, first_s = _stale_s(interval_s), _first_line_s(interval_s)
        lines = LineReader(channel, f"{self.target.label}: the sampling agent", MAX_LINE_BYTES)
        bad_in_a_row = 0
        self.hello = None
        try:
            # Each line within its time however it trickles in; the first also waits for the login shell.
            while (raw := await lines.line(stale_s if self.hello else first_s)) is not None:
                line = raw.decode("utf-8", "replace")
                if self.hello is None:
                    if lines.consumed > BANNER_MAX_BYTES:
                        raise TargetError(
                            f"{self.target.label}: over {BANNER_MAX_BYTES >> 10} KiB came before the sampling agent's "
                            "hello; quiet what the login profile prints, or check [target] python"
                        )
                    self._greet(line)
                    continue
                try:
                    sample = parse_line(line)
                except SampleError as exc:
                    bad_in_a_row += 1
                    if bad_in_a_row >= MAX_BAD_LINES:
                        raise TargetError(
                            f"{self.target.label}: the sampling agent sent {bad_in_a_row} lines in a row "
                            f"that are not samples (the last: {exc})"
                        ) from None
                    self._problem(f"agent sent a line that is not a sample ({exc}); skipped")
                    continue
                bad_in_a_row = 0
                yield sample
            async with asyncio.timeout(stale_s):
                status = await channel.wait()
        finally:
            channel.close()
            await reap(channel)
        if status != 0 or count == 0:
            said = _safe(getattr(channel, "stderr", "").strip().rpartition("\n")[2])
            raise TargetError(
                f"{self.target.label}: the sampling agent exited with status {status}"
                + (f": {said}" if said else "")
                + _hint(status)
            )

    def _greet(self, line: str) -> None:
        """Take the agent's hello; a login banner before it is flagged and skipped, anything else refused."""
        try:
            obj = json.loads(line)
        except ValueError:
            self._problem(f"agent sent a line that is not a sample (not JSON: {_safe(line[:80])!r}); skipped")
            return
        try:
            self.hello = check_hello(obj, agent.PROGRAM, agent.PROTOCOL)
        except ProtocolError as exc:
            raise TargetError(f"{self.target.label}: {exc}") from None

    def _problem(self, text: str) -> None:
        self.bad_lines += 1
        if self.on_problem is not None:
            self.on_problem(text)


def _stale_s(interval_s: float) -> float:
    """No line for this long, once the agent has said hello, means the agent or the link is stuck."""
    return max(STALE_MIN_S, 5 * interval_s)


def _first_line_s(interval_s: float) -> float:
    """How long the agent's first line may take: the login shell's start-up too."""
    return max(FIRST_SAMPLE_S, _stale_s(interval_s))


def _hint(status: int | None) -> str:
    if status == 127:
        return " (set [target] python to an interpreter that exists there)"
    return ""


def sample_once_s(window_s: float) -> float:
    """The most `sample_once` takes: the first line's wait (the login shell), the window, and a line's wait."""
    return _first_line_s(window_s) + window_s + _stale_s(window_s)


async def sample_once(
    target: Target,
    config: Config,
    window_s: float,
    *,
    process_utilization: bool = False,
    on_first: Callable[[Sample], None] | None = None,
) -> tuple[Sample, Sample]:
    """Two samples `window_s` apart: the second has CPU% over that window (and, with
    `process_utilization`, each GPU's per-process SM %); `on_first` is given the first as soon as it
    arrives (work that needs only it can start during the window). TargetError if the agent fails, or
    has not sent both within `sample_once_s(window_s)`, whatever it sends meanwhile."""
    sampler = Sampler(target, config)
    samples: list[Sample] = []
    deadline_s = sample_once_s(window_s)
    try:
        async with asyncio.timeout(deadline_s):
            async for sample in sampler._samples(window_s, 2, process_utilization):
                samples.append(sample)
                if on_first is not None and len(samples) == 1:
                    on_first(sample)
    except TimeoutError:
        raise TargetError(
            f"{target.label}: the sampling agent sent {len(samples)} of 2 samples in {deadline_s:g} s"
        ) from None
    if len(samples) < 2:
        raise TargetError(f"{target.label}: the sampling agent sent {len(samples)} of 2 samples")
    return samples[0], samples[1]
