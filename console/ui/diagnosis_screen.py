"""The verdict of `d`: what is wrong, the observations that say so, the stacks, and what to do next."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from console.ui.modal import FramedModal


def verdict_level(name: str) -> str:
    """`ok`, `warn` or `crit` for a verdict name (how loudly to show it)."""
    from console.diagnose import is_problem, severity

    if not is_problem(name):
        return "ok"
    return "crit" if severity(name) >= severity("hung") else "warn"


def verdict_text(verdict, evidence) -> Text:
    """The whole diagnosis as text: verdict, summary, evidence lines, stacks, next step."""
    text = Text()
    text.append(verdict.name.upper(), "bold reverse")
    text.append(f"  {verdict.summary}\n\n", "bold")
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
    text.append("Next step\n", "bold underline")
    text.append(f"  {verdict.next_step}")
    if verdict.key:
        text.append(f"  (key {verdict.key})", "bold")
    return text


class DiagnosisScreen(FramedModal[None]):
    """Shows one Verdict with its Evidence; Esc closes."""

    BINDINGS = [Binding("escape,q,d", "dismiss", "Close")]

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
            box.border_subtitle = "Esc closes"
            yield Static(verdict_text(self.verdict, self.evidence))
