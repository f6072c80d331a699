"""Restart's last line tells what its steps tell (issue 33, item 2): a restart whose steps all
passed says ok, and a cancel says what it left and which key continues. Real runs, real restarts."""

from __future__ import annotations

import time
import uuid

from textual.app import App
from textual.widgets import Static

from console.actions.audit import StepStatus
from console.actions.restart import execute_restart, plan_restart
from console.demo.run import PACKAGE_ROOT
from console.remote.target import LocalTarget
from console.ui.dialogs.action_screen import ActionScreen
from tests.test_restart import FAST, HEALTHY, alive, procs, run_config, wait_for  # noqa: F401 (procs: a fixture)
from tests.tmux import TmuxSession, needs_tmux

PULSE = PACKAGE_ROOT / ".venv" / "bin" / "pulse"


@needs_tmux
def test_restart_of_the_dead_demo_ends_in_ok_as_its_steps_do(tmp_path):
    command = f"cd {PACKAGE_ROOT} && TMPDIR={tmp_path} TEXTUAL_ANIMATIONS=none {PULSE} demo --scenario dead"
    with TmuxSession(f"pulse-restart-dead-{tmp_path.name}", command, (160, 45)) as terminal:
        terminal.wait_for(lambda rows: "dead:" in rows[0], 90, "the demo never judged its run dead")
        terminal.keys("R")
        terminal.wait_for(lambda rows: any("Run this plan?" in row for row in rows), 30, "R never showed its plan")
        terminal.keys("y")
        rows = terminal.wait_for(lambda rows: any("✓ verify" in row for row in rows), 60, "the restart never verified")
        time.sleep(0.5)  # the outcome line follows the last step's event
        rows = terminal.screen()
        assert any("ok: new run PID" in row for row in rows), "\n".join(rows)
        assert not any("failed" in row for row in rows), "\n".join(rows)


class ScreenApp(App[None]):
    def __init__(self, screen: ActionScreen) -> None:
        super().__init__()
        self.action_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.action_screen)


async def test_cancel_after_the_stop_says_the_run_is_stopped_and_R_launches_it(procs, tmp_path):  # noqa: F811
    tag = f"train_pulse_{uuid.uuid4().hex[:8]}"
    run = procs.start([".venv/bin/python", str(HEALTHY), "--tag", tag, "--interval", "0.05"], cwd=PACKAGE_ROOT)
    procs.adopt(run.pid)
    config = run_config(tmp_path, tag)
    target = LocalTarget()
    wait_for(lambda: alive(run.pid), "the run to start")
    plan = await plan_restart(target, config)
    screen: ActionScreen

    async def events():
        async for event in execute_restart(target, config, plan, **FAST):
            if event.step == "stop" and event.status is StepStatus.OK:
                screen.action_cancel()  # the operator's c while the stop runs
            yield event

    screen = ActionScreen("Restart the run", events)
    app = ScreenApp(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await screen.workers.wait_for_complete()
        await pilot.pause(0.2)
        shown = str(screen.query_one("#progress", Static).render())
        assert screen.done and not screen.ok
        assert shown == "the run is stopped and was not relaunched: R to launch"
        assert "launch" not in screen.steps
    assert not alive(run.pid)
