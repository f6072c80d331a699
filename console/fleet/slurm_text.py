"""Slurm's words, read: what `scontrol`, `sbatch` and sbatch filename patterns say (pure: text in, data out).

`console.fleet.slurm.SlurmClient` runs the commands and hands their output to these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console.observe.textsafe import sanitize

#: Job states in which the job's processes may still run on its nodes.
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
#: States from which a job will start (again) without anyone asking.
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING"})


class SlurmError(Exception):
    """A Slurm command failed or printed something unreadable: one line saying what to do."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as `scontrol show job` describes it."""

    job_id: str
    name: str
    state: str
    """RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, ... (Slurm's words, upper case)."""
    reason: str
    elapsed_s: float
    """RunTime: how long the job has run (0 while pending)."""
    nodes: str
    """The node list in Slurm's compact form (`gpu[01-04]`); '' before it starts."""
    num_nodes: int
    num_tasks: int
    user: str
    stdout: str
    """The batch output's file pattern as Slurm keeps it (may hold %N, %t, ...)."""
    stderr: str
    work_dir: str
    command: str
    batch: bool
    requeue: bool
    """Slurm may requeue it (`scontrol requeue` is allowed)."""
    restarts: int
    exit_code: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    def as_json(self) -> dict:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "elapsed_s": self.elapsed_s,
            "nodes": self.nodes,
            "num_nodes": self.num_nodes,
            "num_tasks": self.num_tasks,
            "user": self.user,
            "stdout": self.stdout,
            "work_dir": self.work_dir,
            "restarts": self.restarts,
            "exit_code": self.exit_code,
        }


_FIELD = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9:/_]*)=")
_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")


def parse_fields(line: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces` → {Key: value}; a value runs up to the next ` Key=`."""
    matches = list(_FIELD.finditer(line))
    fields: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields.setdefault(m.group(1), line[m.end():end].strip())
    return fields


def parse_duration(text: str) -> float:
    """Slurm's `[D-][HH:]MM:SS` (RunTime, squeue %M) in seconds; ValueError for anything else."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"not a Slurm duration: {text!r:.40}")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _count(value: str) -> int:
    """`2`, `2-2` or `1-4` (a range: the lower bound is what the job has)."""
    head = value.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


def clean_field(value: str) -> str:
    """A field's value made terminal-safe; Slurm's words for nothing (`(null)`, `None`, `N/A`) become ''."""
    return "" if value in ("(null)", "None", "N/A") else sanitize(value, 4096)[0]


def parse_job(text: str) -> SlurmJob:
    """The job in `scontrol show job -o ID` output (one line of Key=value); SlurmError if there is none."""
    line = next((line for line in text.splitlines() if line.startswith("JobId=")), None)
    if line is None:
        raise SlurmError(f"scontrol printed no job: {clean_field(text.strip()[:120])!r}")
    f = parse_fields(line)
    user = f.get("UserId", "")
    try:
        elapsed = parse_duration(f.get("RunTime", "0:00"))
    except ValueError:
        elapsed = 0.0
    return SlurmJob(
        job_id=f["JobId"],
        name=clean_field(f.get("JobName", "")),
        state=f.get("JobState", "UNKNOWN").split()[0],
        reason=clean_field(f.get("Reason", "")),
        elapsed_s=elapsed,
        nodes=clean_field(f.get("NodeList", "")),
        num_nodes=_count(f.get("NumNodes", "0")),
        num_tasks=_count(f.get("NumTasks", "0")),
        user=user.split("(", 1)[0],
        stdout=clean_field(f.get("StdOut", "")),
        stderr=clean_field(f.get("StdErr", "")),
        work_dir=clean_field(f.get("WorkDir", "")),
        command=clean_field(f.get("Command", "")),
        batch=f.get("BatchFlag", "0") == "1",
        requeue=f.get("Requeue", "0") == "1",
        restarts=int(f.get("Restarts", "0") or 0) if f.get("Restarts", "0").isdigit() else 0,
        exit_code=f.get("ExitCode", ""),
    )


def parse_hostnames(text: str) -> list[str]:
    """`scontrol show hostnames` output: one node name a line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_submitted(text: str) -> str:
    """The job ID `sbatch --parsable` printed (`ID` or `ID;cluster`); SlurmError otherwise."""
    for line in reversed(text.strip().splitlines()):
        job_id = line.strip().split(";", 1)[0]
        if _JOB_ID.match(job_id):
            return job_id
    raise SlurmError(f"sbatch printed no job ID: {clean_field(text.strip()[:120])!r}")


_PATTERN = re.compile(r"%(\d*)([AaJjNnstux%])")


def expand_filename(pattern: str, job: SlurmJob, *, node: str, node_index: int = 0, task: int | None = None) -> str:
    """A Slurm filename pattern (sbatch -o) as the file on `node`: %j %J %A %N %n %t %u %x %s %a %%.

    `%t` (the task's rank) becomes `*` when `task` is None: any rank's file on that node,
    a glob the log follower understands. A number after % pads with zeros, as Slurm does.
    """
    base_id, _, array_index = job.job_id.partition("_")

    def value(m: re.Match) -> str:
        width, code = m.groups()
        if code == "%":
            return "%"
        if code == "t" and task is None:
            return "*"
        text = {
            "j": base_id,
            "J": f"{base_id}.batch",
            "A": base_id,
            "a": array_index or "4294967294",
            "N": node,
            "n": str(node_index),
            "t": str(task),
            "s": "batch",
            "u": job.user,
            "x": job.name,
        }[code]
        return text.zfill(int(width)) if width and text.isdigit() else text

    return _PATTERN.sub(value, pattern)


def parse_sacct_final(text: str, job_id: str) -> tuple[str, str] | None:
    """(state, exit code) of `job_id` from `sacct -X -n -P -o JobID,State,ExitCode`; None when it is not listed."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 3 and fields[0] == job_id:
            return clean_field(fields[1]), clean_field(fields[2])
    return None


def check_job_id(job_id: str) -> str:
    """`job_id` when it is a Slurm job ID (digits, or ID_INDEX); SlurmError otherwise (it goes into commands)."""
    if not _JOB_ID.match(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job ID (digits, or ID_INDEX for an array task)")
    return job_id
