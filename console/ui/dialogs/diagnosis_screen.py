"""The verdict of `d`: what is wrong, the observations that say so, the stacks, and what to do next."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.ui.keymap import STEP_ACTIONS, STEP_KEYS, next_step_text
from console.verdicts import level as verdict_level
from console.ui.dialogs.modal import FramedModal
from console.ui.themes import ThemedApp


def verdict_text(verdict, evidence) -> Text:
    """The whole diagnosis as text: verdict, summary, next step, evidence lines, stacks.

    The next step comes before the evidence so it is on screen at 80×24; it names its key
    once, before the core's key-free words ("(p) dump the stacks").
    """
    text = Text()
    text.append(f" {verdict.name.upper()} ", "bold reverse")
    text.append(f" {verdict.summary}\n\n", "bold")
    text.append("Next step  ", "bold underline")
    text.append(f"{next_step_text(verdict.next_step, verdict.step)}\n\n", "bold")
    if verdict.evidence:
        text.append("Evidence\n", "bold underline")
        for line in verdict.evidence:
            text.append(f"  • {line}\n")
        text.append("\n")
    stacks = getattr(evidence, "stacks", ()) if evidence is not None else ()
    if stacks:
        text.append("Threads\n", "bold underline")
        for stack in stacks:
            count = f" ×{stack.count}" if stack.count > 1 else ""
            state = f"waits on {stack.wait}" if stack.wait else ("idle" if stack.idle else "running")
            text.append(f"  {stack.name}{count}", "bold")
            who = f"{stack.label}, " if stack.label else ""
            text.append(f" ({who}pid {stack.pid}, tid {stack.tid}) {state}\n", "dim")
            text.append(f"      {stack.where}\n")
        text.append("\n")
    elif evidence is not None and getattr(evidence, "stack_error", None):
        text.append(f"No stacks: {evidence.stack_error}\n\n", "dim")
    text.rstrip()
    return text


class DiagnosisScreen(FramedModal[None]):
    """Shows one Verdict with its Evidence; Esc closes, the next step's key closes and takes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,d", "dismiss", "Close"),
        *(Binding(key, f"next_step('{step}')", show=False) for step, key in STEP_KEYS.items()),
    ]

    DEFAULT_CSS = """
    DiagnosisScreen {
        & > .frame { width: 90%; max-width: 130; height: auto; max-height: 90%; padding: 1 2; }
        &.-warn > .frame { border: round $warning; border-title-color: $warning; }
        &.-crit > .frame { border: round $error; border-title-color: $error; }
    }
    """

    def __init__(self, verdict, evidence=None) -> None:
        super().__init__(classes=f"-{verdict_level(verdict.name)}")
        self.verdict = verdict
        self.evidence = evidence

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="frame") as box:
            box.border_title = f"Diagnosis: {self.verdict.name}"
            key = STEP_KEYS.get(self.verdict.step)
            box.border_subtitle = f"Esc closes · {key} takes the next step" if key else "Esc closes"
            yield Static(verdict_text(self.verdict, self.evidence))

    async def action_next_step(self, step: str) -> None:
        self.dismiss()
        app = self.app
        assert isinstance(app, ThemedApp)  # the console that diagnosed
        await app.take_action(STEP_ACTIONS[step])  # a read-only refusal still says why
