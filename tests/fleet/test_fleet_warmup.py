"""Warmup per node over the real sshd: every node runs its own steps one at a time, all nodes at once."""

from __future__ import annotations

from pathlib import Path

from console.actions.audit import StepEvent, StepStatus
from console.actions.warmup import plan_warmup
from console.config import parse_config
from console.fleet.fleet import Fleet
from console.fleet.fleet_actions import execute_fleet_warmup


async def test_each_node_warms_its_gpus_in_order(sshd, tmp_path: Path) -> None:
    """Two nodes, two steps each: every step runs on its own node, in order, tagged with the node."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(sshd.ssh_config.read_text().replace(f"Host {sshd.alias}", f"Host {sshd.alias} node-b", 1))
    marks = tmp_path / "warm"
    config = parse_config(
        f'audit_log = "{tmp_path}/audit.jsonl"\n'
        f'[target]\nhosts = ["{sshd.alias}", "node-b"]\nssh_config = "{ssh_config}"\nknown_hosts = "{sshd.known_hosts}"\n'
        f'[warmup]\ncommand = "echo warm {{gpu}} {{seq_len}} >> {marks}-$(hostname)-{{seq_len}}"\n'
        "gpus = [0]\nseq_lens = [128, 256]\n"
    )
    fleet = await Fleet.open(config)
    try:
        events = [e async for e in execute_fleet_warmup(fleet.nodes, plan_warmup(config))]
    finally:
        await fleet.close()
    finals = [e for e in events if isinstance(e, StepEvent) and e.status is not StepStatus.RUNNING]
    for node in (sshd.alias, "node-b"):
        own = [e.step for e in finals if e.data.get("node") == node]
        assert own == [f"{node}: step 1/2", f"{node}: step 2/2"]
    assert all(e.status is StepStatus.OK for e in finals)
    assert sorted(p.name.rsplit("-", 1)[1] for p in tmp_path.glob("warm-*")) == ["128", "256"]
    assert all(p.read_text().count("warm 0") == 2 for p in tmp_path.glob("warm-*"))  # once per node
