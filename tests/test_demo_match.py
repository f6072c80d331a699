"""Two demos at once: each one's match finds its own trainer only (issue 33, item 4), so R in either
plans one process tree, not a refusal naming "3 unrelated process trees"."""

from __future__ import annotations

import time

from console.actions.restart import plan_restart
from console.demo.run import DemoRun
from console.remote.connect import make_target


async def test_each_demos_restart_plan_holds_its_own_trainer_only(tmp_path):
    with DemoRun("healthy", parent_dir=str(tmp_path)) as first, DemoRun("healthy", parent_dir=str(tmp_path)) as second:
        for demo in (first, second):
            demo.start()
            deadline = time.monotonic() + 30
            while not demo.pidfile.exists():  # the trainer writes it once it runs
                assert time.monotonic() < deadline, "a trainer never wrote its pidfile"
                time.sleep(0.1)
        for demo, other in ((first, second), (second, first)):
            config = demo.config()
            target = make_target(config.target)
            try:
                plan = await plan_restart(target, config)
            finally:
                await target.close()
            assert plan.trees == () and plan.refusals == (), plan.describe()
            assert demo.trainer is not None and other.trainer is not None
            assert {p.pid for p in plan.processes} == {demo.trainer.pid}
            assert other.trainer.pid not in {p.pid for p in plan.processes}
