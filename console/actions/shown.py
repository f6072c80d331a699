"""What is shown is what runs: a command holding control characters runs only as confirmed, escaped.

A carriage return and `ESC [2K` in a shared config's launch make a terminal draw
`python3 train.py` over `python3 train.py & touch hidden; wait`. So every plan, confirmation,
step line and audit record shows a command through `visible` (console.observe.textsafe), with
`\\r`, `\\x1b`, `\\u2028`… written out; and a command that holds any such character is refused
unless the operator confirmed its escaped form: by answering the question on a terminal or in
the console's dialog that shows it, or with `--accept-escaped FORM`, FORM being the escaped
command exactly as the plan shows it (so a config changed since is refused again). `--yes`
alone never runs one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from console.actions.audit import ActionRefused
from console.observe.textsafe import hidden_characters, visible
from console.remote.shell import quote


@dataclass(frozen=True, slots=True)
class HiddenControls:
    """A command that holds characters a terminal would not show as themselves."""

    what: str
    """Which command, for the operator: "[run] launch", "[warmup] command", "action 'tail'"."""
    command: str

    @property
    def escaped(self) -> str:
        """The command as every plan shows it, and as the operator confirms it."""
        return visible(self.command)

    @property
    def characters(self) -> str:
        """Its hidden characters, escaped, each once: `\\r \\x1b`."""
        return " ".join(hidden_characters(self.command))

    def plan_line(self) -> str:
        """The plan's line about it (a plan's lines show the command escaped above it)."""
        return (f"REFUSED unless you confirm it escaped: {self.what} holds control characters ({self.characters});"
                " it runs exactly as shown above, not as a terminal would draw it")

    def refusal(self) -> str:
        """Why it did not run: not confirmed, and how to confirm it."""
        return (f"refused: {self.what} holds control characters ({self.characters}) and --yes alone never runs it;"
                f" read its escaped form in the plan, then confirm it on a terminal or with"
                f" --accept-escaped {quote(self.escaped)}")


def confirm_question(hidden: Iterable[HiddenControls]) -> str:
    """The question that asks the operator to confirm these commands' escaped forms."""
    return " and ".join(h.what for h in hidden) + " holds control characters: run it exactly as shown escaped?"


def hidden_controls(commands: Iterable[tuple[str, str | None]]) -> tuple[HiddenControls, ...]:
    """The (what, command) pairs whose command holds control characters."""
    return tuple(HiddenControls(what, command) for what, command in commands if command and hidden_characters(command))


def refuse_unconfirmed(found: Iterable[HiddenControls], confirmed: Collection[str]) -> None:
    """ActionRefused for the first command whose escaped form is not among `confirmed`."""
    for hidden in found:
        if hidden.escaped not in confirmed:
            raise ActionRefused(hidden.refusal())
