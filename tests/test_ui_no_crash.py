"""No crash goes unseen: every palette command runs, and every screen draws with NO_COLOR and in each theme."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from console.actions.audit import OutputLine, StepEvent, StepStatus
from console.config import WarmupConfig
from console.diagnose import diagnose
from console.evidence import from_samples
from console.observe.pyspy import parse_dump_text
from console.remote.target import LocalTarget
from console.ui.dialogs.action_screen import ActionScreen
from console.ui.dialogs.confirm_screen import ConfirmScreen
from console.ui.dialogs.diagnosis_screen import DiagnosisScreen
from console.ui.dialogs.dump_screen import DumpScreen
from console.ui.panes.gpu_pane import GpuPane
from console.ui.dialogs.help_screen import HelpScreen
from console.state import RunState
from console.ui.app import PulseApp
from textual.command import CommandList
from textual.widgets import Input
from tests.snapshot_apps.scenarios import FakeClock, build_state, make_app, make_config

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
THEMES = ("pulse-dark", "pulse-light", "pulse-high-contrast")
SIZE = (100, 30)


def every_action_config():
    """The scenarios' config with a warmup, so that every built-in action is wired."""
    warmup = WarmupConfig(command="python3 /root/warmup.py --gpu {gpu} --seq-len {seq_len}", gpus=(0, 1), seq_lens=(770,))
    return dataclasses.replace(make_config(), warmup=warmup)


async def back_to_the_main_screen(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    while len(app.screen_stack) > 1:
        app.pop_screen()
        await pilot.pause()


async def test_every_palette_command_runs():
    """Ctrl+P lists every command (a key like `[` is not read as markup) and each one runs."""
    app = make_app("hang", read_only=True, target=LocalTarget(), config=every_action_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await app.workers.wait_for_complete()
        await pilot.pause()
        prompts = [str(option.prompt).split("\n")[0] for option in app.screen.query_one(CommandList).options]
        app.pop_screen()
        assert {"Filter  (\\)", "Next problem  (])", "Restart  (R)", "Quit  (q)"} <= set(prompts)
        said = []
        for index, prompt in enumerate(prompts):
            if prompt.startswith("Quit"):
                continue
            await pilot.press("ctrl+p")
            await app.workers.wait_for_complete()
            await pilot.pause()
            commands = app.screen.query_one(CommandList)
            commands.highlighted = index
            assert str(commands.get_option_at_index(index).prompt).startswith(prompt)
            await pilot.press("enter")
            await back_to_the_main_screen(app, pilot)
            said += [n.message for n in app.notices]
        for title in [command.title for command in app.get_system_commands(app.screen)]:
            # Textual's own commands, found by typing their names; Screenshot would write to the
            # real downloads folder, and Quit comes last.
            if title not in ("Quit", "Screenshot"):
                await pilot.press("ctrl+p")
                app.screen.query_one(Input).value = title
                await app.workers.wait_for_complete()
                await pilot.pause()
                await pilot.press("enter")
                await back_to_the_main_screen(app, pilot)
        assert any(m.startswith("read-only: restart disabled") for m in said), said
        await pilot.press("ctrl+p")
        await pilot.press(*"Quit  (q)", "enter")
        await pilot.pause()
    assert app.return_code == 0


def every_screen():
    """A screen of each kind the console pushes, over the hung run."""
    state = build_state("hang")
    config = make_config()
    verdict = diagnose(from_samples(state.samples[0], state.samples[-1], config, state, timed=False), config)
    (dump,) = parse_dump_text((FIXTURES / "pyspy_dump.txt").read_text())

    async def steps():
        yield StepEvent("stop", StepStatus.DONE, "pid 4127 gone")
        yield OutputLine("stop", "Traceback (most recent call last):")

    return {
        "help": lambda app: HelpScreen(app.action_specs),
        "diagnosis": lambda app: DiagnosisScreen(verdict, None),
        "dump": lambda app: DumpScreen(dump),
        "confirm": lambda app: ConfirmScreen("Restart the run", ["stop pid 4127", "  [bold]literal[/]"], dangerous=True),
        "action": lambda app: ActionScreen("Restart the run", steps),
    }


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
@pytest.mark.parametrize("theme", THEMES)
async def test_every_screen_draws_without_colour(theme, size, monkeypatch):
    """NO_COLOR=1 (Textual strips the colour of every segment, which must have a style) in each
    theme: the console before its first sample, then over a hung run with each screen on top."""
    monkeypatch.setenv("NO_COLOR", "1")
    clock = FakeClock()
    waiting = PulseApp(make_config(), RunState(clock=clock), clock=clock, theme=theme)
    async with waiting.run_test(size=size) as pilot:
        await pilot.pause()
        assert "no GPU readings yet" in waiting.query_one(GpuPane).render_line(0).text
    app = make_app("hang", theme=theme)
    assert app.no_color
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for name, make_screen in every_screen().items():
            await app.push_screen(make_screen(app))
            await pilot.pause()
            assert app.screen is not app.screen_stack[0], name
            await back_to_the_main_screen(app, pilot)
        await pilot.press("q")
    assert app.return_code == 0


async def test_a_sample_drawn_after_the_panes_are_torn_down_is_dropped():
    """The monitor and the app's timers run until the app's own unmount, after its panes are torn
    down (their styles gone): a flood's held batch firing then once crashed the quit ("No
    'process-pane--alive' key in COMPONENT_CLASSES"). The same repaint on the torn-down panes."""
    app = make_app("healthy")
    async with app.run_test() as pilot:
        await pilot.pause()
        await pilot.press("q")
    assert app.run_screen.process_pane._component_styles == {}  # what Textual's teardown leaves
    latest = app.state.latest
    moved = tuple(dataclasses.replace(p, cpu_pct=(p.cpu_pct or 0) + 1) for p in latest.processes)
    app.state.add_sample(dataclasses.replace(latest, time=latest.time + 1, processes=moved))
    app.run_screen.refresh_panes()
    app.run_screen.update_pending()
