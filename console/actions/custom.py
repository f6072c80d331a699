"""Config-defined actions (like k9s plugins): a command template filled from the run, then run.

`[[actions]]` in the config names a key and a command with placeholders {pid} (the process
the operator selected, else the run's main PID), {pids} (all of them, space-separated words), {log}, {gpu} and {host}. Values
come from the run, the target and the config, so they are untrusted: Pulse shell-quotes every
value itself before it goes into the template (`fill_command`), and a log file named
`x; rm -rf ~` or `train_$(touch pwned).log` arrives as that literal path. That quoting holds
only where the template leaves the placeholder bare: `"{log}"`, `'{pid}'`, `\\{log}` and the
like are config errors (console.placeholders). Other braces in a template are left alone.

The command is shown with its control characters escaped; a template holding any runs only
once the operator has confirmed that escaped form (console.actions.shown). A value holding
some (a log file's name) is quoted like any other: shown escaped, it runs as shown.

A custom action changes something unless the config declares `mutating = false` (a viewer:
`nvidia-smi -q`, `tail -n 100 {log}`): Pulse cannot tell `kill -9 {pids}` from a viewer by
looking, so only the operator's word makes one safe. Mutating actions are refused in read-only
mode. Every custom action that runs is audited, viewers too (the entry says which it was).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass

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
from console.actions.shown import HiddenControls, hidden_controls, refuse_unconfirmed
from console.config import Config, CustomAction
from console.model import ProcessReading
from console.observe.lines import classify_line
from console.observe.remote_process import start, stop_group
from console.observe.textsafe import sanitize, split_lines, visible
from console.placeholders import CUSTOM_PLACEHOLDERS, placeholder_refusal
from console.remote.shell import quote
from console.remote.target import Target, TargetError


def fill_placeholders(template: str, values: Mapping[str, str]) -> str:
    """`template` with each `{name}` in `values` replaced by its value as it is; other braces untouched.

    Text, not a command: a value goes in unquoted (a log path's `{started}`). A command is filled
    by `fill_command`.
    """
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template) if values else template


def fill_command(template: str, values: Mapping[str, str | Sequence[str]]) -> str:
    """The shell command `template` with each `{name}` in `values` replaced by its value quoted by
    Pulse (a sequence: its items, each quoted, as separate words).

    ValueError, naming it, when a placeholder stands where that quoting would be undone (inside the
    template's own quotes, after a backslash…: console.placeholders).
    """
    if why := placeholder_refusal(template, values):
        raise ValueError(why)
    quoted = {
        name: quote(value) if isinstance(value, str) else " ".join(quote(item) for item in value)
        for name, value in values.items()
    }
    return fill_placeholders(template, quoted)


def unknown_placeholders(template: str, known: tuple[str, ...]) -> list[str]:
    """Names in `{name}` form that the template uses but `known` does not offer."""
    return sorted({name for name in re.findall(r"\{([A-Za-z_]\w*)\}", template) if name not in known})


@dataclass(frozen=True, slots=True)
class ActionContext:
    """What the run offers to a template, as read by the console at the moment of the key press."""

    pids: tuple[int, ...] = ()
    """The run's processes, main process first."""
    log: str | None = None
    gpu: int | None = None
    """The GPU the operator has selected (else the first one the run uses)."""
    host: str = "local"


def action_context(
    config: Config,
    processes: Sequence[ProcessReading],
    log_path: str | None,
    *,
    selected: ProcessReading | None = None,
    selected_gpus: Sequence[int] = (),
) -> ActionContext:
    """The context at a key press: {pid} is the selected process, else the run's first root (a
    process whose parent is not the run's); {gpu} the first selected GPU, else the first the
    config names; {log} the log followed, else the configured one."""
    listed = {p.pid for p in processes}
    roots = [p for p in processes if p.ppid not in listed]
    ordered = ([selected] if selected else []) + roots + list(processes)
    gpus = list(selected_gpus) or sorted(config.gpus.roles)
    return ActionContext(
        pids=tuple(dict.fromkeys(p.pid for p in ordered)),
        log=log_path or config.run.log,
        gpu=gpus[0] if gpus else None,
        host=config.target.host or "local",
    )


@dataclass(frozen=True, slots=True)
class CustomPlan:
    """A custom action ready to run: the exact command line and whether it changes anything."""

    action: CustomAction
    command: str
    mutating: bool

    def as_json(self) -> dict:
        return {
            "name": self.action.name,
            "key": self.action.key,
            "template": self.action.command,
            "command": self.command,
            "dangerous": self.action.dangerous,
            "confirm": self.action.confirm,
            "mutating": self.mutating,
        }

    @property
    def hidden(self) -> tuple[HiddenControls, ...]:
        """The configured template, when it holds control characters (it then runs only once confirmed escaped)."""
        return hidden_controls([(f"action {self.action.name!r} command", self.action.command)])

    def describe(self) -> list[str]:
        """The plan as lines for a confirmation screen or a terminal, the command escaped."""
        warning = "  (marked dangerous)" if self.action.dangerous else ""
        lines = [f"{self.action.name}{warning}", f"  $ {self.command}"]
        return [visible(line) for line in lines] + [hidden.plan_line() for hidden in self.hidden]


def is_mutating(action: CustomAction) -> bool:
    """True unless the config declared the action `mutating = false` (dangerous always counts)."""
    return action.mutating or action.dangerous


def plan_custom(action: CustomAction, context: ActionContext, *, read_only: bool = False) -> CustomPlan:
    """Fill the template with quoted values; ActionRefused when it cannot run as configured."""
    mutating = is_mutating(action)
    if mutating:
        refuse_if_read_only(f"action {action.name!r}", read_only)
    unknown = unknown_placeholders(action.command, CUSTOM_PLACEHOLDERS)
    if unknown:
        names = ", ".join("{" + name + "}" for name in unknown)
        raise ActionRefused(
            f"action {action.name!r}: unknown placeholder {names}; use {{pid}} {{pids}} {{log}} {{gpu}} {{host}}"
        )
    if why := placeholder_refusal(action.command, CUSTOM_PLACEHOLDERS):
        raise ActionRefused(f"action {action.name!r}: {why}")
    values: dict[str, str | Sequence[str]] = {"host": context.host}
    needs = set(re.findall(r"\{(pid|pids|log|gpu)\}", action.command))
    if needs & {"pid", "pids"}:
        if not context.pids:
            raise ActionRefused(f"action {action.name!r}: no run process found for {{pid}}; is the run alive?")
        values["pid"] = str(context.pids[0])
        values["pids"] = [str(pid) for pid in context.pids]
    if "log" in needs:
        if not context.log:
            raise ActionRefused(f"action {action.name!r}: no log path known for {{log}}; set [run] log")
        values["log"] = context.log
    if "gpu" in needs:
        if context.gpu is None:
            raise ActionRefused(f"action {action.name!r}: no GPU selected for {{gpu}}")
        values["gpu"] = str(context.gpu)
    try:
        command = fill_command(action.command, values)
    except ValueError as exc:  # a NUL in a value: no process argument can hold one
        raise ActionRefused(f"action {action.name!r}: {exc}") from None
    return CustomPlan(action, command, mutating)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def shell_path(path: str) -> str:
    """A path as one bash word: quoted, except that a leading `~/` still means the target's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + quote(path[2:])
    return quote(path)


def check_env_names(env: Mapping[str, str]) -> None:
    """ActionRefused on a name that is not a variable name."""
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ActionRefused(f"environment: {name!r} is not a variable name; fix [run] env")


async def stream_grouped(
    target: Target,
    command: str,
    *,
    step: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Run `command` in its own process group, yield its output lines, then the step's result.

    Output lines are sanitized and classified (OOM, traceback...). When the caller stops
    iterating, or the timeout passes, the group this call started, and only it, is stopped.
    The final StepEvent's data holds the `pid`.
    """
    check_env_names(env or {})
    # One deadline for the whole step: a login shell that hangs before the command starts counts.
    deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
    try:
        async with asyncio.timeout_at(deadline):
            started = await start(target, ["bash", "-c", command], cwd=cwd, env=env, merge_stderr=True)
    except TargetError as exc:
        yield StepEvent(step, StepStatus.FAILED, str(exc))
        return
    except TimeoutError:
        yield StepEvent(step, StepStatus.FAILED, f"timed out after {timeout_s:g} s before it started")
        return
    pid = started.ref.pid
    status: int | None = None
    outcome = "cancelled"
    stopped = ""
    try:
        pending = b""
        try:
            async with asyncio.timeout_at(deadline):
                while chunk := await started.read():
                    lines, pending = split_lines(pending + chunk)
                    for raw in lines:
                        text, _ = sanitize(raw)
                        yield OutputLine(step, text, classify_line(text).kind)
                if pending:
                    text, _ = sanitize(pending)
                    yield OutputLine(step, text, classify_line(text).kind)
                status = await started.wait()
                outcome = "ended"
        except TimeoutError:
            outcome = "timed out"
    finally:
        if outcome != "ended":
            try:
                stopped = await asyncio.shield(stop_group(target, started.ref))
            except (TargetError, OSError) as exc:
                stopped = f"not stopped: {exc}"  # the link is gone: nothing more this side can do
        await started.aclose()
    for said in started.stderr.splitlines():
        if said.startswith("pulse-process:"):  # the agent's own word (the command could not run), not a login banner
            text, _ = sanitize(said)
            yield OutputLine(step, text, classify_line(text).kind)
    data = {"pid": pid, "exit_status": status}
    if outcome == "timed out":
        yield StepEvent(step, StepStatus.FAILED, f"timed out after {timeout_s:g} s; its process group: {stopped}", data)
    elif status == 0:
        yield StepEvent(step, StepStatus.OK, "exit 0", data)
    elif status is None:
        yield StepEvent(step, StepStatus.FAILED, "killed by a signal", data)
    else:
        yield StepEvent(step, StepStatus.FAILED, f"exit {status}", data)


async def _run_custom(target: Target, plan: CustomPlan) -> AsyncGenerator[StepEvent | OutputLine, None]:
    step = plan.action.name
    yield StepEvent(step, StepStatus.RUNNING, visible(plan.command))
    running = stream_grouped(target, plan.command, step=step)
    async with aclosing(running):  # a cancelled action stops its process group now
        async for event in running:
            yield event


def execute_custom(
    target: Target, config: Config, plan: CustomPlan, *, confirmed: Collection[str] = (),
    on_record: RecordListener | None = None,
) -> AsyncGenerator[StepEvent | OutputLine, None]:
    """Run the filled command and stream its output; audited, whether it changes anything or not
    (each record also told to `on_record`).

    ActionRefused at once when the command holds control characters and its escaped form is not
    among `confirmed` (what the operator confirmed: console.actions.shown).
    """
    refuse_unconfirmed(plan.hidden, confirmed)
    return audited(
        _run_custom(target, plan),
        log=AuditLog(config.audit_log, on_record=on_record),
        action=f"custom:{plan.action.name}",
        target=target,
        plan=plan.as_json(),
    )
