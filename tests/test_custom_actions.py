"""Config-defined actions: quoted values, read-only, audit, and streaming through the real sshd."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.actions.audit import ActionRefused, AuditLog, OutputLine, StepEvent, StepStatus
from console.actions.custom import ActionContext, action_context, execute_custom, fill_placeholders, plan_custom
from console.config import Config, CustomAction, GpuConfig, RunConfig, TargetConfig
from console.model import ProcessReading
from console.remote.connect import make_target
from console.remote.target import LocalTarget

HOSTILE = ["x; rm -rf ~", "$(touch {canary})", "`touch {canary}`", "a'b\"c", "--help", "two\nlines"]


async def run(target, config, plan) -> tuple[list[StepEvent], list[str]]:
    steps, lines = [], []
    async for event in execute_custom(target, config, plan):
        if isinstance(event, StepEvent):
            steps.append(event)
        else:
            lines.append(event.text)
    return steps, lines


def test_the_context_at_a_key_press_names_the_selection_first():
    def process(pid: int, ppid: int) -> ProcessReading:
        return ProcessReading(pid, ppid, "S", 10.0, 1, 100.0, 0.0, "python3 train.py")

    config = Config(
        target=TargetConfig(host="gpu-box"),
        run=RunConfig(log="/w/train.log"),
        gpus=GpuConfig(roles={5: "target", 2: "drafter"}),
    )
    launcher, rank0, rank1 = process(100, 1), process(101, 100), process(102, 100)
    plain = action_context(config, (rank1, launcher, rank0), None)
    assert plain == ActionContext(pids=(100, 102, 101), log="/w/train.log", gpu=2, host="gpu-box")
    chosen = action_context(config, (launcher, rank0, rank1), "/w/train-2.log", selected=rank1, selected_gpus=(5,))
    assert chosen == ActionContext(pids=(102, 100, 101), log="/w/train-2.log", gpu=5, host="gpu-box")
    assert action_context(Config(), (), None) == ActionContext()


def test_fill_placeholders_leaves_other_braces():
    assert fill_placeholders("awk '{print $1}' {log}", {"log": "'/x'"}) == "awk '{print $1}' '/x'"


@pytest.mark.parametrize("where", ["local", "ssh"])
async def test_hostile_values_arrive_literally(where, request, tmp_path):
    canary = tmp_path / "canary"
    config = Config(audit_log=str(tmp_path / "audit.jsonl"))
    target = LocalTarget() if where == "local" else make_target(request.getfixturevalue("sshd").target_config())
    try:
        for raw in HOSTILE:
            value = raw.format(canary=canary)
            action = CustomAction(name="show", key="s", command="printf '[%s]\\n' {log} {host}", confirm=False)
            plan = plan_custom(action, ActionContext(log=value, host="h; id"))
            steps, lines = await run(target, config, plan)
            assert steps[-1].status is StepStatus.OK, steps
            expected = f"[{value}]".split("\n") + ["[h; id]"]
            assert lines == expected
        assert not canary.exists(), "a value was executed instead of passed as a literal"
    finally:
        await target.close()


def test_pids_become_separate_quoted_words():
    action = CustomAction(name="stacks", key="y", command="py-spy dump --pid {pid}; echo {pids}", confirm=False,
                          mutating=False)
    plan = plan_custom(action, ActionContext(pids=(41, 42, 43)))
    assert plan.command == "py-spy dump --pid 41; echo 41 42 43"
    assert not plan.mutating


def test_refusals_are_one_line():
    kill = CustomAction(name="kill run", key="K", command="kill {pid}", dangerous=True)
    with pytest.raises(ActionRefused, match=r"^read-only: action 'kill run' disabled \(started with --read-only\)$"):
        plan_custom(kill, ActionContext(pids=(5,)), read_only=True)
    with pytest.raises(ActionRefused, match="no run process found"):
        plan_custom(kill, ActionContext())
    typo = CustomAction(name="t", key="t", command="tail {logs}", confirm=False)
    with pytest.raises(ActionRefused, match=r"unknown placeholder \{logs\}"):
        plan_custom(typo, ActionContext(log="/x"))
    viewer = CustomAction(name="smi", key="n", command="echo {gpu}", confirm=False, mutating=False)
    assert plan_custom(viewer, ActionContext(gpu=3), read_only=True).command == "echo 3"
    unasked = CustomAction(name="kill all", key="K", command="kill -9 {pids}", confirm=False)
    with pytest.raises(ActionRefused, match=r"^read-only: action 'kill all' disabled"):
        plan_custom(unasked, ActionContext(pids=(5,)), read_only=True)


async def test_every_custom_action_is_audited_saying_whether_it_changes_anything(tmp_path):
    config = Config(audit_log=str(tmp_path / "audit.jsonl"))
    audit = AuditLog(config.audit_log)
    target = LocalTarget()
    viewer = CustomAction(name="where", key="w", command="echo {log}", confirm=False, mutating=False)
    await run(target, config, plan_custom(viewer, ActionContext(log="/l")))
    touch = CustomAction(name="touch", key="T", command="touch {log}; exit 3", dangerous=True)
    steps, _ = await run(target, config, plan_custom(touch, ActionContext(log=str(tmp_path / "made"))))
    assert steps[-1].status is StepStatus.FAILED and steps[-1].detail == "exit 3"
    assert (tmp_path / "made").exists()
    seen, changed = audit.entries()
    assert (seen["action"], seen["plan"]["mutating"], seen["outcome"]) == ("custom:where", False, "ok: exit 0")
    assert changed["action"] == "custom:touch" and changed["plan"]["mutating"] is True
    assert changed["plan"]["command"] == f"touch {tmp_path / 'made'}; exit 3"
    assert changed["outcome"] == "failed: touch: exit 3"


async def test_stopping_a_streaming_action_stops_its_remote_process(sshd, tmp_path):
    log = tmp_path / "run log.txt"
    log.write_text("first\n")
    config = Config(audit_log=str(tmp_path / "audit.jsonl"))
    target = make_target(sshd.target_config())
    follow = CustomAction(name="follow", key="f", command="tail -n 1 -f {log}", confirm=False)
    events = execute_custom(target, config, plan_custom(follow, ActionContext(log=str(log))))
    try:
        async for event in events:
            if isinstance(event, OutputLine) and event.text == "first":
                break
        await events.aclose()
        # the tail ran in a process group of its own on the server; it must be gone now
        assert not _tails_of(log), "the remote tail outlived the action"
    finally:
        await target.close()


def _tails_of(path: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"tail" and str(path).encode() in argv:
            found.append(int(entry.name))
    return found
