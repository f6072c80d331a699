"""How often the fleet re-judges a node: when a sample or lines come, else once its sampling interval
has passed (a paced fleet of 256 nodes is not re-judged whole every second for nothing new)."""

from __future__ import annotations

from dataclasses import replace

from console.fleet.fleet import Fleet, FleetNode
from console.model import ConnectionState, ConnectionStatus, LogLine
from console.observe.lines import classify_line
from console.remote.connect import make_target
from tests.snapshot_apps.scenarios import FakeClock, build_state, make_config


def paced_node(clock: FakeClock) -> tuple[Fleet, FleetNode]:
    """One node of a 256-node fleet (sampled every 4 s), its state from the H200 captures, judged once."""
    config = make_config()
    config = replace(config, gpus=replace(config.gpus, poll_s=4.0))
    state = build_state("healthy", clock)
    node = FleetNode("node001", config, make_target(config.target), state)
    fleet = Fleet(config, [node])
    newer(state)
    fleet.refresh()
    return fleet, node


def newer(state, after_s: float = 1.0) -> None:
    """A sample `after_s` after the state's latest, the log unchanged (the cheap verdict compares two)."""
    state.add_sample(replace(state.latest, time=state.latest.time + after_s))


def test_a_node_is_judged_again_when_a_sample_or_lines_come_or_its_interval_passes():
    clock = FakeClock()
    fleet, node = paced_node(clock)
    first = node.verdict
    assert first is not None and first.name == "healthy"

    clock.now += 1.0
    fleet.refresh()
    assert node.verdict is first  # nothing new, a second on: not judged again

    newer(node.state)
    fleet.refresh()
    judged = node.verdict
    assert judged is not first and judged.name == "healthy"  # a sample came: judged at once

    text = "step 99999/100000 | loss 1.2000 | 14.1K tok/s | lr 3.0e-04"
    number = node.state.lines_received + 1
    node.state.add_lines([LogLine(number, text, classify_line(text), time=clock.now)])
    fleet.refresh()
    assert node.verdict is not judged  # lines came: judged at once

    clock.now += 4.0
    quiet = node.verdict
    fleet.refresh()
    assert node.verdict is not quiet  # its interval passed: judged again on time alone


def test_a_node_whose_log_stops_is_no_longer_healthy_by_its_next_samples():
    """The log stops; the node's samples still come every 4 s (its paced interval), each showing the
    log's mtime further behind: past the stall limit of its 2 s rhythm (40 s) it is not healthy (its
    processes still burn CPU: busy but quiet, not hung)."""
    clock = FakeClock()
    fleet, node = paced_node(clock)
    for _ in range(30):  # two minutes
        clock.now += 4.0
        newer(node.state, after_s=4.0)
        fleet.refresh()
    assert node.verdict.name == "unknown" and "log is quiet 2m" in node.verdict.summary


def test_a_node_back_from_unreachable_is_judged_at_once():
    clock = FakeClock()
    fleet, node = paced_node(clock)
    node.state.set_connection(ConnectionState(ConnectionStatus.RECONNECTING, "connection lost"))
    fleet.refresh()
    assert node.verdict.name == "unknown"
    node.state.set_connection(ConnectionState(ConnectionStatus.CONNECTED, detail=""))
    fleet.refresh()  # no new sample yet, within its interval: what it holds still says healthy
    assert node.verdict.name == "healthy"
