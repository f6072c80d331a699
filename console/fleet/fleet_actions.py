"""Fleet actions through the scheduler, never around it: restart a Slurm job, warm up every node.

Restart, with the same plan → confirm → steps → verify shape as the single-host restart:

0. lock: one restart of a job at a time, as of a run: a process agent on the host Slurm is asked on
   holds the job's lock file (console.actions.restart's lock folder there, named by the job ID);
   under it the job must still be as planned (its state and Slurm's restart count unchanged), else
   another restart came first and nothing is asked of Slurm.
1. stop: `scontrol requeue ID` (the same job ID goes back to the queue; Slurm ends every
   step on every node) or, when `[run] launch` is an `sbatch …` line, `scancel ID`.
2. wait: until Slurm no longer runs the old job (requeued: pending again or restarted).
3. submit (resubmit only): the configured `sbatch` line; its new job ID.
4. start: until Slurm runs the job again (the pending reason is shown while it waits).
5. verify: every node of the running job has a live rank (or main program) of that job, not
   of another job that matches the same pattern, and the node's log grows: seen by its own
   sampling agent (over SSH or srun, as the console reaches it).

Pulse kills nothing itself here: Slurm owns the processes. Every restart is audited.
Warmup runs the configured warmup on every node at once, each node's GPUs one at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Collection
from dataclasses import dataclass, replace

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    OutputLine,
    RecordListener,
    StepEvent,
    StepStatus,
    audited,
    refuse_if_read_only,
)
from console.actions.guards import describe_lock_owner
from console.actions.restart import LOCK_FOLDER, lock_owner
from console.actions.shown import HiddenControls, hidden_controls
from console.actions.warmup import WarmupPlan, execute_warmup
from console.config import Config
from console.fleet.fleet import Fleet, FleetError, FleetNode
from console.fleet.slurm import SlurmClient
from console.fleet.slurm_text import SlurmError, SlurmJob
from console.model import Sample
from console.observe.roles import RUN_ROLES
from console.observe.remote_process import LockBusy, take_lock
from console.observe.sampler import sample_once
from console.observe.textsafe import visible
from console.remote.target import TargetError


@dataclass(frozen=True, slots=True)
class FleetRestartPlan:
    """Exactly what the restart will ask Slurm to do."""

    job_id: str
    mode: str
    """'requeue' (scontrol requeue, same ID) or 'resubmit' (scancel, then the configured sbatch)."""
    job_name: str
    state: str
    nodes: str
    restarts: int
    """Slurm's restart count of the job when planned: a requeue shows up as one more."""
    submit: str | None
    cwd: str | None

    def as_json(self) -> dict:
        return {
            "job_id": self.job_id,
            "mode": self.mode,
            "job_name": self.job_name,
            "state": self.state,
            "nodes": self.nodes,
            "restarts": self.restarts,
            "submit": self.submit,
            "cwd": self.cwd,
        }

    @property
    def hidden(self) -> tuple[HiddenControls, ...]:
        """The sbatch line, when it holds control characters (it then runs only once confirmed escaped)."""
        return hidden_controls([("[run] launch", self.submit)])

    def describe(self) -> list[str]:
        """The plan as lines for a confirmation screen or a terminal, the sbatch line escaped."""
        lines = [f"Slurm job {self.job_id} ({self.job_name}), {self.state} on {self.nodes or 'no nodes'}"]
        if self.mode == "requeue":
            lines.append(f"stop: scontrol requeue {self.job_id} (Slurm ends it on every node, same job ID)")
        else:
            lines.append(f"stop: scancel {self.job_id} (Slurm ends it on every node)")
            lines.append(f"submit: {self.submit}" + (f"  (in {self.cwd})" if self.cwd else ""))
        lines.append("verify: the job runs again, every node has a live rank of that job, and its log grows")
        return [visible(line) for line in lines] + [hidden.plan_line() for hidden in self.hidden]


async def plan_fleet_restart(slurm: SlurmClient, config: Config, job_id: str, *, read_only: bool = False) -> FleetRestartPlan:
    """Read the job from Slurm and choose requeue or resubmit; ActionRefused when neither can work."""
    refuse_if_read_only("restart", read_only)
    try:
        job = await slurm.job(job_id)
    except SlurmError as exc:
        raise ActionRefused(str(exc)) from None
    launch = config.run.launch
    if launch:
        if launch.split(maxsplit=1)[0].rsplit("/", 1)[-1] != "sbatch":
            raise ActionRefused(
                f"{config.source}: [run] launch must be an sbatch command line for a Slurm job, not {launch[:40]!r}"
            )
        mode = "resubmit"
    else:
        if not job.batch:
            raise ActionRefused(f"job {job.job_id} is not a batch job: Slurm cannot requeue it; set [run] launch = \"sbatch …\"")
        if not job.requeue:
            raise ActionRefused(
                f"job {job.job_id} was submitted with --no-requeue; set [run] launch = \"sbatch …\" to resubmit it instead"
            )
        mode = "requeue"
    return FleetRestartPlan(
        job_id=job.job_id,
        mode=mode,
        job_name=job.name,
        state=job.state,
        nodes=job.nodes,
        restarts=job.restarts,
        submit=launch if mode == "resubmit" else None,
        cwd=config.run.cwd or (job.work_dir or None) if mode == "resubmit" else None,
    )


@dataclass
class _Timing:
    stop_timeout_s: float
    start_timeout_s: float
    verify_timeout_s: float
    poll_s: float


async def _poll_job(slurm: SlurmClient, job_id: str, done, timeout: float, poll_s: float) -> SlurmJob:
    """The job once `done(job)` holds; TimeoutError with the last state otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        job = await slurm.job(job_id)
        if done(job) or time.monotonic() >= deadline:
            return job
        await asyncio.sleep(poll_s)


def node_proof(sample: Sample, first_log_size: int | None) -> str | None:
    """Why `sample` does not yet prove the job's run on its node (None: it does).

    A live rank or main program of the job must be there, and the node's log (when it has one)
    must have grown since `first_log_size`, its size when the verify first saw it.
    """
    if not any(p.state not in ("Z", "X") and p.role in RUN_ROLES for p in sample.processes):
        launchers = sum(p.role in ("launcher", "shell") for p in sample.processes)
        return "no process of the job's run" + (f" (only {launchers} launcher or shell process(es))" if launchers else "")
    if sample.log is None:
        return None
    if not sample.log.exists:
        return f"its log {sample.log.path} does not exist"
    if first_log_size is None or sample.log.size <= first_log_size:
        return f"its log {sample.log.path} did not grow"
    return None


async def _verify_nodes(config: Config, job_id: str, timeout: float, poll_s: float) -> tuple[list[str], list[str]]:
    """(nodes where the job's run is proven, `node: why not` for the others) within `timeout`."""
    fleet = await Fleet.open(replace(config, target=replace(config.target, slurm_job=job_id, hosts=())))
    try:
        deadline = time.monotonic() + timeout

        async def prove(node: FleetNode) -> str | None:
            first_size: int | None = None
            why: str | None = "the node did not answer"
            while True:
                try:
                    _, sample = await sample_once(node.target, node.config, 0.0)
                    why = node_proof(sample, first_size)
                    if why is None:
                        return None
                    if first_size is None and sample.log is not None and sample.log.exists:
                        first_size = sample.log.size
                except TargetError as exc:
                    why = str(exc)
                if time.monotonic() >= deadline:
                    return why
                await asyncio.sleep(poll_s)

        found = await asyncio.gather(*(prove(n) for n in fleet.nodes))
        return (
            [n.name for n, why in zip(fleet.nodes, found) if why is None],
            [f"{n.name}: {why}" for n, why in zip(fleet.nodes, found) if why is not None],
        )
    finally:
        await fleet.close()


def job_lock_file(job_id: str) -> str:
    """The restart lock of Slurm job `job_id`, on the host Slurm is asked on (its commands' target)."""
    return f"{LOCK_FOLDER}/slurm-{job_id}.lock"


async def _restart(
    slurm: SlurmClient, config: Config, plan: FleetRestartPlan, t: _Timing
) -> AsyncGenerator[StepEvent, None]:
    """The restart under the job's lock: one restart of a job at a time (two watches, a watch and a
    person), and under it the job must still be the one planned, else nothing is asked of Slurm."""
    path = job_lock_file(plan.job_id)
    try:
        lock = await take_lock(slurm.target, path, lock_owner())
    except LockBusy as exc:
        yield StepEvent("lock", StepStatus.FAILED, f"another restart of job {plan.job_id} holds its lock {exc.path}:"
                        f" {describe_lock_owner(exc.owner)}; nothing done", {"lock": exc.path})
        return
    except TargetError as exc:
        yield StepEvent("lock", StepStatus.FAILED, f"cannot take the restart lock {path}: {exc}; nothing done")
        return
    try:
        try:
            job = await slurm.job(plan.job_id)
        except SlurmError as exc:
            yield StepEvent("lock", StepStatus.FAILED, f"{exc}; nothing done", {"lock": path})
            return
        if (job.restarts, job.state) != (plan.restarts, plan.state):
            yield StepEvent("lock", StepStatus.FAILED, f"job {plan.job_id} changed since it was planned (now {job.state},"
                            f" {job.restarts} restarts; planned {plan.state}, {plan.restarts}): restarted meanwhile;"
                            " nothing done", {"lock": path})
            return
        held = f"held ({path})" if lock.previous is None else (
            f"taken over from {describe_lock_owner(lock.previous)}, whose holder is gone ({path})")
        yield StepEvent("lock", StepStatus.OK if lock.previous is None else StepStatus.WARNING, held, {"lock": path})
        async for event in _locked_restart(slurm, config, plan, t):
            yield event
    finally:
        await lock.release()


async def _locked_restart(
    slurm: SlurmClient, config: Config, plan: FleetRestartPlan, t: _Timing
) -> AsyncGenerator[StepEvent, None]:
    job_id = plan.job_id
    try:
        if plan.mode == "requeue":
            yield StepEvent("stop", StepStatus.RUNNING, f"scontrol requeue {job_id}")
            await slurm.requeue(job_id)
            gone = lambda job: job.restarts > plan.restarts or job.waiting  # noqa: E731
        else:
            yield StepEvent("stop", StepStatus.RUNNING, f"scancel {job_id}")
            await slurm.cancel(job_id)
            gone = lambda job: not job.active  # noqa: E731
        yield StepEvent("stop", StepStatus.OK, f"Slurm accepted the {'requeue' if plan.mode == 'requeue' else 'cancel'}")

        yield StepEvent("wait", StepStatus.RUNNING, f"until Slurm has ended job {job_id} on every node")
        job = await _poll_job(slurm, job_id, gone, t.stop_timeout_s, t.poll_s)
        if not gone(job):
            yield StepEvent("wait", StepStatus.FAILED, f"job {job_id} still {job.state} after {t.stop_timeout_s:g} s; nothing submitted")
            return
        yield StepEvent("wait", StepStatus.OK, f"job {job_id} is {job.state}")

        if plan.mode == "resubmit":
            assert plan.submit is not None
            yield StepEvent("submit", StepStatus.RUNNING, plan.submit)
            job_id = await slurm.submit(plan.submit, cwd=plan.cwd)
            yield StepEvent("submit", StepStatus.OK, f"new job {job_id}", {"job_id": job_id})

        yield StepEvent("start", StepStatus.RUNNING, f"until Slurm runs job {job_id}")
        job = await _poll_job(slurm, job_id, lambda j: j.state == "RUNNING" or not (j.waiting or j.active),
                              t.start_timeout_s, t.poll_s)
        if job.state != "RUNNING":
            why = f" ({job.reason})" if job.reason else ""
            yield StepEvent("start", StepStatus.FAILED, f"job {job_id} is {job.state}{why} after {t.start_timeout_s:g} s",
                            {"job_id": job_id})
            return
        yield StepEvent("start", StepStatus.OK, f"job {job_id} runs on {job.nodes}", {"job_id": job_id, "nodes": job.nodes})
    except SlurmError as exc:
        yield StepEvent("slurm", StepStatus.FAILED, str(exc))
        return

    yield StepEvent("verify", StepStatus.RUNNING, f"looking for the run on every node of job {job_id}")
    try:
        alive, missing = await _verify_nodes(config, job_id, t.verify_timeout_s, t.poll_s)
    except FleetError as exc:
        yield StepEvent("verify", StepStatus.FAILED, str(exc), {"job_id": job_id})
        return
    data = {"job_id": job_id, "nodes": alive, "missing": missing}
    if missing or not alive:
        yield StepEvent("verify", StepStatus.FAILED,
                        f"job {job_id} not proven within {t.verify_timeout_s:g} s: {'; '.join(missing) or 'no node'}", data)
        return
    yield StepEvent("verify", StepStatus.OK, f"job {job_id}: the run is alive on {len(alive)} node(s)", data)


def restarted_job(event: StepEvent | OutputLine) -> str | None:
    """The job ID Slurm runs after a restart (a resubmit's new one), from the restart's `start` step once it is OK."""
    if isinstance(event, StepEvent) and event.step == "start" and event.status is StepStatus.OK:
        return event.data.get("job_id")
    return None


def execute_fleet_restart(
    slurm: SlurmClient,
    config: Config,
    plan: FleetRestartPlan,
    *,
    stop_timeout_s: float = 120.0,
    start_timeout_s: float = 300.0,
    verify_timeout_s: float = 60.0,
    poll_s: float = 0.5,
    audit: bool = True,
    on_record: RecordListener | None = None,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Stop through Slurm, wait, resubmit if planned, wait for the start, verify every node; audited
    unless `audit` is False (--no-audit), each record also told to `on_record` (a watch's journal)."""
    timing = _Timing(stop_timeout_s, start_timeout_s, verify_timeout_s, poll_s)
    return audited(
        _restart(slurm, config, plan, timing),
        log=AuditLog(config.audit_log, on_record=on_record) if audit else None,
        action="fleet restart",
        target=slurm.target,
        plan=plan.as_json(),
    )


async def execute_fleet_warmup(
    nodes: list[FleetNode], plan: WarmupPlan, *, audit: bool = True, confirmed: Collection[str] = ()
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """The warmup on every node at once (each node's steps one at a time, each audited unless `audit`
    is False: --no-audit); events tagged `node: step`. `confirmed`: as for execute_warmup."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def run(node: FleetNode) -> None:
        try:
            async for event in execute_warmup(node.target, node.config, plan, audit=audit, confirmed=confirmed):
                if isinstance(event, StepEvent):
                    event = replace(event, step=f"{node.name}: {event.step}", data={**event.data, "node": node.name})
                else:
                    event = replace(event, step=f"{node.name}: {event.step}")
                await queue.put(event)
        except (TargetError, ActionRefused) as exc:
            await queue.put(StepEvent(f"{node.name}: warmup", StepStatus.FAILED, str(exc), {"node": node.name}))
        finally:
            await queue.put(done)

    tasks = [asyncio.ensure_future(run(node)) for node in nodes]
    try:
        remaining = len(tasks)
        while remaining:
            event = await queue.get()
            if event is done:
                remaining -= 1
            else:
                yield event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

