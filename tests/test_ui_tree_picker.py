"""R when the match finds several unrelated process trees (issue 33, item 4): the console lists the
trees and the operator picks the run's root, or all roots; the restart is planned again with that
pick and the usual confirmation follows. Real process trees (pytest runs as PID 1 of its own PID
namespace: tests/pid1.py), the console against LocalTarget."""

from __future__ import annotations

import sys
import uuid

from console.remote.target import LocalTarget
from console.ui.dialogs.action_screen import ActionScreen
from console.ui.dialogs.confirm_screen import ConfirmScreen
from console.ui.dialogs.tree_picker_screen import TreePickerScreen
from tests.snapshot_apps.scenarios import make_app
from tests.test_restart import HEALTHY, Processes, _kill, _pids_with, alive, procs, run_config, wait_for  # noqa: F401 (procs: a fixture)

SIZE = (120, 40)


def two_trees(procs: Processes, tmp_path) -> tuple[str, list[int]]:
    """The run started twice by mistake: two unrelated trees its match finds (their PIDs, in start order)."""
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    runs = [procs.start([sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.05"], cwd=tmp_path)
            for _ in range(2)]
    for run in runs:
        wait_for(lambda: alive(run.pid), "a run to start")
    return tag, [run.pid for run in runs]


async def press_and_settle(app, pilot, *keys: str) -> None:
    await pilot.press(*keys)
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_R_on_two_trees_shows_them_and_restarts_only_the_one_picked(procs, tmp_path):  # noqa: F811
    tag, (first, second) = two_trees(procs, tmp_path)
    app = make_app("healthy", target=LocalTarget(), config=run_config(tmp_path, tag))
    async with app.run_test(size=SIZE) as pilot:
        await press_and_settle(app, pilot, "R")
        picker = app.screen
        assert isinstance(picker, TreePickerScreen), [n.message for n in app.notices]
        assert [tree.root for tree in picker.trees] == [first, second]
        assert all(len(tree.pids) == 1 and tag in tree.command for tree in picker.trees)
        assert not any("--root" in n.message for n in app.notices)  # no dead-end toast
        await press_and_settle(app, pilot, "down", "enter")  # the second tree
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen), [n.message for n in app.notices]
        assert f"left alone (not the run, as chosen): {first}" in confirm.lines
        assert any(line.startswith(f"  root PID {second} ") and line.endswith("<- the run") for line in confirm.lines)
        assert not any(line.startswith("REFUSED") for line in confirm.lines)
        await pilot.press("y")
        await pilot.pause()
        running = app.screen
        assert isinstance(running, ActionScreen)
        await running.workers.wait_for_complete()
        await pilot.pause()
        assert running.done and running.ok, running.steps
    for pid in _pids_with(tag):
        procs.adopt(pid)  # the new run
    assert not alive(second) and alive(first)
    assert len([pid for pid in _pids_with(tag) if alive(pid)]) == 2  # the one left alone and the new run


async def test_a_in_the_picker_plans_every_tree_and_n_leaves_both_running(procs, tmp_path):  # noqa: F811
    tag, roots = two_trees(procs, tmp_path)
    app = make_app("healthy", target=LocalTarget(), config=run_config(tmp_path, tag))
    async with app.run_test(size=SIZE) as pilot:
        await press_and_settle(app, pilot, "R")
        assert isinstance(app.screen, TreePickerScreen), [n.message for n in app.notices]
        await press_and_settle(app, pilot, "a")
        confirm = app.screen
        assert isinstance(confirm, ConfirmScreen), [n.message for n in app.notices]
        assert confirm.lines[0] == "stop 2 process(es): SIGTERM, SIGKILL after 3 s"
        assert "the match found 2 unrelated process trees:" in confirm.lines
        assert not any(line.startswith("left alone") for line in confirm.lines)
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
    assert all(alive(pid) for pid in roots)


async def test_a_picked_tree_that_ended_meanwhile_brings_the_picker_back(procs, tmp_path):  # noqa: F811
    tag, (first, second) = two_trees(procs, tmp_path)
    third = procs.start([sys.executable, str(HEALTHY), "--tag", tag, "--interval", "0.05"], cwd=tmp_path)
    wait_for(lambda: alive(third.pid), "the third run to start")
    app = make_app("healthy", target=LocalTarget(), config=run_config(tmp_path, tag))
    async with app.run_test(size=SIZE) as pilot:
        await press_and_settle(app, pilot, "R")
        assert isinstance(app.screen, TreePickerScreen), [n.message for n in app.notices]
        _kill(first)  # the tree on the cursor ends while the operator reads the list
        wait_for(lambda: not alive(first), "the first run to end")
        await press_and_settle(app, pilot, "enter")
        again = app.screen
        assert isinstance(again, TreePickerScreen), [n.message for n in app.notices]
        assert again.note == f"PID {first} is no longer the root of a tree the match finds: pick again"
        assert [tree.root for tree in again.trees] == [second, third.pid]
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]
    assert alive(second) and alive(third.pid)
