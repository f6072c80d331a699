"""The fleet names its slowest node (issue 34): each node's rate scored against the fastest node's (0-1),
and a node below metrics.slow_fraction of it named with its own verdict, its cause: in the fleet
console's rows and header, in its diagnosis (`d`), and in `pulse check --hosts` (text and JSON)."""

from __future__ import annotations

import io

import pytest

from console.commands.fleet_check import fleet_json, write_fleet_report
from console.diagnose import diagnose
from console.evidence import state_evidence
from console.fleet.fleet import Fleet, FleetNode
from console.fleet.fleet_diagnose import FleetDiagnosis, NodeReport
from console.remote.connect import make_target
from console.ui.screens.fleet_screen import row_cells
from tests.fleet.test_fleet_judging import newer
from tests.snapshot_apps.scenarios import FakeClock, build_state, make_config

#: Three nodes of one job: two at the run's usual rate, the third slowed to about two thirds of it.
NODES = {"gpu01": "healthy", "gpu02": "healthy", "gpu03": "slow"}


def judged_fleet(scenarios: dict[str, str]) -> Fleet:
    clock = FakeClock()
    config = make_config()
    nodes = []
    for name, scenario in scenarios.items():
        state = build_state(scenario, clock)
        newer(state)
        nodes.append(FleetNode(name, config, make_target(config.target), state))
    fleet = Fleet(config, nodes)
    fleet.refresh()
    return fleet


def diagnosis_of(fleet: Fleet) -> FleetDiagnosis:
    """The fleet diagnosis as `d` makes it of monitored nodes: each judged from what its state holds."""
    reports = []
    for node in fleet.nodes:
        evidence = state_evidence(node.state, node.config)
        assert evidence is not None
        reports.append(NodeReport(node.name, node.target.label, evidence, diagnose(evidence, node.config)))
    return FleetDiagnosis(reports, slow_fraction=fleet.config.metrics.slow_fraction)


def test_the_fleet_console_scores_each_nodes_rate_and_names_the_slowest():
    fleet = judged_fleet(NODES)
    rows = {row.name: row for row in fleet.rows(FakeClock().now)}
    fastest = max(row.rate for row in rows.values())
    for row in rows.values():
        assert row.rate_score == pytest.approx(row.rate / fastest, abs=1e-3)
        assert row_cells(row)[7].endswith(f" · {row.rate_score:.2f}")
    summary = fleet.summary()
    assert summary.slowest == ("gpu03", rows["gpu03"].rate_score) and rows["gpu03"].rate_score < fleet.config.metrics.slow_fraction


def test_no_node_is_named_the_slowest_when_none_is_below_the_slow_fraction_of_the_fastest():
    fleet = judged_fleet({"gpu01": "healthy", "gpu02": "healthy"})
    assert fleet.summary().slowest is None
    assert all(row.rate_score is not None and row.rate_score > 0.9 for row in fleet.rows(FakeClock().now))
    alone = judged_fleet({"gpu01": "slow"})
    assert alone.summary().slowest is None and alone.rows(FakeClock().now)[0].rate_score is None
    assert diagnosis_of(alone).rate_lines() == []


def test_the_fleet_diagnosis_names_the_slowest_node_and_its_cause_in_text_and_json():
    diagnosis = diagnosis_of(judged_fleet(NODES))
    scores = diagnosis.rate_scores()
    assert [name for name, _, _ in scores][0] == "gpu03" and scores[-1][2] == 1.0
    slow = diagnosis.slowest()
    assert slow is not None and slow.name == "gpu03" and slow.verdict.name == "slow"
    assert diagnosis.headline().endswith("; slowest node gpu03")
    first, second = diagnosis.rate_lines()
    assert first.startswith("rate against the fastest node: gpu03 0.")
    assert second.startswith("gpu03 is the slowest node: ") and second.endswith(f"; slow: {slow.verdict.summary}")
    report = fleet_json(diagnosis)
    assert [row["node"] for row in report["node_rates"]] == [name for name, _, _ in scores]
    assert report["slowest_node"] == {"node": "gpu03", "rate": scores[0][1], "score": scores[0][2], "verdict": "slow",
                                      "summary": slow.verdict.summary}
    out = io.StringIO()
    write_fleet_report(diagnosis, out)
    assert f"  * {second}" in out.getvalue()
