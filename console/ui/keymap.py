"""The one table of the console's actions: it feeds BINDINGS, the command palette and the help screen.

An action is *wired* when it can run: it has a target to act on and its piece of the config
(restart needs [run] launch, warmup needs [warmup]). Unwired actions are not shown anywhere
and their keys do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from console.config import Config, CustomAction


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One thing the operator can do, with every way of reaching it."""

    action: str
    """The Textual action string, e.g. `diagnose` runs `action_diagnose`."""
    keys: str
    """Textual key names, comma separated."""
    key_display: str
    description: str
    """A few words: the footer and the palette show this."""
    help: str
    """One line for the help screen and the palette."""
    group: str
    mutating: bool = False
    footer: bool = True
    needs_target: bool = False


GROUPS = ("View", "Log", "Run")

ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("help", "question_mark,f1", "?", "Help", "Show every key and what it does", "View"),
    ActionSpec("quit", "q", "q", "Quit", "Leave the console (the run is not touched)", "View"),
    ActionSpec("cycle_theme", "t", "t", "Theme", "Switch to the next Pulse theme (all themes: palette → Change theme)", "View"),
    ActionSpec("command_palette", "ctrl+p", "^p", "Palette", "Search every action and theme by name", "View", footer=False),
    ActionSpec("timeline", "h", "h", "Timeline", "The run's history from its journal: events, throughput and loss, verdict bands", "View", footer=False),
    ActionSpec("toggle_follow", "f", "f", "Follow", "Pause or resume following the end of the log", "Log"),
    ActionSpec("next_problem", "n,right_square_bracket", "n", "Next problem", "Jump to the next OOM / NaN / traceback / NCCL / CUDA / killed line", "Log"),
    ActionSpec("previous_problem", "N,left_square_bracket", "N", "Prev problem", "Jump to the previous problem line", "Log", footer=False),
    ActionSpec("search", "slash", "/", "Filter", "Show only log lines containing some text (Esc clears)", "Log"),
    ActionSpec(
        "diagnose",
        "d",
        "d",
        "Diagnose",
        "Gather evidence (processes, CPU, log, GPUs, stacks) and name what is wrong",
        "Run",
        needs_target=True,
    ),
    ActionSpec(
        "dump",
        "p",
        "p",
        "py-spy",
        "py-spy dump of the run's main process: identical stacks grouped, your frames set apart",
        "Run",
        needs_target=True,
    ),
    ActionSpec(
        "restart",
        "R",
        "R",
        "Restart",
        "Safe kill-and-relaunch: plan, confirm, then each step live (cancel between steps)",
        "Run",
        mutating=True,
        needs_target=True,
    ),
    ActionSpec(
        "warmup",
        "w",
        "w",
        "Warmup",
        "Run the configured warmup one GPU and sequence length at a time",
        "Run",
        mutating=True,
        needs_target=True,
    ),
)

def custom_spec(index: int, custom: CustomAction) -> ActionSpec:
    """The table entry of a custom action from the config's [[actions]]."""
    from console.actions.custom import is_mutating  # imported when a config names custom actions

    return ActionSpec(
        f"custom({index})",
        custom.key,
        custom.key,
        custom.name,
        custom.description or f"Run: {custom.command}",
        "Run",
        mutating=is_mutating(custom),
        needs_target=True,
    )


def is_wired(spec: ActionSpec, config: Config, *, has_target: bool) -> bool:
    """Whether `spec` can run here: there is a target when it needs one, and it is configured."""
    if spec.needs_target and not has_target:
        return False
    if spec.action == "warmup" and not (config.warmup.command and config.warmup.gpus):
        return False
    if spec.action == "restart" and not config.run.launch:
        return False
    return True


def wired_actions(config: Config, *, has_target: bool) -> tuple[ActionSpec, ...]:
    """The built-in actions that can run, then the config's custom actions, in table order."""
    specs = list(ACTIONS) + [custom_spec(i, custom) for i, custom in enumerate(config.actions)]
    return tuple(spec for spec in specs if is_wired(spec, config, has_target=has_target))


def binding(spec: ActionSpec) -> Binding:
    """The Textual binding of one action."""
    return Binding(spec.keys, spec.action, spec.description, show=spec.footer, key_display=spec.key_display)
