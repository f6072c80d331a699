"""The fleet console: one row per node, worst first; Enter opens a node's run screen.

`FleetApp` forms the fleet (a Slurm job's nodes or a host list) in a worker, starts a
Monitor per node and repaints once a second from the nodes' RunStates: the rows are
updated in place (the cursor stays on its node), the header sums the job. `d` diagnoses
every node at once and groups every rank's stack; `R` restarts the job through Slurm
(plan, confirm, steps) with the console's own confirm and action screens.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from console.config import Config
from console.fleet.fleet import Fleet, FleetError, FleetNode, NodeRow
from console.fleet.fleet_actions import restarted_job
from console.ui.dialogs.action_screen import ActionScreen
from console.ui.dialogs.confirm_screen import ConfirmScreen
from console.ui.panes.key_hints import KeyHints
from console.ui.render import BaseScreen
from console.verdicts import level as verdict_level
from console.ui.keymap import bindings, fleet_actions, next_step_text, run_screen_actions
from console.ui.dialogs.modal import FramedModal
from console.ui.palette import PulseCommands
from console.ui.screens.run_screen import RunScreen
from console.ui.themes import PulseTheme, ThemedApp, Thresholds, run_themed
from console.units import format_duration, si

REFRESH_S = 1.0
#: A node screen polls its node's state for new log lines this often (a node has no change callback).
NODE_LOG_FLUSH_S = 0.05
#: How often Slurm is asked for the job's state and elapsed time again.
JOB_REFRESH_S = 15.0
COLUMNS = ("node", "verdict", "GPUs", "GPU mem", "util", "ranks", "log grew", "throughput", "link")


def row_cells(row: NodeRow) -> tuple[Text | str, ...]:
    """The table cells of one node (verdict coloured by how bad it is)."""
    level = verdict_level(row.verdict) if row.verdict else "ok"
    style = {"ok": "green", "warn": "yellow", "crit": "bold red"}[level]
    verdict = Text(row.verdict or "…", style=style if row.verdict else "dim")
    if row.gpu_memory_used_mib is not None and row.gpu_memory_total_mib:
        memory = f"{row.gpu_memory_used_mib / 1024:.0f}/{row.gpu_memory_total_mib / 1024:.0f} GiB"
    else:
        memory = "–"
    util = "–" if row.gpu_util_pct is None else f"{row.gpu_util_pct:.0f}%"
    grew = "–" if row.log_silent_s is None else f"{format_duration(row.log_silent_s)} ago"
    rate = "–" if row.rate is None else f"{si(row.rate)} {row.rate_unit}"
    if row.rate_score is not None:
        rate += f" · {row.rate_score:.2f}"  # against the fastest node
    return (row.name, verdict, str(row.gpus), memory, util, str(row.ranks), grew, rate, row.connection)


class FleetTable(DataTable):
    """The nodes, one row each, keyed by node name and updated in place."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column, key=column)

    def show(self, rows: list[NodeRow]) -> None:
        """Rows in the given order (worst first); existing rows are rewritten, not rebuilt."""
        order = [row.name for row in rows]
        current = [str(key.value) for key in self.rows]
        if current != order:
            selected = current[self.cursor_row] if current and 0 <= self.cursor_row < len(current) else None
            self.clear()
            for row in rows:
                self.add_row(*row_cells(row), key=row.name)
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for row in rows:
            for column, cell in zip(COLUMNS, row_cells(row)):
                self.update_cell(row.name, column, cell)

    @property
    def selected(self) -> str | None:
        keys = [str(key.value) for key in self.rows]
        return keys[self.cursor_row] if keys and 0 <= self.cursor_row < len(keys) else None


class FleetScreen(BaseScreen):
    """The job at a glance: a header with the sums, then every node worst first."""

    BINDINGS = [Binding("enter", "open_node", "Node panes")]

    def compose(self) -> ComposeResult:
        yield Static("forming the fleet…", id="fleet-header")
        yield FleetTable(id="fleet-table")
        yield Static("", id="fleet-detail")
        yield KeyHints(id="keys")

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_open_node()

    @on(DataTable.RowHighlighted)
    def show_detail(self) -> None:
        """The verdict of the node under the cursor, in words, below the table."""
        node = self.selected_node()
        self.query_one("#fleet-detail", Static).update(node_detail(node) if node is not None else "")

    def action_open_node(self) -> None:
        """Open the four panes of the node under the cursor."""
        node = self.selected_node()
        if node is not None:
            app = self.app
            assert isinstance(app, FleetApp)
            app.push_screen(NodeScreen(node, thresholds=lambda: app.thresholds, read_only=app.read_only))

    def selected_node(self) -> FleetNode | None:
        name = self.query_one(FleetTable).selected
        app = self.app
        assert isinstance(app, FleetApp)
        return next((n for n in app.fleet.nodes if n.name == name), None) if app.fleet else None


class NodeScreen(RunScreen):
    """One node's run screen, with the fleet's extras: the node's name on its GPUs, its line pacing
    under its log, and Esc (once the log's search is clear) or Backspace back to the fleet."""

    BINDINGS = [Binding("backspace", "app.pop_screen", "Fleet"), *bindings(run_screen_actions())]

    def __init__(self, node: FleetNode, *, thresholds: Callable[[], Thresholds], read_only: bool) -> None:
        pacing = node.monitor.log_pacing if node.monitor is not None else None
        # A large fleet's node sends its lines in steps: say so, lest they look stuck.
        note = f"lines come every {format_duration(pacing.send_s, tenths=True)}" if pacing is not None else ""
        super().__init__(
            node.config,
            node.state,
            verdict=lambda: node.verdict,
            thresholds=thresholds,
            usual_s=node.state.write_interval_s,
            baseline=lambda: node.baseline,
            read_only=read_only,
            clock=node.state.clock,
            node_name=node.name,
            log_note=note,
            poll_s=NODE_LOG_FLUSH_S,  # a node has no change callback
        )
        self.node = node

    def action_clear_search(self) -> None:
        """Esc: clear the log's search or filter; with none, back to the fleet."""
        pane = self.log_pane
        if pane.search_text or pane.filter_text or self.search_input.has_class("-visible"):
            super().action_clear_search()
        else:
            self.app.pop_screen()


class TextScreen(FramedModal[None]):
    """A scrollable text (the fleet diagnosis); Esc or q closes it."""

    BINDINGS = [Binding("escape,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    TextScreen > .frame { width: 90%; height: 85%; }
    """

    def __init__(self, title: str, text: Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="frame") as scroll:
            scroll.border_title = self.title_text
            yield Static(self.body)


def node_detail(node: FleetNode) -> Text:
    """The selected node's verdict in words, under the table: what the row's cells cannot hold."""
    verdict = node.verdict
    if verdict is None:
        return Text(f"{node.name}: no verdict yet", style="dim")
    text = Text(f"{node.name}: ", style="bold")
    text.append(f"{verdict.name} — {verdict.summary}")
    if verdict.next_step and verdict.next_step not in verdict.summary:
        text.append(f"\nnext: {next_step_text(verdict.next_step, verdict.step)}", style="dim")
    return text


def diagnosis_text(diagnosis) -> Text:
    """The fleet diagnosis: the headline, the nodes' rates and the slowest, the ranks grouped by stack, NCCL,
    then each node's verdict."""
    from console.observe.nccl import nccl_lines

    text = Text()
    worst = diagnosis.worst
    text.append(f" {worst.name.upper()} ", "bold reverse")
    text.append(f" {diagnosis.headline()}\n\n", "bold")
    rates = diagnosis.rate_lines()
    if rates:
        text.append("Rates\n", "bold underline")
        for line in rates:
            text.append(f"  • {line}\n")
        text.append("\n")
    stacks = diagnosis.stack_lines() if diagnosis.ranks else []
    if stacks or diagnosis.nccl:
        text.append("Ranks\n", "bold underline")
        for line in stacks + nccl_lines(diagnosis.nccl):
            text.append(f"  • {line}\n")
        text.append("\n")
    text.append("Nodes\n", "bold underline")
    for report in sorted(diagnosis.nodes, key=lambda n: (-len(verdict_level(n.verdict.name)), n.name)):
        text.append(f"  {report.name}  ", "bold")
        text.append(f"{report.verdict.name}: {report.verdict.summary}\n")
        for line in report.verdict.evidence[:3]:
            text.append(f"      {line}\n", "dim")
    return text


class FleetReady(Message):
    """The fleet was formed (or why not)."""

    def __init__(self, fleet: Fleet | None, error: str | None = None) -> None:
        super().__init__()
        self.fleet = fleet
        self.error = error


class JobRestarted(Message):
    """Slurm runs the job again after a restart: under a new ID after a resubmit, the same after a requeue."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id


class FleetApp(ThemedApp):
    """The console for a multi-node run."""

    CSS_PATH = str(Path(__file__).parent.parent / "pulse.tcss")
    TITLE = "Pulse · fleet"
    COMMANDS = App.COMMANDS | {PulseCommands}
    BINDINGS = bindings(fleet_actions(has_slurm=True))
    DEFAULT_CSS = """
    #fleet-header { height: auto; padding: 0 1; background: $panel; text-style: bold; }
    #fleet-table { height: 1fr; }
    #fleet-detail { height: auto; max-height: 4; padding: 0 1; background: $panel; }
    """

    def __init__(self, config: Config, *, read_only: bool = False, theme: str | None = None,
                 themes: dict[str, PulseTheme] | None = None, clock=time.monotonic) -> None:
        super().__init__(theme=theme, themes=themes)
        self.config = config
        self.read_only = read_only
        self.action_specs = fleet_actions(has_slurm=config.target.slurm_job is not None)
        self.clock = clock
        self.fleet: Fleet | None = None
        self.fleet_screen = FleetScreen()

    def on_mount(self) -> None:
        self.push_screen(self.fleet_screen)
        self.form_fleet()
        self.set_interval(REFRESH_S, self.repaint)
        self.set_interval(JOB_REFRESH_S, self.refresh_job)

    @work(exclusive=True, exit_on_error=False, group="job")
    async def refresh_job(self) -> None:
        """The header's job state and elapsed time, from Slurm again (a slow timer: one squeue-sized ask)."""
        if self.fleet is None:
            return
        try:
            await self.fleet.refresh_job()
        except FleetError as exc:
            self.notify(f"job state: {exc}", severity="warning", timeout=5)

    @work(exclusive=True, exit_on_error=False, group="fleet")
    async def form_fleet(self) -> None:
        """Ask Slurm (or the host list) for the nodes and start a Monitor on each."""
        try:
            fleet = await Fleet.open(self.config)
        except FleetError as exc:
            self.post_message(FleetReady(None, str(exc)))
            return
        await fleet.start()
        self.post_message(FleetReady(fleet))

    @on(FleetReady)
    def _fleet_ready(self, message: FleetReady) -> None:
        if message.fleet is None:
            self.fleet_screen.query_one("#fleet-header", Static).update(f"no fleet: {message.error}")
            self.notify(message.error or "", severity="error", timeout=10)
            return
        self.fleet = message.fleet
        self.repaint()

    async def on_unmount(self) -> None:
        if self.fleet is not None:
            await self.fleet.close()

    def header_text(self) -> str:
        """The job in one line: Slurm's view, nodes healthy / total, the summed throughput, the slowest node."""
        assert self.fleet is not None
        summary = self.fleet.summary()
        parts = []
        job_line = self.fleet.job_line()
        if job_line is not None:
            parts.append(job_line)
        parts.append(f"{summary.healthy}/{summary.nodes} nodes healthy")
        if summary.rate is not None:
            parts.append(f"{si(summary.rate)} {summary.rate_unit} total")
        if summary.worst and summary.worst != "healthy":
            parts.append(f"worst: {summary.worst}")
        if summary.slowest is not None:
            name, score = summary.slowest
            parts.append(f"slowest: {name} at {score:.2f} of the fastest")
        return " · ".join(parts)

    def repaint(self) -> None:
        """Verdicts from the held samples, then the header and rows (only while the fleet screen shows)."""
        if self.fleet is None:
            return
        self.fleet.refresh()
        if self.screen is not self.fleet_screen:
            return
        self.fleet_screen.query_one("#fleet-header", Static).update(self.header_text())
        self.fleet_screen.query_one(FleetTable).show(self.fleet.rows(self.clock()))
        self.fleet_screen.show_detail()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Only the table's wired fleet actions: a host list has no Slurm to restart through."""
        if action == "restart" and self.config.target.slurm_job is None:
            return False
        return True

    def action_diagnose(self) -> None:
        if self.fleet is None:
            return
        self.notify(f"diagnosing {len(self.fleet.nodes)} nodes…", timeout=3)
        self.run_fleet_diagnosis(self.fleet.nodes, "auto", "Fleet diagnosis")

    def action_dump(self) -> None:
        """py-spy on every rank of one node: the open node, else the one under the cursor."""
        node = self.screen.node if isinstance(self.screen, NodeScreen) else self.fleet_screen.selected_node()
        if node is None:
            self.notify("no node selected", severity="warning", timeout=3)
            return
        self.notify(f"py-spy on every rank of {node.name}…", timeout=3)
        self.run_fleet_diagnosis([node], "always", f"py-spy · {node.name}")

    @work(exclusive=True, exit_on_error=False, group="diagnose")
    async def run_fleet_diagnosis(self, nodes: list[FleetNode], dump_ranks: str, title: str) -> None:
        from console.fleet.fleet_diagnose import diagnose_fleet

        job = self.fleet.job if self.fleet is not None else None
        diagnosis = await diagnose_fleet(nodes, job=job, dump_ranks=dump_ranks)
        self.push_screen(TextScreen(title, diagnosis_text(diagnosis)))

    async def follow_restart(self, events):
        """The restart's events, passed on; once Slurm runs the job again the console follows it."""
        async for event in events:
            job_id = restarted_job(event)
            if job_id is not None:
                self.post_message(JobRestarted(job_id))
            yield event

    @on(JobRestarted)
    def _job_restarted(self, message: JobRestarted) -> None:
        self.follow_job(message.job_id)

    @work(exclusive=True, exit_on_error=False, group="fleet")
    async def follow_job(self, job_id: str) -> None:
        """Watch `job_id` from now on: the old job's monitors stop, the new job's nodes are formed and watched."""
        old = self.fleet
        previous = old.job.job_id if old is not None and old.job is not None else None
        history = old.history if old is not None else ()
        if previous is not None and previous != job_id:
            history = (*history, previous)
            self.notify(f"following job {job_id}: the restart replaced job {previous}", timeout=8)
        self.fleet = None
        if old is not None:
            await old.close()
        self.config = replace(self.config, target=replace(self.config.target, slurm_job=job_id))
        try:
            fleet = await Fleet.open(self.config)
        except FleetError as exc:
            self.post_message(FleetReady(None, str(exc)))
            return
        fleet.history = history
        await fleet.start()
        self.post_message(FleetReady(fleet))

    def action_restart(self) -> None:
        if self.fleet is None or self.fleet.slurm is None or self.fleet.job is None:
            self.notify("restart goes through Slurm: start the console with --slurm-job", severity="warning")
            return
        self.plan_restart()

    @work(exclusive=True, exit_on_error=False, group="plan")
    async def plan_restart(self) -> None:
        from console.actions.audit import ActionRefused
        from console.fleet.fleet_actions import execute_fleet_restart, plan_fleet_restart

        fleet = self.fleet
        assert fleet is not None and fleet.slurm is not None and fleet.job is not None
        slurm = fleet.slurm
        try:
            plan = await plan_fleet_restart(slurm, self.config, fleet.job.job_id, read_only=self.read_only)
        except ActionRefused as exc:
            self.notify(str(exc), severity="warning", timeout=8)
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                events = lambda: self.follow_restart(execute_fleet_restart(slurm, self.config, plan))  # noqa: E731
                self.push_screen(ActionScreen("Restart the job", events))

        screen = ConfirmScreen("Restart the job through Slurm", plan.describe(), dangerous=True, hidden=plan.hidden)
        self.push_screen(screen, callback=confirmed)


def run_fleet_console(config: Config, args: argparse.Namespace) -> int:
    """`pulse --slurm-job ID` / `--hosts a,b`: the fleet console until quit."""
    read_only = bool(getattr(args, "read_only", False))
    return run_themed(lambda theme, themes: FleetApp(config, read_only=read_only, theme=theme, themes=themes), args)
