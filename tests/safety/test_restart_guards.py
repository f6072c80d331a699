"""The restart plan guards the operator (issue 11, rows 5-8), each case in its own PID namespace.

A target set that selects everything, PID 1, Pulse or its ancestors, sshd or a login shell,
or several unrelated process trees nobody chose between, is refused with its reason in the
plan, and --force does not override it; a process group is signalled only when Pulse and its
ancestors are outside it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import sys

import pytest

from console.actions.restart import plan_restart
from console.cli import build_command_parser
from console.config import load_from_args
from console.observe.agent import PULSE_PROGRAM_MARK
from console.observe.sampler import Sampler
from console.remote.connect import make_target
from tests.safety.namespace import Scene, alive, in_namespace, pids_with
from tests.sshd import start_sshd

# -- row 5: a pattern that matches the empty string --------------------------------------------


def scene_match_everything(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    decoys = [scene.start(["sleep", "300"]), scene.start(["bash", "-c", "sleep 300; true"])]
    result = scene.pulse("restart", *scene.flags(match=".*", pidfile=None), "--yes", "--force")
    return {
        **result,
        "run_alive": alive(run.pid),
        "decoys_alive": [alive(d.pid) for d in decoys],
        "new_logs": scene.new_logs(),
        "audit": scene.audit(),
    }


def test_a_match_of_everything_is_refused_and_nothing_is_touched(tmp_path):
    seen = in_namespace(scene_match_everything, folder=str(tmp_path))
    assert seen["rc"] == 2, seen
    assert "matches the empty string" in seen["err"] and "--force does not override" in seen["err"]
    assert seen["run_alive"] and seen["decoys_alive"] == [True, True]
    assert seen["new_logs"] == [] and seen["audit"] == []


# -- row 6: the match finds the wrong processes, several trees of them ---------------------------


def scene_decoy_trees(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    sleeps = [scene.start(["sleep", "300"]), scene.start(["bash", "-c", "sleep 300; true"])]
    wrong = scene.pulse("restart", *scene.flags(match="sleep"), "--yes", "--force")
    return {
        **wrong,
        "run_alive": alive(run.pid),
        "sleeps_alive": [alive(s.pid) for s in sleeps],
        "runs": pids_with(scene.tag),
        "new_logs": scene.new_logs(),
        "audit": scene.audit(),
    }


def test_several_unrelated_trees_are_refused_and_the_run_is_not_duplicated(tmp_path):
    seen = in_namespace(scene_decoy_trees, folder=str(tmp_path))
    assert seen["rc"] == 2, seen
    assert "the match found 2 unrelated process trees" in seen["err"]
    assert "--root PID" in seen["err"] and "--force does not override" in seen["err"]
    assert seen["out"].count("root PID ") == 2  # the plan lists each tree
    assert seen["run_alive"] and seen["sleeps_alive"] == [True, True]
    assert len(seen["runs"]) == 1 and seen["new_logs"] == [] and seen["audit"] == []


def scene_named_root(folder: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    # A second tree the match finds: an operator's Python session that names the run.
    other = scene.start([sys.executable, "-c", "import time; time.sleep(300)", scene.tag])
    unchosen = scene.pulse("restart", *scene.flags(), "--yes")
    chosen = scene.pulse("restart", *scene.flags(), "--yes", "--root", str(run.pid))
    return {
        "run": run.pid,
        "other": other.pid,
        "unchosen": unchosen,
        "chosen": chosen,
        "run_alive": alive(run.pid),
        "other_alive": alive(other.pid),
        "runs": [pid for pid in pids_with(scene.tag) if pid != other.pid],
    }


def test_the_plan_says_which_tree_is_the_run_and_root_restarts_only_that_one(tmp_path):
    seen = in_namespace(scene_named_root, folder=str(tmp_path))
    unchosen, chosen = seen["unchosen"], seen["chosen"]
    assert unchosen["rc"] == 2 and f"PID {seen['run']} looks like the run" in unchosen["err"], unchosen
    run_line = [line for line in unchosen["out"].splitlines() if f"root PID {seen['run']} " in line]
    assert run_line and "writes the run's log" in run_line[0] and run_line[0].endswith("<- the run")
    assert chosen["rc"] == 0, chosen
    assert f"left alone (not the run, as chosen): {seen['other']}" in chosen["out"]
    assert not seen["run_alive"] and seen["other_alive"]
    assert len(seen["runs"]) == 1 and seen["runs"] != [seen["run"]]


def scene_started_twice(folder: str) -> dict:
    scene = Scene(folder)
    runs = [scene.start_run(), scene.start_run()]  # the run started twice by mistake: two trees
    result = scene.pulse("restart", *scene.flags(), "--yes", "--all-roots")
    return {**result, "old_alive": [alive(r.pid) for r in runs], "runs": pids_with(scene.tag)}


def test_all_roots_says_to_stop_every_tree_and_one_run_is_launched(tmp_path):
    seen = in_namespace(scene_started_twice, folder=str(tmp_path))
    assert seen["rc"] == 0, seen
    assert "the match found 2 unrelated process trees:" in seen["out"] and "[ ok ] stop: 2 of 2 stopped" in seen["out"]
    assert seen["old_alive"] == [False, False] and len(seen["runs"]) == 1


# -- row 7: Pulse in the run's process group ------------------------------------------------------


def scene_pulse_in_the_runs_group(folder: str) -> dict:
    scene = Scene(folder)
    # The run leads a process group of the scene's session, and Pulse joins that group, as
    # in a pipeline under job control.
    run = scene.start_run(start_new_session=False, process_group=0)
    result = scene.pulse("restart", *scene.flags(), "--yes", process_group=run.pid)
    return {**result, "run": run.pid, "run_alive": alive(run.pid), "runs": pids_with(scene.tag),
            "audit": scene.audit()}


def test_pulse_in_the_runs_group_signals_pids_not_its_own_group(tmp_path):
    seen = in_namespace(scene_pulse_in_the_runs_group, folder=str(tmp_path))
    assert seen["rc"] == 0, seen  # not 143: Pulse did not signal itself
    lines = seen["out"].splitlines()
    assert f"    signals to: PID {seen['run']}" in lines  # the PID, not the group that holds Pulse
    assert f"[....] stop: SIGTERM to PID {seen['run']}" in lines
    assert not seen["run_alive"] and len(seen["runs"]) == 1
    assert [e["record"] for e in seen["audit"]] == ["started", "finished"]
    assert seen["audit"][-1]["outcome"].startswith("ok")


# -- row 8: a pidfile naming what must never be signalled, or no PID at all -------------------------

#: Cases where the shell around Pulse writes its own PID ($$) to the pidfile, then starts Pulse.
AROUND_PULSE = {
    "Pulse's parent shell": "echo $$ > {pidfile}; {pulse}; exit $?",
    "Pulse itself": "echo $$ > {pidfile}; exec {pulse}",
}
PIDFILE_REASONS = {
    "PID 1": "PID 1 (the init of the machine or container)",
    "Pulse's parent shell": "Pulse itself or one of its ancestors",
    "Pulse itself": "Pulse itself or one of its ancestors",
    "garbage": "holds 'hello', not a PID",
    "nothing": "is empty, not a PID",
    "a login shell": "a login shell",
    "sshd": "sshd (the operator's way in)",
}


def _pidfile_text(scene: Scene, case: str) -> str:
    """What the pidfile holds for `case` (a process it names is started here first)."""
    if case == "a login shell":
        return f"{scene.start(['-bash', '-c', 'sleep 300; true'], executable='/bin/bash').pid}\n"
    if case == "sshd":  # as an sshd session process shows itself
        return f"{scene.start(['sshd: root@pts/0', '300'], executable='sleep').pid}\n"
    return {"PID 1": "1\n", "garbage": "hello\n", "nothing": ""}[case]


def scene_pidfile_names(folder: str, case: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    argv = ["restart", *scene.flags(), "--yes", "--force"]
    if case in AROUND_PULSE:
        text = None
        result = scene.pulse(*argv, shell=AROUND_PULSE[case])
    else:
        text = _pidfile_text(scene, case)
        scene.pidfile.write_text(text)
        result = scene.pulse(*argv)
    return {**result, "run_alive": alive(run.pid), "runs": pids_with(scene.tag), "new_logs": scene.new_logs(),
            "pidfile_before": text, "pidfile": scene.pidfile.read_text()}


@pytest.mark.parametrize("case", list(PIDFILE_REASONS))
def test_a_pidfile_naming_a_protected_pid_or_no_pid_is_an_error_not_a_second_run(case, tmp_path):
    seen = in_namespace(scene_pidfile_names, folder=str(tmp_path), case=case)
    assert seen["rc"] == 2, seen
    assert PIDFILE_REASONS[case] in seen["err"] and "--force does not override" in seen["err"], seen["err"]
    assert seen["run_alive"] and len(seen["runs"]) == 1 and seen["new_logs"] == []
    if seen["pidfile_before"] is not None:
        assert seen["pidfile"] == seen["pidfile_before"]  # not overwritten


# -- the remote side: Pulse's own processes on the target are its SSH session and its agent -------


def scene_remote_pidfile(folder: str, names: str) -> dict:
    scene = Scene(folder)
    run = scene.start_run()
    (scene.folder / "sshd").mkdir()
    server = start_sshd(scene.folder / "sshd")
    args = build_command_parser("restart").parse_args(scene.flags())
    config = load_from_args(args)
    config = dataclasses.replace(config, target=server.target_config(), audit_log=str(scene.audit_path))

    async def plan_while_observed() -> str:
        target = make_target(config.target)
        samples = Sampler(target, config).stream()
        await samples.__anext__()  # the console's long-lived agent now runs on the target
        try:
            if names == "the agent":
                [pid] = [p for p in _pids_holding(PULSE_PROGRAM_MARK) if p != os.getpid()]
            else:
                pid = server.connection_pids()[0]  # the sshd process serving Pulse's connection
            scene.pidfile.write_text(f"{pid}\n")
            try:
                await plan_restart(target, config)
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            return "planned"
        finally:
            await samples.aclose()
            await target.close()

    try:
        said = asyncio.run(plan_while_observed())
    finally:
        server.stop()
    return {"said": said, "run_alive": alive(run.pid)}


def _pids_holding(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if text.encode() in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("names", ["the agent", "the SSH session"])
def test_over_ssh_a_pidfile_naming_pulses_own_processes_on_the_target_is_refused(names, tmp_path):
    seen = in_namespace(scene_remote_pidfile, folder=str(tmp_path), names=names)
    assert seen["said"].startswith("PlanRefused: refused: "), seen
    why = "a program Pulse runs" if names == "the agent" else "Pulse itself or one of its ancestors"
    assert re.search(rf"pidfile \S+ names PID \d+ \(.*\), which is {why}", seen["said"]), seen["said"]
    assert seen["run_alive"]
