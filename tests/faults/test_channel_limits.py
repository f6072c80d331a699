"""More parallel channels than the server allows (MaxSessions 3): the console queues, nothing fails.

A Monitor holds two long-lived channels (sampling agent, log follower) while a writer writes; six
custom actions and six plain commands start at once on the same connection. Every action and command
ends well, every log line arrives once, and no source reports a refused channel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.actions.audit import StepEvent, StepStatus
from console.actions.custom import ActionContext, execute_custom, plan_custom
from console.config import Config, CustomAction, GpuConfig, RunConfig
from console.monitor import Monitor
from console.remote.connect import make_target
from tests.faults.helpers import LineDigest, PacedWriter, record_figure, until
from tests.faults.test_ssh_drops import RecordingState
from tests.sshd import SESSION_PATH, start_sshd


async def test_max_sessions_3_with_monitor_follower_and_actions_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    server = start_sshd(tmp_path, MaxSessions=3, SetEnv=f"PATH={SESSION_PATH} HOME={home}")
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    config = Config(
        target=server.target_config(),
        run=RunConfig(log=str(log), match=r"^no-such-run-\d+$"),
        gpus=GpuConfig(source="none", poll_s=0.2),
        audit_log=str(tmp_path / "audit.jsonl"),
    )
    target = make_target(config.target)
    digest = LineDigest()
    state = RecordingState(digest)
    monitor = Monitor(config, target, state)
    writer = PacedWriter(log)

    async def action(number: int) -> tuple[list[StepEvent], list[str]]:
        custom = CustomAction(name=f"probe {number}", key="x", command=f"sleep 0.3; echo action {number} {{log}}", dangerous=True)
        steps, lines = [], []
        async for event in execute_custom(target, config, plan_custom(custom, ActionContext(log=str(log)))):
            (steps if isinstance(event, StepEvent) else lines).append(event if isinstance(event, StepEvent) else event.text)
        return steps, lines

    try:
        await monitor.start()
        await writer.start()
        await until(lambda: state.latest is not None and digest.count > 100, "samples and lines")
        results = await asyncio.gather(
            *(action(n) for n in range(6)),
            *(target.run(f"sleep 0.2; echo run {n}", timeout=120) for n in range(6)),
        )
        samples = state.samples_received
        await until(lambda: state.samples_received > samples, "samples after the burst of actions")
        written, sha = await writer.stop()
        await until(lambda: digest.count >= written, f"all {written} lines")
        await asyncio.sleep(0.3)
        limit = target.channel_limit
    finally:
        writer.kill()
        await monitor.stop()
        await target.close()
        server.stop()
    for number, (steps, lines) in enumerate(results[:6]):
        assert steps[-1].status is StepStatus.OK, steps
        assert lines == [f"action {number} {log}"]
    assert [r.stdout for r in results[6:]] == [f"run {n}\n" for n in range(6)]
    assert (digest.problems, digest.count, digest.hexdigest) == ([], written, sha)
    assert limit == 3, "the queue learned the server's MaxSessions"
    assert not [e.text for e in state.events if "refused" in e.text or "stopped" in e.text]
    record_figure("max_sessions", limit=3, actions=6, runs=6, lines=written)
