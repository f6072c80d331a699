"""The fleet screen on a real host-list fleet over sshd: rows worst first, the header's sums, a node's panes, a fleet diagnosis."""

from __future__ import annotations

import re
from pathlib import Path

from console.ui.screens.fleet_screen import FleetApp, FleetTable, NodeScreen, TextScreen
from console.ui.panes.log_pane import LogPane
from console.ui.panes.process_pane import ProcessPane
from console.ui.panes.status_bar import StatusBar
from console.ui.panes.throughput_pane import ThroughputPane
from tests.fleet.test_fleet_hosts import fleet_config, writer  # noqa: F401  (the writer fixture)


async def wait_for(pilot, condition, tries: int = 300) -> None:
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met")


async def test_rows_header_node_panes_and_diagnosis(sshd, tmp_path: Path, writer: Path) -> None:  # noqa: F811
    """The dead node sorts first and its verdict is spelled out under the table; Enter on the live node shows its
    processes and log; d lists every node's verdict."""
    app = FleetApp(fleet_config(sshd, tmp_path, writer))
    async with app.run_test(size=(140, 40)) as pilot:
        table = app.fleet_screen.query_one(FleetTable)
        await wait_for(pilot, lambda: app.fleet is not None and all(n.verdict for n in app.fleet.nodes))
        app.repaint()
        await pilot.pause()
        assert [str(key.value) for key in table.rows] == ["pulse-dead", sshd.alias]
        header = str(app.fleet_screen.query_one("#fleet-header").render())
        assert "1/2 nodes healthy" in header and "1.5K tok/s total" in header
        assert str(table.get_cell(sshd.alias, "verdict")) == "healthy"
        detail = str(app.fleet_screen.query_one("#fleet-detail").render())
        assert detail.startswith("pulse-dead: unknown — node unreachable: ")  # the cursor's node, in words

        await pilot.press("down", "enter")
        assert isinstance(app.screen, NodeScreen) and app.screen.node.name == sshd.alias
        await wait_for(pilot, lambda: app.screen.query_one(LogPane).line_count > 0)
        assert app.screen.query_one(ProcessPane).row_count == 1
        assert app.screen.query_one("#log-box").border_subtitle.endswith(" · lines come every 1s")  # the node's pace
        box = app.screen.query_one("#processes-box")
        app.screen.refresh_panes()
        assert box.border_title == "Processes · 1 alive"  # the node's screen is the console's run screen
        assert "healthy" in str(app.screen.query_one(StatusBar).render())  # with the node's verdict on top
        refreshed: list = []
        refresh = box.refresh
        box.refresh = lambda *args, **kwargs: (refreshed.append(args), refresh(*args, **kwargs))[1]
        app.screen.refresh_panes()  # as each second: the same titles repaint nothing of the box
        assert refreshed == []
        box.refresh = refresh
        # The config sets no baseline: the node's rate is shown against the one its verdict measures it
        # by, its log's best sustained rate, once the log has given enough rates (MIN_LOG_VALUES).
        node = app.screen.node
        await wait_for(pilot, lambda: node.baseline is not None, tries=600)
        app.screen.refresh_panes()
        shown = app.screen.query_one(ThroughputPane).figures["baseline"].plain
        assert shown.startswith("100% of its best sustained 1.5K"), shown
        await pilot.press("escape")
        assert app.screen is app.fleet_screen

        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen), tries=400)
        text = str(app.screen.body)
        assert "1/2 nodes healthy: unknown on pulse-dead" in text and f"{sshd.alias}  healthy" in text


async def test_keys_help_and_palette_come_from_the_action_table(sshd, tmp_path: Path, writer: Path) -> None:  # noqa: F811
    """? shows the fleet's keys on the fleet screen and in a node's panes; p dumps the open node's ranks;
    the palette lists the fleet's actions; every binding is one of the table's fleet actions."""
    import sys
    from dataclasses import replace

    from console.ui.dialogs.help_screen import HelpScreen
    from console.ui.keymap import ACTIONS
    from console.ui.palette import PulseCommands

    config = fleet_config(sshd, tmp_path, writer)
    py_spy = str(Path(sys.executable).parent / "py-spy")
    app = FleetApp(replace(config, target=replace(config.target, py_spy=py_spy)))
    fleet_keys = {spec.keys for spec in ACTIONS if spec.fleet_help}
    assert {b.key for b in FleetApp.BINDINGS} == fleet_keys
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.fleet is not None and all(n.verdict for n in app.fleet.nodes))
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert [s.help for s in app.screen.specs if s.action == "dump"] == [
            "py-spy dump of every rank of the selected node (the open node in its panes), grouped by stack"
        ]
        assert "restart" not in {s.action for s in app.screen.specs}  # a host list has no Slurm to restart through
        assert app.check_action("restart", ()) is False and app.check_action("dump", ()) is True
        await pilot.press("escape")

        app.repaint()
        await pilot.pause()
        table = app.fleet_screen.query_one(FleetTable)
        table.move_cursor(row=[str(k.value) for k in table.rows].index(sshd.alias))
        await pilot.press("enter")
        assert isinstance(app.screen, NodeScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, TextScreen), tries=400)
        assert app.screen.title_text == f"py-spy · {sshd.alias}"
        assert re.search(rf"• {sshd.alias}:\d+ runs in <module> \(fleet_writer\.py:\d+\)", str(app.screen.body))

        provider = PulseCommands(app.screen)
        names = [name for name, _ in provider._entries()]
        assert "Diagnose  (d)" in names and "py-spy  (p)" in names and "Help  (?)" in names
