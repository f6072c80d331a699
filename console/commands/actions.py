"""`pulse dump | restart | warmup`: the actions without the UI, for a terminal or a script.

Each prints the plan, asks `Proceed? [y/N]` on the terminal (unless --yes; with no
terminal and no --yes it refuses), prints every step's result as it happens, and returns
the exit code: 0 when the new run was verified alive (restart) / every step passed
(warmup), 1 when the action failed, 2 when it was refused or not confirmed.
`dump` changes nothing, so it neither asks nor is refused by --read-only.

Every line shown is as `visible` writes it: control characters in a command appear as `\\r`,
`\\x1b`…, never raw. A command that holds any runs only once confirmed in that escaped form: the
question on the terminal names it, and `--yes` alone refuses it (exit 2) unless `--accept-escaped`
repeats that form exactly (console.actions.shown).

A mutating command whose audit log cannot be written is refused before it plans (exit 2),
unless --no-audit says to run it unrecorded. SIGHUP, SIGTERM or SIGINT during an action
stop it where it is; the audit log records the step it was interrupted at (exit 128+N).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import TextIO

from console.actions.audit import (
    ActionRefused,
    AuditLog,
    OutputLine,
    RecordListener,
    StepEvent,
    StepStatus,
    audit_refusal,
    checked_seconds,
)
from console.actions.restart import PlanRefused, execute_restart, plan_restart
from console.actions.shown import HiddenControls, confirm_question, refuse_unconfirmed
from console.actions.warmup import execute_warmup, plan_warmup
from console.config import Config
from console.diagnose import Verdict, diagnose
from console.evidence import gather
from console.model import PROBLEM_KINDS
from console.observe.pyspy import (
    ProcessDump,
    ThreadStack,
    classify_wait,
    dump_lines,
    group_identical,
    is_user_frame,
    stack_signature,
)
from console.observe.pyspy_run import DumpError, dump_tree
from console.observe.sampler import sample_once
from console.observe.textsafe import visible
from console.remote.connect import make_target
from console.remote.target import Target, TargetError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2

_MARK = {
    StepStatus.RUNNING: "....",
    StepStatus.OK: " ok ",
    StepStatus.FAILED: "FAIL",
    StepStatus.WARNING: "WARN",
    StepStatus.SKIPPED: "skip",
}


def _say(text: str, out: TextIO) -> None:
    print(text, file=out, flush=True)


def confirm(question: str, *, assume_yes: bool, stdin: TextIO, out: TextIO) -> bool | None:
    """True to go ahead, False when the operator said no, None when there is no terminal to ask on."""
    if assume_yes:
        return True
    if not stdin.isatty():
        return None
    out.write(f"{question} [y/N] ")
    out.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def format_event(event: StepEvent | OutputLine) -> str:
    """One terminal line for a step event or a command's output line (problem lines marked `!`),
    control characters escaped (a step's detail may hold the command it runs)."""
    if isinstance(event, OutputLine):
        mark = "!" if event.kind in PROBLEM_KINDS else "|"
        return visible(f"        {mark} {event.text}")
    return visible(f"[{_MARK[event.status]}] {event.step}: {event.detail}")


async def _print_events(
    events: AsyncGenerator[StepEvent | OutputLine, None], out: TextIO, steps: list[StepEvent] | None = None
) -> list[StepEvent]:
    """Print each event as it comes; the step events, also appended to `steps` as they come."""
    steps = [] if steps is None else steps
    async for event in events:
        if isinstance(event, StepEvent):
            steps.append(event)
        _say(format_event(event), out)
    return steps


#: Signals that interrupt a running action (the audit log then records where it stopped).
INTERRUPTING_SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)


def _interruptible(action: str, main: Coroutine) -> int:
    """Run `main`; an interrupting signal cancels it where it is and gives exit 128+N."""

    async def guarded() -> int:
        task = asyncio.current_task()
        if task is None:  # asyncio.run makes a task of it; a bare coroutine could not be cancelled on a signal
            raise RuntimeError("guarded runs in an asyncio task")
        loop = asyncio.get_running_loop()
        caught: list[signal.Signals] = []

        def interrupt(signum: signal.Signals) -> None:
            if not caught:
                caught.append(signum)
                task.cancel(signum.name)

        for signum in INTERRUPTING_SIGNALS:
            loop.add_signal_handler(signum, interrupt, signum)
        try:
            return await main
        except asyncio.CancelledError:
            if not caught:
                raise
            task.uncancel()
            _say(f"{action}: interrupted by {caught[0].name}", sys.stderr)
            return 128 + caught[0].value
        finally:
            for signum in INTERRUPTING_SIGNALS:
                loop.remove_signal_handler(signum)

    return asyncio.run(guarded())


def _no_audit(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "no_audit", False))


@dataclass
class ActionReport:
    """What one mutating command did, for a caller that acts on it (`pulse watch`'s restart policy):
    the step events it printed, and the one line that refused or failed it before or outside a step."""

    steps: list[StepEvent] = field(default_factory=list)
    said: str | None = None


async def _mutating(
    action: str,
    config: Config,
    args: argparse.Namespace,
    plan_and_run: Callable[[Target], Awaitable[int]],
    report: ActionReport | None = None,
) -> int:
    def refuse(text: str, code: int = EXIT_REFUSED) -> int:
        _say(text, sys.stderr)
        if report is not None:
            report.said = text
        return code

    if getattr(args, "read_only", False):
        return refuse(f"read-only: {action} disabled (started with --read-only)")
    unwritable = None if _no_audit(args) else audit_refusal(action, AuditLog(config.audit_log))
    if unwritable:
        return refuse(f"{action}: {unwritable}")
    target = make_target(config.target)
    try:
        return await plan_and_run(target)
    except PlanRefused as exc:
        _say(f"{action} on {target.label}:", sys.stdout)
        for line in exc.lines:
            _say(f"  {visible(line)}", sys.stdout)
        return refuse(f"{action}: {exc}")
    except ActionRefused as exc:
        return refuse(f"{action}: {exc}")
    except TargetError as exc:
        return refuse(f"{action}: {exc}", EXIT_FAILED)
    finally:
        await target.close()


def unconfirmed_escaped(args: argparse.Namespace, hidden: Sequence[HiddenControls]) -> str | None:
    """With --yes, why a command holding control characters may not run (--accept-escaped does not
    name its escaped form); None when it may, or when a terminal will be asked."""
    if not hidden or not getattr(args, "yes", False):
        return None
    try:
        refuse_unconfirmed(hidden, getattr(args, "accept_escaped", None) or ())
    except ActionRefused as exc:
        return str(exc)
    return None


def question_for(hidden: Sequence[HiddenControls]) -> str:
    """The terminal's question: the plain one, or one that names the commands holding control characters."""
    return confirm_question(hidden) if hidden else "Proceed?"


def _ask(
    action: str, args: argparse.Namespace, heading: str, plan: list[str], hidden: Sequence[HiddenControls] = ()
) -> int | None:
    """Show the plan under its heading and ask: None to go ahead, else the exit code of a refusal.

    `hidden`: the plan's commands that hold control characters. --yes runs them only when
    --accept-escaped names each one's escaped form; on a terminal the question names them.
    """
    _say(heading, sys.stdout)
    for line in plan:
        _say(f"  {visible(line)}", sys.stdout)
    if refused := unconfirmed_escaped(args, hidden):
        _say(f"{action}: {refused}", sys.stderr)
        return EXIT_REFUSED
    answer = confirm(question_for(hidden), assume_yes=bool(getattr(args, "yes", False)), stdin=sys.stdin, out=sys.stdout)
    if answer is None:
        _say(f"{action}: not confirmed: no terminal to ask on; pass --yes to {action} without asking", sys.stderr)
        return EXIT_REFUSED
    if not answer:
        _say(f"{action}: not confirmed; nothing done", sys.stderr)
        return EXIT_REFUSED
    return None


async def cheap_verdict(target: Target, config: Config) -> Verdict:
    """The run's verdict from one cheap look: two samples and the log's tail, never its stacks."""
    return diagnose(await gather(target, config, dump_stacks="never"), config)


async def restart_run(
    config: Config, args: argparse.Namespace, *, judged_pids: Collection[int] | None = None,
    report: ActionReport | None = None, on_record: RecordListener | None = None,
) -> int:
    """`pulse restart` on the machine `config` names, to its exit code (see `restart`), its steps and any
    refusal also in `report`. `judged_pids`: restart only these processes (the ones a verdict was earned
    on): a plan that would stop any other is refused, nothing done (the run was restarted meanwhile).
    Without them, one cheap look judges the run first, so the plan warns when it is healthy.
    `on_record` is told of each audit record (the watch's journal)."""

    async def plan_and_run(target: Target) -> int:
        if getattr(args, "grace", None) is not None:
            checked_seconds("--grace", args.grace)  # before the plan is shown and confirmed
        verdict = None if judged_pids is not None else await cheap_verdict(target, config)
        plan = await plan_restart(
            target, config, root=getattr(args, "root", None), all_roots=bool(getattr(args, "all_roots", False)),
            verdict=verdict,
        )
        if judged_pids is not None and (unjudged := [p.pid for p in plan.processes if p.pid not in judged_pids]):
            raise ActionRefused(f"the run changed since it was judged: PID {' '.join(map(str, unjudged))} was not"
                                " among the processes judged; nothing done")
        refused = _ask("restart", args, f"restart on {target.label}:", plan.describe(), plan.hidden)
        if refused is not None:
            if report is not None:
                report.said = unconfirmed_escaped(args, plan.hidden) or "restart: not confirmed"
            return refused
        events = execute_restart(
            target, config, plan, grace_s=getattr(args, "grace", None), force=bool(args.force), audit=not _no_audit(args),
            on_record=on_record,
        )
        steps = await _print_events(events, sys.stdout, report.steps if report is not None else [])
        verified = [e for e in steps if e.step == "verify" and e.status is StepStatus.OK]
        return EXIT_OK if verified else EXIT_FAILED

    return await _mutating("restart", config, args, plan_and_run, report)


def restart(config: Config, args: argparse.Namespace) -> int:
    """`pulse restart`: plan, confirm, stop, wait for GPU memory, launch, verify; 0 only when verified alive."""
    return _interruptible("restart", restart_run(config, args))


def warmup(config: Config, args: argparse.Namespace) -> int:
    """`pulse warmup`: every (GPU, seq_len) step one at a time; 0 only when every step passed."""

    async def plan_and_run(target: Target) -> int:
        _, sample = await sample_once(target, config, 0.0)  # its GPUs now: the plan warns of those in use
        plan = plan_warmup(config, sample=sample)
        refused = _ask("warmup", args, f"on {target.label}:", plan.describe(), plan.hidden)
        if refused is not None:
            return refused
        confirmed = [hidden.escaped for hidden in plan.hidden]  # _ask had each confirmed
        events = execute_warmup(target, config, plan, audit=not _no_audit(args), confirmed=confirmed)
        steps = await _print_events(events, sys.stdout)
        done = [e for e in steps if e.status is StepStatus.OK and e.step.startswith("step ")]
        failed = any(e.status is StepStatus.FAILED for e in steps)
        return EXIT_OK if len(done) == len(plan.steps) and not failed else EXIT_FAILED

    return _interruptible("warmup", _mutating("warmup", config, args, plan_and_run))


# -- dump ------------------------------------------------------------------------------------


def _same_stack(a: ThreadStack, b: ThreadStack) -> bool:
    return stack_signature(a) == stack_signature(b)


def dump_json(dump: ProcessDump) -> dict:
    """The documented JSON of one process's dump: groups of identical stacks, frames marked user/library."""
    return {
        "pid": dump.pid,
        "command": dump.command,
        "python_version": dump.python_version,
        "groups": [
            {
                "count": count,
                "threads": [
                    {"thread_id": t.thread_id, "name": t.name, "status": t.status, "owns_gil": t.owns_gil}
                    for t in dump.threads
                    if _same_stack(t, thread)
                ],
                "wait": classify_wait(thread),
                "frames": [
                    {
                        "function": f.function,
                        "file": f.file,
                        "line": f.line,
                        "native": f.native,
                        "user": is_user_frame(f),
                        "locals": [{"name": v.name, "repr": v.repr, "argument": v.argument} for v in f.locals],
                    }
                    for f in thread.frames
                ],
            }
            for count, thread in group_identical(dump.threads)
        ],
    }


class NoRunProcess(Exception):
    """Nothing to dump: no process matches the run (one line, with why)."""


async def dump_run(target: Target, config: Config, args: argparse.Namespace) -> list[ProcessDump]:
    """The dumps `pulse dump` prints for one machine: its run's main process (or --pid), and children
    with --children. NoRunProcess when the run has no process; DumpError or TargetError on failure."""
    pid = args.pid
    commands: dict[int, str] = {}
    if pid is None:
        _, sample = await sample_once(target, config, 0.0)
        if not sample.processes:
            raise NoRunProcess(sample.process_error or "no process matches [run] match")
        pid = sample.processes[0].pid
        commands = {p.pid: p.cmdline for p in sample.processes}
    dumps = await dump_tree(
        target,
        pid,
        bool(args.children),
        py_spy=config.target.py_spy,
        native=bool(args.native),
        locals=bool(args.locals),
        nonblocking=bool(args.nonblocking),
    )
    # py-spy's JSON carries no command line; the sample that found the run does.
    return [replace(d, command=commands.get(d.pid, "")) if not d.command else d for d in dumps]


def print_dumps(dumps: list[ProcessDump], out: TextIO) -> None:
    """The dumps as text, a blank line between processes."""
    for i, one in enumerate(dumps):
        if i:
            _say("", out)
        for line in dump_lines(one):
            _say(line.text, out)


async def _dump(config: Config, args: argparse.Namespace) -> int:
    target = make_target(config.target)
    try:
        dumps = await dump_run(target, config, args)
    except NoRunProcess as exc:
        _say(f"dump: no run process found ({exc}); pass --pid", sys.stderr)
        return EXIT_REFUSED
    except (DumpError, TargetError) as exc:
        _say(f"dump: {exc}", sys.stderr)
        return EXIT_FAILED
    finally:
        await target.close()
    if args.json:
        _say(json.dumps([dump_json(d) for d in dumps], indent=2), sys.stdout)
    else:
        print_dumps(dumps, sys.stdout)
    return EXIT_OK


def dump(config: Config, args: argparse.Namespace) -> int:
    """`pulse dump`: py-spy stacks of the run's main process (or --pid), grouped; --json for scripts."""
    return asyncio.run(_dump(config, args))
