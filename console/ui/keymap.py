"""The one table of the console's actions: it feeds BINDINGS, the command palette and the help screen.

An action is *wired* when it can run: it has a target to act on and its piece of the config
(restart needs [run] launch, warmup needs [warmup]). Unwired actions are not shown anywhere
and their keys do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual.binding import Binding, BindingType

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
    bound: bool = True
    """False for keys a focused widget handles itself (scrolling, End in the log): listed in help only."""
    priority: bool = False
    """Bound with priority, so a focused widget (an input) cannot take the key first."""
    help_keys: str = ""
    """Every key as the help screen writes it, when the footer's `key_display` shows only one."""
    fleet_help: str = ""
    """What the key does on the fleet console (every node of a job); empty: not a fleet key."""
    on_screen: bool = False
    """Run by the run's screen (its log and panes: console.ui.screens.run_screen), not by the app."""


GROUPS = ("Run", "Log", "Panes", "View")

# The order is the footer's: what a verdict asks for first (d, p, l), the mutating keys, then
# the log's. A narrow footer wraps them to more lines (console/ui/panes/key_hints.py).
ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec(
        "help", "question_mark,f1", "?", "Help", "Show every key and what it does", "View", help_keys="? F1",
        fleet_help="Show every key and what it does",
    ),
    ActionSpec(
        "diagnose",
        "d",
        "d",
        "Diagnose",
        "Gather evidence (processes, CPU, log, GPUs, stacks) and name what is wrong",
        "Run",
        needs_target=True,
        fleet_help="Diagnose every node at once; when one looks stuck, every rank's stack, grouped",
    ),
    ActionSpec(
        "dump",
        "p",
        "p",
        "py-spy",
        "py-spy dump of the selected process (the run's main process when the table is not focused)",
        "Run",
        needs_target=True,
        fleet_help="py-spy dump of every rank of the selected node (the open node in its panes), grouped by stack",
    ),
    ActionSpec("problem_log", "l", "l", "Problem line", "The log at the latest problem (the line a verdict names)", "Log", on_screen=True),
    ActionSpec(
        "restart",
        "R",
        "R",
        "Restart",
        "Safe kill-and-relaunch: plan, confirm, then each step live (cancel between steps)",
        "Run",
        mutating=True,
        needs_target=True,
        fleet_help="Restart the job through Slurm (requeue, or scancel + [run] launch's sbatch); the console follows it",
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
    ActionSpec(
        "signal",
        "k",
        "k",
        "Signal",
        "Send a chosen signal to the selected process (plan shown, confirmed, audited)",
        "Run",
        mutating=True,
        needs_target=True,
    ),
    ActionSpec("search", "slash", "/", "Search", "Search the log (regex, case-insensitive); matches highlighted", "Log", on_screen=True),
    ActionSpec("filter", "backslash", "\\", "Filter", "Show only log lines matching a regex (case-insensitive)", "Log", on_screen=True),
    ActionSpec("next", "n", "n", "Next", "Next search match; without a search, next problem (a whole traceback is one)", "Log", on_screen=True),
    ActionSpec("previous", "N", "N", "Prev", "Previous search match; without a search, previous problem", "Log", footer=False, on_screen=True),
    ActionSpec(
        "next_problem",
        "right_square_bracket",
        "]",
        "Next problem",
        "Next problem: OOM, NaN, traceback, NCCL, CUDA, killed (a whole traceback is one)",
        "Log",
        footer=False,
        on_screen=True,
    ),
    ActionSpec("previous_problem", "left_square_bracket", "[", "Prev problem", "Previous problem", "Log", footer=False, on_screen=True),
    ActionSpec("toggle_follow", "f", "f", "Follow", "Pause or resume following the end of the log", "Log", on_screen=True),
    ActionSpec("follow", "end", "End", "Follow", "Follow the end of the log again", "Log", footer=False, bound=False, on_screen=True),
    ActionSpec("clear_search", "escape", "Esc", "Clear", "Clear the search or filter and follow the end again", "Log", footer=False, on_screen=True),
    ActionSpec("toggle_line_numbers", "number_sign", "#", "Line numbers", "Show or hide line numbers", "Log", footer=False, on_screen=True),
    ActionSpec("go_to_line", "colon", ":", "Go to line", "Go to a line by its number", "Log", footer=False, on_screen=True),
    ActionSpec(
        "toggle_tree",
        "f5,v",
        "F5",
        "Tree",
        "Processes as a tree (children under their parent) or a flat list",
        "Panes",
        footer=False,
        help_keys="F5 v",
        on_screen=True,
    ),
    ActionSpec(
        "toggle_gpu_graphs",
        "g",
        "g",
        "GPU graphs",
        "GPUs as graphs over time (utilisation, memory, power, SM clock), or as bars again",
        "Panes",
        footer=False,
        on_screen=True,
    ),
    ActionSpec("focus_next", "tab", "Tab", "Next pane", "Move to the next pane (GPUs, processes, log); Shift+Tab back", "Panes", footer=False),
    ActionSpec("scroll", "up,down", "↑ ↓", "Move", "Move the selection (GPUs, processes) or scroll the log a line", "Panes", footer=False, bound=False),
    ActionSpec("page", "pageup,pagedown", "PgUp PgDn", "Page", "Scroll a page; scrolling the log up pauses following", "Panes", footer=False, bound=False),
    ActionSpec("top", "home", "Home", "Top", "First row, or the start of the log held", "Panes", footer=False, bound=False),
    ActionSpec(
        "cycle_theme", "t", "t", "Theme", "Switch to the next Pulse theme (all themes: palette → Change theme)", "View",
        fleet_help="Switch to the next Pulse theme (all themes: palette → Change theme)",
    ),
    ActionSpec(
        "command_palette", "ctrl+p", "^p", "Palette", "Search every action and theme by name", "View", footer=False,
        fleet_help="Search every action and theme by name",
    ),
    ActionSpec("timeline", "h", "h", "Timeline", "The run's history from its journal: events, throughput and loss, verdict bands", "View"),
    ActionSpec("quit", "q", "q", "Quit", "Leave the console (the run is not touched)", "View", fleet_help="Leave the console (the job is not touched)"),
    ActionSpec(
        "quit", "ctrl+c", "^c", "Quit", "Leave the console, as in htop, nvitop and k9s", "View", footer=False, priority=True,
        fleet_help="Leave the console, as in htop, nvitop and k9s",
    ),
)

#: The action that takes each next step a verdict may name (console.verdicts.NEXT_STEPS)...
STEP_ACTIONS = {"dump": "dump", "log": "problem_log", "restart": "restart", "warmup": "warmup", "continue": "signal"}
#: ...and its key.
STEP_KEYS = {step: next(spec.keys for spec in ACTIONS if spec.action == action) for step, action in STEP_ACTIONS.items()}


def next_step_text(next_step: str, step: str | None) -> str:
    """A verdict's next step as the console shows it: the key of its `step` before the core's key-free prose."""
    key = STEP_KEYS.get(step) if step else None
    return f"({key}) {next_step}" if key else next_step


def custom_spec(index: int, custom: CustomAction) -> ActionSpec:
    """The table entry of a custom action from the config's [[actions]]."""
    from console.actions.custom import is_mutating  # imported when a config names custom actions

    return ActionSpec(
        f"custom({index})",
        key_name(custom.key),
        custom.key,
        custom.name,
        custom.description or f"Run: {custom.command}",
        "Run",
        mutating=is_mutating(custom),
        needs_target=True,
    )


def taken_keys(config: Config) -> list[str]:
    """One error per custom action on a key the console binds itself: 'pulse.toml:3: actions[0].key: 'q' is taken …'."""
    bound = {binding.key for binding in Binding.make_bindings((spec.keys, spec.action) for spec in ACTIONS)}
    return [
        f"{custom.key_source}: {custom.key!r} is taken by a built-in key"
        for custom in config.actions
        if key_name(custom.key) in bound
    ]


def key_name(character: str) -> str:
    """Textual's name of the key that types `character`: '?' is question_mark; ',' must be named, it separates keys."""
    return "comma" if character == "," else next(iter(Binding.make_bindings([(character, "")]))).key


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


def fleet_actions(*, has_slurm: bool) -> tuple[ActionSpec, ...]:
    """The table's actions the fleet console has, each with its fleet help line; restart only with Slurm."""
    return tuple(
        replace(spec, help=spec.fleet_help)
        for spec in ACTIONS
        if spec.fleet_help and (has_slurm or spec.action != "restart")
    )


def run_screen_actions() -> tuple[ActionSpec, ...]:
    """The table's actions that the run's screen runs (the log's and the panes')."""
    return tuple(spec for spec in ACTIONS if spec.on_screen)


def bound_action(spec: ActionSpec) -> str:
    """The action string a binding runs: the current screen's for the run screen's actions, so
    the app's bindings keep the table's (the footer's) order whoever runs them."""
    return f"screen.{spec.action}" if spec.on_screen else spec.action


def bindings(specs: tuple[ActionSpec, ...]) -> list[BindingType]:
    """The Textual bindings of the bound actions among `specs`."""
    return [
        Binding(
            spec.keys,
            bound_action(spec),
            spec.description,
            show=spec.footer,
            key_display=spec.key_display,
            priority=spec.priority,
        )
        for spec in specs
        if spec.bound
    ]
