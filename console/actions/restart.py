"""Safe kill-and-relaunch: plan, then lock, stop, wait for GPU memory, launch once, verify.

The plan is pure data: which processes (found by the sampling agent's selection, never by
a second pattern match), their process groups and start times, the GPU memory each holds,
and the exact launch command line. It guards the operator: a plan whose targets include
PID 1, Pulse or its ancestors (on the target: the shell chain that runs Pulse's commands),
a program Pulse runs, sshd or a login shell, whose match selects everything (it matches the
empty string), whose pidfile is not a regular file (a symbolic link included) or holds no
usable PID, whose match found several unrelated process trees the operator did not choose
between, or whose run another restart is restarting now, is refused (PlanRefused, with what
was found); --force does not override it. A pidfile whose PID does not look like the run
(not found by the match, or started after the pidfile was written: see guards.py) is stale:
the plan says so and nothing is signalled by it. Executing it:

0. lock: one restart of a run at a time. A process agent on the target holds an exclusive
   flock(2) on the run's lock file (beside its pidfile, else in ~/.local/state/pulse/locks/
   there, named by a hash of the run's match and log) from before the first signal through
   verify, with the owner (Pulse's host, user and PID, since when) written in it. A second
   restart reads who holds it and since when, and stops there, signalling nothing. The holder
   lets go when Pulse releases it, cancels, exits or its link closes, and when no beat came
   for 30 s (a link cut without a hang-up); an owner left in the file by a holder that is gone
   (killed outright) is stale: the next restart takes the lock over and says whose it was.
1. stop: SIGTERM to each planned process group (only a group whose leader is planned, whose
   every member is planned, and that holds neither Pulse nor an ancestor of it; any other
   planned process alone), each PID re-verified by its start time right before the signal
   so a reused PID is never hit; SIGKILL what is left after the grace. A process in D state
   (stuck in the kernel) or a zombie is reported, not waited on.
2. gpu: wait until the old PIDs no longer hold GPU memory, and no GPU holder outside the plan
   that is taken for the run's (below) holds any; refuse to launch if one still does after the
   timeout, unless forced.
3. alive: no process of the run, by match or by pidfile, may be left; else nothing is launched.
   A lock lost meanwhile (its link cut) is taken again first, or nothing is launched.
4. launch: a command of its own (never the same shell line as the stop), in a new session,
   stdout and stderr appended to a fresh log, PID written to the pidfile. If the link drops
   here the launch state is unknown: it is checked, and never retried.
5. verify: the new PID (or, when the launch daemonized, new processes matching the run) is
   alive after a few seconds and the log grows; a failed verify shows the log's last lines.

GPU holders outside the plan. The run's GPUs are those its planned processes hold memory on
when planned; when they hold none there (their contexts are under other PIDs, or listed under
host PIDs from a container), every GPU counts. A holder the plan does not stop is one of:
- the run's: it shares a planned process's session or process group (Pulse's own aside), or
  it holds memory on one of the run's GPUs and started after the run's first process did (a
  helper it double-forked, with another command line). The plan names it; it is not
  signalled, and nothing is launched while it holds memory.
- not visible here (a PID the driver lists that this /proc does not show: a host PID seen from
  a container, or a process that ended while its memory is still being freed): waited for like
  the old PIDs when on one of the run's GPUs.
- another job: it was there before the run started and shares neither session nor group. It
  never blocks, and neither does anything on a GPU that is not the run's. A holder that
  appears on one of the run's GPUs after the plan (not another job's seen then) blocks too.
Inside a PID namespace this relies on the driver listing the namespace's own PIDs, as the 580
driver does; where it lists host PIDs, those are the "not visible here" case. --force launches
anyway.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import hashlib
import json
import os
import re
import shlex
import socket
import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    OutputLine,
    RecordListener,
    StepEvent,
    StepStatus,
    audited,
    checked_seconds,
    refuse_if_read_only,
)
from console.actions.custom import check_env_names, fill_placeholders, shell_path
from console.actions.guards import (
    PROBE_TIMEOUT_S,
    Probe,
    ProcessTree,
    choose_tree,
    describe_gpu_use,
    describe_lock_owner,
    log_glob,
    matches_empty,
    pidfile_refusals,
    pidfile_stale_reason,
    probe_target,
    process_trees,
    protected_reason,
    tree_facts,
)
from console.actions.shown import HiddenControls, hidden_controls
from console.config import Config, RunConfig
from console.diagnose import Verdict
from console.model import ProcessReading, Sample
from console.observe.remote_process import (
    AgentRefused,
    HeldLock,
    LockBusy,
    ProcessRef,
    SignalTarget,
    launch,
    read_processes,
    send_signal,
    take_lock,
)
from console.observe.sampler import sample_once
from console.observe.textsafe import sanitize, visible
from console.remote.target import Target, TargetError
from console.units import format_gib
from console.verdicts import is_problem

@dataclass(frozen=True, slots=True)
class PlannedProcess:
    """One process the restart will stop, as it was when planned."""

    pid: int
    pgid: int
    start_ticks: int
    """Field 22 of /proc/PID/stat: with the PID, identifies the process across PID reuse."""
    state: str
    cmdline: str
    gpu_mib: int | None
    """GPU memory the driver lists for this PID, all its GPUs together (None when it lists none)."""
    gpu_use: tuple[tuple[int, int | None], ...] = ()
    """(GPU index, MiB or None when unknown) for each GPU the driver lists this PID on."""

    def describe_gpu(self) -> str:
        """Its GPU memory as a person reads it: `GPU 0–7: 79.6 GiB each`, `GPU 2: 12.0 GiB`."""
        if not self.gpu_use:
            return "no GPU memory listed" if self.gpu_mib is None else f"{format_gib(self.gpu_mib)} GPU"
        return describe_gpu_use(self.gpu_use)

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(self.pid, self.start_ticks)


@dataclass(frozen=True, slots=True)
class OutsideHolder:
    """A process the plan does not stop that holds GPU memory and is taken for the run's (see above)."""

    pid: int
    gpus: tuple[int, ...]
    label: str
    why: str


@dataclass(frozen=True, slots=True)
class RestartPlan:
    """Exactly what the restart will do."""

    processes: tuple[PlannedProcess, ...]
    signals: tuple[SignalTarget, ...]
    held_gpu_pids: tuple[int, ...]
    """Driver PIDs whose GPU memory must be gone before the launch."""
    launch: str
    cwd: str | None
    env: dict[str, str]
    log: str
    pidfile: str | None
    launch_argv: tuple[str, ...]
    """The exact program the launch step starts (in a new session, through the process agent)."""
    grace_s: float
    gpus_read: bool = True
    """False when the target gave no GPU readings: memory release cannot be checked."""
    notes: tuple[str, ...] = ()
    """What the operator should know before confirming (e.g. GPU PIDs are host PIDs)."""
    trees: tuple[ProcessTree, ...] = ()
    """The unrelated process trees the match found (when it found more than one, or --root named one)."""
    root_needed: bool = False
    """Refused until the operator chooses among `trees`: one root (--root) or every tree (--all-roots)."""
    warnings: tuple[str, ...] = ()
    """What the operator should weigh before confirming a plan that may run (e.g. the run is healthy)."""
    left_alone: tuple[int, ...] = ()
    """Matching processes the operator chose not to stop (the other trees when --root names one)."""
    refusals: tuple[str, ...] = ()
    """Why this plan must not run; a plan with refusals is never executed, --force or not."""
    run_gpus: tuple[int, ...] | None = None
    """The GPUs the planned processes hold memory on; None: every GPU counts (they hold none listed)."""
    outside_gpu: tuple[OutsideHolder, ...] = ()
    """GPU holders the plan does not stop that are taken for the run's: nothing launches while they hold memory."""
    shared_gpu: tuple[tuple[int, int], ...] = ()
    """(GPU, PID) of other jobs' memory seen when planned: it never blocks the launch."""

    def as_json(self) -> dict:
        return {
            "processes": [
                {"pid": p.pid, "pgid": p.pgid, "start_ticks": p.start_ticks, "state": p.state,
                 "cmdline": p.cmdline, "gpu_mib": p.gpu_mib}
                for p in self.processes
            ],
            "signals": [s.dest for s in self.signals],
            "held_gpu_pids": list(self.held_gpu_pids),
            "launch": self.launch,
            "cwd": self.cwd,
            "env": self.env,
            "log": self.log,
            "pidfile": self.pidfile,
            "launch_argv": list(self.launch_argv),
            "grace_s": self.grace_s,
            "gpus_read": self.gpus_read,
            "notes": list(self.notes),
            "trees": [tree.as_json() for tree in self.trees],
            "root_needed": self.root_needed,
            "warnings": list(self.warnings),
            "left_alone": list(self.left_alone),
            "refusals": list(self.refusals),
            "run_gpus": None if self.run_gpus is None else list(self.run_gpus),
            "outside_gpu": [{"pid": h.pid, "gpus": list(h.gpus), "cmdline": h.label, "why": h.why}
                            for h in self.outside_gpu],
            "shared_gpu": [list(pair) for pair in self.shared_gpu],
        }

    @property
    def hidden(self) -> tuple[HiddenControls, ...]:
        """The launch, when it holds control characters (it then runs only once confirmed escaped)."""
        return hidden_controls([("[run] launch", self.launch)])

    def describe(self) -> list[str]:
        """The plan as lines for a confirmation screen or a terminal; every line as `visible` shows it
        (the launch, command lines and paths from the target escaped), never raw."""
        lines = [f"WARNING: {warning}" for warning in self.warnings]
        if self.processes:
            lines.append(f"stop {len(self.processes)} process(es): SIGTERM, SIGKILL after {self.grace_s:g} s")
            for p in self.processes:
                lines.append(f"  {p.pid:>8}  pgid {p.pgid:<8} {p.state}  {p.describe_gpu():<24} {p.cmdline}")
            lines.append("  signals to: " + ", ".join(s.describe() for s in self.signals))
        else:
            lines.append("stop: no run process found; nothing to stop")
        if self.trees:
            lines.append(f"the match found {len(self.trees)} unrelated process trees:")
            lines += [f"  {tree.describe()}" for tree in self.trees]
        if self.left_alone:
            lines.append("left alone (not the run, as chosen): " + " ".join(map(str, self.left_alone)))
        if self.held_gpu_pids:
            lines.append("wait until GPU memory of PIDs " + " ".join(map(str, self.held_gpu_pids)) + " is released")
        for h in self.outside_gpu:
            lines.append(f"GPU memory outside the plan: PID {h.pid} on GPU {','.join(map(str, h.gpus))} ({h.label}),"
                         f" {h.why}: not signalled; nothing is launched while it holds memory")
        lines.append(f"launch: {self.launch}")
        if self.cwd:
            lines.append(f"  in {self.cwd}")
        lines.append(f"  log -> {self.log}")
        if self.pidfile:
            lines.append(f"  pid -> {self.pidfile}")
        lines += [f"note: {note}" for note in self.notes]
        lines += [f"REFUSED: {why}" for why in self.refusals]
        return [visible(line) for line in lines] + [hidden.plan_line() for hidden in self.hidden]


class PlanRefused(ActionRefused):
    """A plan the guards refuse: the message gives the reasons, `lines` the plan that shows them, and
    `plan` the data (its `root_needed` and `trees`: a choice the operator can make to plan again)."""

    def __init__(self, plan: RestartPlan) -> None:
        super().__init__("refused: " + "; ".join(plan.refusals) + " (--force does not override this)")
        self.plan = plan
        self.lines = plan.describe()


def timestamp(at: float) -> str:
    """The `{started}` value: local time as 20261129-234501."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(at))


def is_simple_command(command: str) -> bool:
    """True when `command` is one command (no ; & | && || or newline), so `exec` can replace bash with it."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return False
    return "\n" not in command and not any(token and set(token) <= set(";&|()<>") for token in tokens)


#: `NAME=value` words in front of a command (quoted values included), as bash reads them.
_LEADING_ASSIGNMENTS = re.compile(r"""\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")*\s+)*""")


def exec_body(launch: str) -> str:
    """What the launch's bash runs: a simple command replaces the bash (`exec`) so the recorded
    PID is the run itself; environment assignments in front of it stay in front of `exec`."""
    if not is_simple_command(launch):
        return launch
    assignments = _LEADING_ASSIGNMENTS.match(launch)
    end = assignments.end() if assignments else 0  # the pattern matches any text, if only its empty start
    command = launch[end:]
    return f"{launch[:end]}exec {command}" if command else launch


def launch_argv(launch: str) -> tuple[str, ...]:
    """The launch as the program the process agent starts: bash running it (see exec_body)."""
    return ("bash", "-c", exec_body(launch))


def launch_env(env: dict[str, str]) -> dict[str, str]:
    """The launch's environment additions: unbuffered Python output first, so the log shows progress."""
    return {"PYTHONUNBUFFERED": "1", **env}


def signal_targets(
    processes: Iterable[PlannedProcess], group_members: dict[int, tuple[int, ...]], own_groups: set[int]
) -> list[SignalTarget]:
    """One signal per whole group of planned processes, one per PID for the rest.

    A group is signalled only when its leader is planned, every member is planned, and
    neither Pulse nor an ancestor of it is in it: otherwise the signal would reach a
    launcher shell, an operator's session or Pulse itself, so each planned process goes alone.
    """
    planned = {p.pid: p for p in processes}
    whole = {
        pgid
        for pgid, members in group_members.items()
        if pgid in planned and pgid not in own_groups and set(members) <= set(planned)
    }
    targets = []
    for p in planned.values():
        if p.pgid in whole:
            if p.pid == p.pgid:
                targets.append(SignalTarget(p.ref, group=True))
        else:
            targets.append(SignalTarget(p.ref))
    return targets


#: Where a run's restart lock lives on its target when it has no pidfile (see lock_file).
LOCK_FOLDER = "~/.local/state/pulse/locks"


def lock_file(run: RunConfig) -> str:
    """The restart lock of `run` on its target: beside its pidfile, else in Pulse's state folder
    there, named by a hash of the run's match and log (two runs never share one)."""
    if run.pidfile:
        return run.pidfile + ".pulse-lock"
    key = hashlib.sha256(json.dumps([run.match or "", run.log or ""]).encode()).hexdigest()[:16]
    return f"{LOCK_FOLDER}/restart-{key}.lock"


def lock_owner() -> dict:
    """Who takes a restart lock, as its file records it: this Pulse's host, user and PID."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None  # no login name here (a container without a passwd entry)
    return {"what": "restart", "host": socket.gethostname(), "user": user, "pid": os.getpid()}


def _gpu_mib_by_pid(sample: Sample) -> dict[int, int | None]:
    held: dict[int, int | None] = {}
    for gpu in sample.gpus:
        for process in gpu.processes:
            before = held.get(process.pid)
            if process.used_mib is None:
                held.setdefault(process.pid, None)
            else:
                held[process.pid] = (before or 0) + process.used_mib
    return held


def gpu_holders(
    sample: Sample, processes: list[PlannedProcess], probe: Probe, left_alone: Iterable[int] = ()
) -> tuple[tuple[int, ...] | None, list[int], list[OutsideHolder], list[tuple[int, int]]]:
    """The GPU holders the plan does not stop, sorted by the rule in the module docstring:
    (the run's GPUs or None for every GPU, PIDs not visible here to wait for on them, holders
    taken for the run's, (GPU, PID) of other jobs). What the operator chose to leave alone
    (`left_alone`: the trees --root did not name) is another job's by their word."""
    planned = {p.pid for p in processes}
    chosen_not_the_run = set(left_alone)
    on_gpu = {gpu.index: {p.pid for p in gpu.processes} for gpu in sample.gpus}
    run_gpus = tuple(sorted(index for index, pids in on_gpu.items() if pids & planned)) or None
    own = probe.own
    facts = [probe.procs[p.pid] for p in processes if p.pid in probe.procs]
    sessions = {f.sid for f in facts} - {f.sid for f in own}
    groups = {f.pgid for f in facts} - {f.pgid for f in own}
    first_start = min((p.start_ticks for p in processes), default=None)
    unseen: set[int] = set()
    outside: dict[int, tuple[set[int], str]] = {}
    shared = []
    for index, pids in on_gpu.items():
        on_run_gpu = run_gpus is None or index in run_gpus
        for pid in sorted(pids - planned):
            holder = probe.procs.get(pid)
            why = None
            if holder is None:
                if on_run_gpu:
                    unseen.add(pid)
                continue
            if pid in chosen_not_the_run:
                pass
            elif holder.sid in sessions:
                why = "in the run's session"
            elif holder.pgid in groups:
                why = "in the run's process group"
            elif on_run_gpu and first_start is not None and holder.start_ticks >= first_start:
                why = "started after the run did (a helper it left behind?)"
            if why is None:
                shared.append((index, pid))
            else:
                outside.setdefault(pid, (set(), why))[0].add(index)
    holders = [OutsideHolder(pid, tuple(sorted(gpus)), probe.procs[pid].command(), why)
               for pid, (gpus, why) in sorted(outside.items())]
    return run_gpus, sorted(unseen), holders, shared


async def plan_restart(
    target: Target,
    config: Config,
    *,
    read_only: bool = False,
    window_s: float = 0.2,
    root: int | None = None,
    all_roots: bool = False,
    verdict: Verdict | None = None,
) -> RestartPlan:
    """Find the run (the agent's selection), read groups, start times and GPU memory; build the launch.

    `root` names the run when the match found several unrelated process trees (the others
    are left alone); `all_roots` says to stop every tree. `verdict`: the run's verdict now, as
    the caller judged it (the plan warns when the run is healthy). ActionRefused when the restart
    cannot be planned as configured; PlanRefused when the guards refuse what was found (its
    plan's `root_needed` when only a choice among the trees is missing).
    """
    refuse_if_read_only("restart", read_only)
    run = config.run
    if not run.launch:
        raise ActionRefused(f"{config.source}: no [run] launch command configured; restart needs one")
    if not run.match and not run.pidfile:
        raise ActionRefused(f"{config.source}: set [run] match or pidfile so restart can find the run to stop")
    if not run.log:
        raise ActionRefused(f"{config.source}: set [run] log: restart appends the new run's output to it")
    checked_seconds("[run] grace_s", run.grace_s)
    if run.match and matches_empty(run.match):
        raise ActionRefused(
            f"refused: [run] match {run.match!r} matches the empty string, so it selects every process;"
            " match the run's script name (--force does not override this)"
        )
    lock = lock_file(run)
    try:
        _, sample = await sample_once(target, config, window_s)
        found = list(sample.processes)
        matched = None
        if run.match and run.pidfile:
            # The agent lets a pidfile win over the match: what the match finds is the run's too.
            _, by_match = await sample_once(target, _by_match(config), 0.0)
            matched = list(by_match.processes)
            found += [p for p in matched if p.pid not in {f.pid for f in found}]
        holders = {p.pid for gpu in sample.gpus for p in gpu.processes} - {p.pid for p in found}
        probe = await probe_target(target, [p.pid for p in found] + sorted(holders), run.pidfile, lock)
    except TargetError as exc:
        raise ActionRefused(f"cannot read the run's processes: {exc}") from None
    notes = []
    if sample.process_error:
        notes.append(sample.process_error)
    refusals: list[str] = _lock_refusals(lock, probe, notes)
    stale = pidfile_stale_reason(probe, None if matched is None else {p.pid for p in matched})
    if stale:
        assert probe.named is not None
        notes.append(f"pidfile {run.pidfile} names {probe.named.label()}, which is not the run: {stale};"
                     " nothing is signalled by it")
        # What the agent selected by the pidfile is that process's tree: only the match finds the run.
        found = matched or []
    gpu_mib = _gpu_mib_by_pid(sample)
    stdout_glob = log_glob(run.log)
    pidfile_pid = probe.named.pid if probe.named is not None and not stale else None
    pulse_pids = {p.pid for p in probe.own}

    trees = process_trees(found)
    listed: tuple[ProcessTree, ...] = ()
    kept = {p.pid for p in found}
    root_needed = False
    if len(trees) > 1 or root is not None:
        choice = choose_tree((tree_facts(tree, sample.gpus, stdout_glob, pidfile_pid) for tree in trees.values()),
                             root, all_roots)
        listed = choice.trees
        kept = {pid for tree in listed if tree.root in choice.stop for pid in tree.pids}
        if choice.refusal is not None:
            refusals.append(choice.refusal)
            root_needed = True
    left_alone = tuple(sorted(p.pid for p in found if p.pid not in kept))

    processes = []
    for p in found:
        facts = probe.procs.get(p.pid)
        if p.pid not in kept or facts is None:
            continue
        why = protected_reason(facts, pulse_pids)
        if why:
            refusals.append(f"{facts.label()} is {why}")
        use = tuple((gpu.index, held.used_mib) for gpu in sample.gpus for held in gpu.processes if held.pid == p.pid)
        processes.append(
            PlannedProcess(p.pid, facts.pgid, facts.start_ticks, facts.state, p.cmdline, gpu_mib.get(p.pid), use)
        )
    refusals += pidfile_refusals(run.pidfile, probe, pulse_pids, notes)

    run_gpus, unseen, outside, shared = gpu_holders(sample, processes, probe, left_alone)
    held = sorted({p.pid for p in processes if p.pid in gpu_mib} | set(unseen))
    if unseen and sample.in_pid_namespace:
        notes.append(
            f"inside a PID namespace the driver lists {len(unseen)} PID(s) not visible here (host PIDs):"
            " waiting until their GPU contexts are gone too"
        )
    elif unseen:
        notes.append("the driver lists PID(s) " + " ".join(map(str, unseen)) + " that are not running:"
                     " waiting until their GPU memory is freed")
    for index, pid in shared:
        if run_gpus is not None and index in run_gpus:
            notes.append(f"{probe.procs[pid].label()} holds memory on GPU {index} too and was there before the run:"
                         " another job, left alone (it does not block the launch)")
    if sample.gpu_error and not sample.gpus:
        notes.append(f"no GPU readings ({sample.gpu_error}): GPU memory release cannot be checked")
    log = fill_placeholders(run.log, {"started": timestamp(sample.time or time.time())})
    if re.search(r"[*?\[]", log):
        raise ActionRefused(f"{config.source}: [run] log {run.log!r} is a glob; use {{started}} to name each run's log")
    check_env_names(run.env)
    plan = RestartPlan(
        processes=tuple(processes),
        signals=tuple(signal_targets(processes, probe.group_members, {p.pgid for p in probe.own})),
        held_gpu_pids=tuple(held),
        launch=run.launch,
        cwd=run.cwd,
        env=dict(run.env),
        log=log,
        pidfile=run.pidfile,
        launch_argv=launch_argv(run.launch),
        grace_s=run.grace_s,
        gpus_read=bool(sample.gpus),
        notes=tuple(notes),
        trees=listed,
        root_needed=root_needed,
        warnings=tuple(restart_warnings(verdict)),
        left_alone=left_alone,
        refusals=tuple(refusals),
        run_gpus=run_gpus,
        outside_gpu=tuple(outside),
        shared_gpu=tuple(shared),
    )
    if refusals:
        raise PlanRefused(plan)
    return plan


def restart_warnings(verdict: Verdict | None) -> list[str]:
    """What the operator should weigh before restarting a run judged `verdict`: a healthy run loses work."""
    if verdict is None or is_problem(verdict.name):
        return []
    return [f"the run is healthy ({verdict.summary}): restarting it loses the progress since its last checkpoint"]


def _lock_refusals(lock: str, probe: Probe, notes: list[str]) -> list[str]:
    """The restart lock as the plan sees it: held by another restart (refused), stale (a note), unreadable (refused)."""
    if probe.lock == "held":
        return [f"another restart of this run holds its lock {lock}: {describe_lock_owner(probe.lock_owner)}"]
    if probe.lock == "stale":
        notes.append(f"the restart lock {lock} was left by {describe_lock_owner(probe.lock_owner)}, whose holder"
                     " is gone: it will be taken over")
    elif probe.lock == "error":
        why = (probe.lock_owner or {}).get("unreadable", "?")
        return [f"the restart lock {lock} cannot be read ({sanitize(str(why), 80)[0]}): remove what is in its place"]
    return []


@dataclass
class _Timing:
    grace_s: float
    kill_wait_s: float
    gpu_timeout_s: float
    verify_after_s: float
    poll_s: float
    launch_timeout_s: float


#: What a cancel after a step leaves (StepEvent.data "left", and "resume": the next step that continues it).
UNTOUCHED_LEFT = {"left": "nothing was signalled: the run is as it was"}
STOPPED_LEFT = {"left": "the run is stopped and was not relaunched", "resume": "restart", "resume_does": "launch"}


async def _alive(target: Target, plan: RestartPlan) -> dict[int, str]:
    """Planned PIDs that still are the planned process → their state (Z included)."""
    info = await read_processes(target, [p.pid for p in plan.processes])
    return {p.pid: info[p.pid].state for p in plan.processes if p.pid in info and info[p.pid].start_ticks == p.start_ticks}


async def _wait_gone(target: Target, plan: RestartPlan, seconds: float, poll_s: float) -> dict[int, str]:
    """Poll until every planned process is gone or a zombie, or `seconds` pass; what is left."""
    deadline = time.monotonic() + seconds
    while True:
        left = {pid: state for pid, state in (await _alive(target, plan)).items() if state != "Z"}
        if not left or time.monotonic() >= deadline:
            return await _alive(target, plan)
        await asyncio.sleep(poll_s)


async def _stop(target: Target, plan: RestartPlan, t: _Timing) -> AsyncGenerator[StepEvent, None]:
    step = "stop"
    if not plan.processes:
        yield StepEvent(step, StepStatus.SKIPPED, "no run process found; nothing to stop", {**STOPPED_LEFT})
        return
    yield StepEvent(step, StepStatus.RUNNING, "SIGTERM to " + ", ".join(s.describe() for s in plan.signals))
    said = await send_signal(target, "TERM", plan.signals)
    for pid, what in said.items():
        if what == "reused":
            yield StepEvent(step, StepStatus.WARNING, f"PID {pid} is now another process: not signalled", {"pid": pid})
    left = await _wait_gone(target, plan, t.grace_s, t.poll_s)
    killed = 0
    if any(state != "Z" for state in left.values()):
        survivors = [pid for pid, state in left.items() if state != "Z"]
        yield StepEvent(
            step, StepStatus.RUNNING, f"still running after {t.grace_s:g} s: SIGKILL to {' '.join(map(str, survivors))}"
        )
        by_pid = {p.pid: p for p in plan.processes}
        await send_signal(target, "KILL", [SignalTarget(by_pid[pid].ref) for pid in survivors])
        killed = len(survivors)
        left = await _wait_gone(target, plan, t.kill_wait_s, t.poll_s)
    for pid, state in sorted(left.items()):
        if state == "Z":
            yield StepEvent(step, StepStatus.WARNING, f"PID {pid} is a zombie (exited, not yet reaped by its parent)",
                            {"pid": pid, "state": state})
        elif state == "D":
            yield StepEvent(step, StepStatus.WARNING,
                            f"PID {pid} is in D state (uninterruptible, stuck in the kernel or driver): not waiting",
                            {"pid": pid, "state": state})
    # A zombie has exited (it holds no memory); only its parent has yet to read its status.
    stopped = len(plan.processes) - sum(state != "Z" for state in left.values())
    detail = f"{stopped} of {len(plan.processes)} stopped" + (f" ({killed} needed SIGKILL)" if killed else "")
    stuck = [pid for pid, state in left.items() if state not in ("Z", "D")]
    if stuck:
        yield StepEvent(step, StepStatus.FAILED, f"{detail}; still running: {' '.join(map(str, stuck))}")
    else:
        yield StepEvent(step, StepStatus.OK, detail, {"sigkill": killed, **STOPPED_LEFT})


def _holding(sample: Sample, pids: set[int]) -> list[str]:
    return [
        f"PID {p.pid} {p.used_mib if p.used_mib is not None else '?'} MiB on GPU {gpu.index}"
        for gpu in sample.gpus
        for p in gpu.processes
        if p.pid in pids
    ]


def _held_outside(sample: Sample, plan: RestartPlan) -> list[str]:
    """GPU memory held outside the plan that blocks the launch (the module docstring's rule), one text each."""
    waited = set(plan.held_gpu_pids) | {p.pid for p in plan.processes}
    taken = {h.pid: h for h in plan.outside_gpu}
    shared = set(plan.shared_gpu)
    found = []
    for gpu in sample.gpus:
        on_run_gpu = plan.run_gpus is None or gpu.index in plan.run_gpus
        for p in gpu.processes:
            if p.pid in waited:
                continue
            held = f"PID {p.pid} {p.used_mib if p.used_mib is not None else '?'} MiB on GPU {gpu.index}"
            if p.pid in taken:
                found.append(f"{held} ({taken[p.pid].label}), {taken[p.pid].why}")
            elif on_run_gpu and (gpu.index, p.pid) not in shared:
                name = f" ({sanitize(p.name, 60)[0]})" if p.name else ""
                found.append(f"{held}{name}, which appeared on the run's GPU since the plan")
    return found


async def _gpu_release(
    target: Target, config: Config, plan: RestartPlan, t: _Timing, force: bool
) -> AsyncGenerator[StepEvent, None]:
    step = "gpu"
    if not plan.gpus_read:
        yield StepEvent(step, StepStatus.SKIPPED, "no GPU readings: release not checked")
        return
    pids = set(plan.held_gpu_pids) | {p.pid for p in plan.processes}
    yield StepEvent(step, StepStatus.RUNNING, f"waiting up to {t.gpu_timeout_s:g} s for GPU memory to be released")
    deadline = time.monotonic() + t.gpu_timeout_s
    while True:
        _, sample = await sample_once(target, config, 0.0)
        holding, outside = _holding(sample, pids), _held_outside(sample, plan)
        if not holding and not outside:
            detail = "GPU memory of the old PIDs released" if plan.held_gpu_pids else "the run's PIDs held no GPU memory"
            if plan.outside_gpu:
                detail += "; released outside the plan by PID " + " ".join(str(h.pid) for h in plan.outside_gpu)
            yield StepEvent(step, StepStatus.OK, detail)
            return
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(t.poll_s)
    still = [f"still held after {t.gpu_timeout_s:g} s: {'; '.join(holding)}"] if holding else []
    if outside:
        still.append(f"held outside the plan after {t.gpu_timeout_s:g} s: {'; '.join(outside)}")
    data = {"outside": outside} if outside else {}
    if force:
        yield StepEvent(step, StepStatus.WARNING, f"{'; '.join(still)}; launching anyway (--force)", data)
    else:
        yield StepEvent(step, StepStatus.FAILED, f"{'; '.join(still)}; not launching (--force to launch anyway)", data)


async def _log_size(target: Target, log: str) -> int | None:
    result = await target.run(f"stat -c %s -- {shell_path(log)} 2>/dev/null", PROBE_TIMEOUT_S, login=False)
    return int(result.stdout) if result.ok and result.stdout.strip().isdigit() else None


#: How much of the new log a failed verify shows (and the audit keeps).
LOG_TAIL_LINES = 20


def _by_match(config: Config) -> Config:
    """`config` finding the run by its match alone (the agent lets a pidfile win over the match)."""
    return dataclasses.replace(config, run=dataclasses.replace(config.run, pidfile=None))


async def _run_processes(target: Target, config: Config) -> list[ProcessReading]:
    """The processes matching the run now (none without a match), zombies left out."""
    if not config.run.match:
        return []
    _, sample = await sample_once(target, _by_match(config), 0.0)
    return [p for p in sample.processes if p.state not in ("Z", "X")]


def _names(processes: Iterable[ProcessReading]) -> str:
    return ", ".join(f"PID {p.pid} ({p.cmdline[:60]})" for p in processes)


async def _still_alive(
    target: Target, config: Config, plan: RestartPlan, force: bool
) -> AsyncGenerator[StepEvent, None]:
    """The check before the launch: no process of the run, by match or by pidfile, may be left."""
    step = "alive"
    left_alone = set(plan.left_alone)
    matched = await _run_processes(target, config)
    alive = [p for p in matched if p.pid not in left_alone]
    named = None
    if plan.pidfile:
        probe = await probe_target(target, [], plan.pidfile)
        if probe.pidfile in ("notregular", "symlink"):
            yield StepEvent(step, StepStatus.FAILED, f"pidfile {plan.pidfile} is no longer a regular file; not launching")
            return
        stale = pidfile_stale_reason(probe, {p.pid for p in matched} if config.run.match else None)
        named = probe.named if probe.named is not None and probe.named.state not in ("Z", "X") and not stale else None
    described = [_names(alive)] if alive else []
    if named is not None and named.pid not in {p.pid for p in alive}:
        described.append(f"{named.label()} named by the pidfile")
    if not described:
        yield StepEvent(step, StepStatus.OK, "no process of the run is left")
        return
    states = [p.state for p in alive] + ([named.state] if named is not None else [])
    if force and all(state == "D" for state in states):
        yield StepEvent(step, StepStatus.WARNING,
                        f"still there, stuck in D state: {'; '.join(described)}; launching anyway (--force)")
        return
    yield StepEvent(step, StepStatus.FAILED, f"still alive: {'; '.join(described)}; not launching a second run",
                    {"pids": [p.pid for p in alive] + ([named.pid] if named is not None else [])})


async def _after_unknown_launch(target: Target, config: Config, plan: RestartPlan) -> StepEvent:
    """What can be learned about a launch whose result never came back (never launches again)."""
    step = "check"
    try:
        _, sample = await sample_once(target, _by_match(config) if config.run.match else config, 0.0)
    except TargetError as exc:
        return StepEvent(step, StepStatus.FAILED, f"cannot check ({exc}); look for the run before launching again")
    old = {p.pid for p in plan.processes}
    new = [p.pid for p in sample.processes if p.pid not in old]
    if new:
        return StepEvent(step, StepStatus.WARNING,
                         f"run process(es) {' '.join(map(str, new))} found: the launch happened; do not launch again",
                         {"pids": new})
    return StepEvent(step, StepStatus.WARNING,
                     "no new run process found yet; the launch may still start: check before launching again")


async def _log_tail(target: Target, log: str) -> list[str]:
    """The log's last lines (from at most its last 16 KiB), made safe for a terminal."""
    script = f"tail -c 16384 -- {shell_path(log)} 2>/dev/null | tail -n {LOG_TAIL_LINES}"
    try:
        result = await target.run(script, PROBE_TIMEOUT_S, login=False)
    except TargetError:
        return []
    return [sanitize(line, 300)[0] for line in result.stdout.splitlines()]


async def _verify(
    target: Target, config: Config, plan: RestartPlan, pid: int, t: _Timing
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    step = "verify"
    data = {"pid": pid, "log": plan.log, "pidfile": plan.pidfile}
    yield StepEvent(step, StepStatus.RUNNING, f"checking PID {pid} in {t.verify_after_s:g} s", data)
    try:
        size_at_launch = await _log_size(target, plan.log)
        await asyncio.sleep(t.verify_after_s)
        info = await read_processes(target, [pid])
        size_now = await _log_size(target, plan.log)
        grew = size_now is not None and size_now > (size_at_launch or 0)
        gone = pid not in info or info[pid].state in ("Z", "X")
        old = {p.pid for p in plan.processes}
        # A launch that daemonizes: its first PID exits, the run lives on in new processes.
        daemons = [p for p in await _run_processes(target, config) if p.pid not in old and p.pid != pid] if gone else []
    except TargetError as exc:
        yield StepEvent(step, StepStatus.FAILED, f"cannot check PID {pid}: {exc}", data)
        return
    if gone and daemons:
        data = {**data, "pid": daemons[0].pid, "launcher_pid": pid, "pids": [p.pid for p in daemons]}
        growth = "log grows" if grew else f"log {plan.log} has not grown yet"
        yield StepEvent(step, StepStatus.OK, f"launcher PID {pid} exited; the run daemonized: {_names(daemons)} alive, "
                        f"{growth}; log {plan.log}", data)
        return
    if gone:
        tail = await _log_tail(target, plan.log)
        for line in tail:
            yield OutputLine(step, line)
        data = {**data, "log_tail": tail}
        unseen = "" if config.run.match else " (without [run] match a run that daemonized cannot be found)"
        yield StepEvent(step, StepStatus.FAILED, f"PID {pid} exited within {t.verify_after_s:g} s and no new process"
                        f" of the run is alive{unseen}; last lines of {plan.log} above", data)
        return
    if not grew:
        yield StepEvent(step, StepStatus.WARNING,
                        f"log {plan.log} has not grown in {t.verify_after_s:g} s (slow start or buffered output)", data)
    yield StepEvent(step, StepStatus.OK, f"new run PID {pid} alive, log {plan.log}", data)


async def _restart(
    target: Target, config: Config, plan: RestartPlan, t: _Timing, force: bool
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """The restart under its lock: nothing is signalled unless the lock is held, and it is let go
    whatever happens after (a failure, a cancel, a closed screen)."""
    step = "lock"
    path = lock_file(config.run)
    try:
        lock = await take_lock(target, path, lock_owner())
    except LockBusy as exc:
        yield StepEvent(step, StepStatus.FAILED, f"another restart of this run holds its lock {exc.path}:"
                        f" {describe_lock_owner(exc.owner)}; nothing signalled", {"lock": exc.path})
        return
    except TargetError as exc:
        yield StepEvent(step, StepStatus.FAILED, f"cannot take the restart lock {path}: {exc}; nothing signalled")
        return
    try:
        if lock.previous is not None:
            yield StepEvent(step, StepStatus.WARNING, f"taken over from {describe_lock_owner(lock.previous)}, whose"
                            f" holder is gone ({path})", {"lock": path, **UNTOUCHED_LEFT})
        else:
            yield StepEvent(step, StepStatus.OK, f"held ({path})", {"lock": path, **UNTOUCHED_LEFT})
        async for event in _locked_restart(target, config, plan, t, force, lock):
            yield event
    finally:
        await lock.release()


async def _locked_restart(
    target: Target, config: Config, plan: RestartPlan, t: _Timing, force: bool, lock: HeldLock
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    stopped_ok = gpu_ok = alive_ok = True
    phase = "stop"
    try:
        async for event in _stop(target, plan, t):
            stopped_ok = stopped_ok and event.status is not StepStatus.FAILED
            yield event
        phase = "gpu"
        async for event in _gpu_release(target, config, plan, t, force):
            gpu_ok = gpu_ok and event.status is not StepStatus.FAILED
            yield event
        phase = "lock"
        if lock.lost is not None:
            lost = lock.lost
            try:
                await lock.take_again()
            except LockBusy as exc:
                yield StepEvent(phase, StepStatus.FAILED, f"the lock was lost ({lost}) and another restart took it:"
                                f" {describe_lock_owner(exc.owner)}; not launching")
                yield StepEvent("launch", StepStatus.SKIPPED, "not launched: another restart holds the lock")
                return
            yield StepEvent(phase, StepStatus.WARNING, f"the lock was lost ({lost}) and taken again")
        phase = "alive"
        async for event in _still_alive(target, config, plan, force):
            alive_ok = alive_ok and event.status is not StepStatus.FAILED
            yield event
    except TargetError as exc:
        yield StepEvent(phase, StepStatus.FAILED, f"{exc}; nothing launched")
        yield StepEvent("launch", StepStatus.SKIPPED, "not launched: the target could not be checked")
        return
    if not (stopped_ok or force) or not gpu_ok or not alive_ok:
        why = ("old processes still running" if not stopped_ok else
               "GPU memory still held" if not gpu_ok else "a process of the run is still alive")
        yield StepEvent("launch", StepStatus.SKIPPED, f"not launched: {why}")
        return

    yield StepEvent("launch", StepStatus.RUNNING, plan.launch)
    try:
        launched = await launch(target, list(plan.launch_argv), log=plan.log, pidfile=plan.pidfile, cwd=plan.cwd,
                                env=launch_env(plan.env), timeout=t.launch_timeout_s)
    except AgentRefused as exc:
        yield StepEvent("launch", StepStatus.FAILED, str(exc))
        return
    except TargetError as exc:
        yield StepEvent("launch", StepStatus.FAILED, f"launch state unknown ({exc}); not retrying")
        yield await _after_unknown_launch(target, config, plan)
        return
    pid = launched.ref.pid
    yield StepEvent("launch", StepStatus.OK, f"PID {pid}, log {plan.log}",
                    {"pid": pid, "log": plan.log, "pidfile": plan.pidfile,
                     "left": f"the new run PID {pid} was launched and not verified"})
    if launched.pidfile_error:
        yield StepEvent("launch", StepStatus.WARNING, f"pidfile not written: {launched.pidfile_error}",
                        {"pidfile": plan.pidfile})
    async for step_or_line in _verify(target, config, plan, pid, t):
        yield step_or_line


def execute_restart(
    target: Target,
    config: Config,
    plan: RestartPlan,
    *,
    grace_s: float | None = None,
    force: bool = False,
    kill_wait_s: float = 5.0,
    gpu_timeout_s: float = 60.0,
    verify_after_s: float = 5.0,
    poll_s: float = 0.25,
    launch_timeout_s: float = 30.0,
    audit: bool = True,
    on_record: RecordListener | None = None,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Lock the run, stop, wait for GPU memory, check nothing of the run is left, launch once, verify:
    step events as they happen; audited ("started" before the first signal) unless `audit` is False
    (--no-audit), each record also told to `on_record`. Every caller (the CLI, the console's R) goes through here, so through the lock.

    `grace_s` defaults to the plan's (config.run.grace_s). `force` launches although old
    processes' GPU memory remains, or processes stuck in D state. Stop iterating to cancel
    between steps. ActionRefused at once for a plan the guards refused or a time that is
    not a finite number of seconds ≥ 0.
    """
    if plan.refusals:
        raise PlanRefused(plan)
    timing = _Timing(
        grace_s=checked_seconds("the grace", plan.grace_s if grace_s is None else grace_s),
        kill_wait_s=checked_seconds("the kill wait", kill_wait_s),
        gpu_timeout_s=checked_seconds("the GPU timeout", gpu_timeout_s),
        verify_after_s=checked_seconds("the verify wait", verify_after_s),
        poll_s=checked_seconds("the poll interval", poll_s),
        launch_timeout_s=checked_seconds("the launch timeout", launch_timeout_s),
    )
    return audited(
        _restart(target, config, plan, timing, force),
        log=AuditLog(config.audit_log, on_record=on_record) if audit else None,
        action="restart",
        target=target,
        plan=plan.as_json(),
    )
