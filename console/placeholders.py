"""Where a placeholder may stand in a command template: bare, where bash reads words.

Pulse fills `{log}`, `{pid}`… with values it quotes itself (console.actions.custom.fill_command),
so `train_$(cd;touch pwned).log` arrives as the one word `'train_$(cd;touch pwned).log'`. That
holds only where bash reads that quoting: in the template's own `"{log}"` the single quotes
are literal and `$(…)` runs; after a backslash (`\\{log}`) the opening quote is literal; in
backquotes, `${…}`, arithmetic, a comment or a here-document, a quote, backquote, newline or
`EOF` line in the value ends what the template opened. `misplaced_placeholders` names each
placeholder that stands in one of those places and `placeholder_refusal` says it in one line, so
a config holding one is refused when it is read (console.config) and a template built otherwise
when it is filled. Inside `$(…)` bash reads words afresh, so a placeholder there (even in `"$(tail {log})"`)
is bare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The placeholders of a custom action's command (`[[actions]] command`).
CUSTOM_PLACEHOLDERS = ("pid", "pids", "log", "gpu", "host")
#: The placeholders of `[warmup] command`.
WARMUP_PLACEHOLDERS = ("gpu", "seq_len")

#: Where a quoted value is one literal word: the command line, `$(…)` and `(…)` inside it.
_BARE = frozenset({"command", "subst", "paren"})
_WHERE = {
    "single": "inside single quotes",
    "double": "inside double quotes",
    "ansi": "inside $'…'",
    "backquote": "inside backquotes",
    "param": "inside ${…}",
    "arith": "inside arithmetic (( … ))",
    "comment": "in a comment",
    "heredoc": "in a here-document",
}
_WORD_END = frozenset(" \t\n;&|()<>")


class _Frame:
    """One context of the scan: its kind, a nesting depth, and a here-document's pending delimiters."""

    __slots__ = ("kind", "depth", "delimiters")

    def __init__(self, kind: str, delimiters: list[tuple[str, bool]] | None = None) -> None:
        self.kind = kind
        self.depth = 0
        self.delimiters = delimiters or []


def _heredoc_word(template: str, start: int) -> tuple[str, bool, int]:
    """After `<<` at `start`: the delimiter (quotes removed), whether `<<-` strips tabs, and where it ends."""
    i = start
    strip_tabs = template.startswith("-", i)
    i += strip_tabs
    while i < len(template) and template[i] in " \t":
        i += 1
    word, quote = [], ""
    while i < len(template) and (quote or template[i] not in _WORD_END):
        char = template[i]
        if quote:
            quote = "" if char == quote else quote
            if quote:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and i + 1 < len(template):
            i += 1
            word.append(template[i])
        else:
            word.append(char)
        i += 1
    return "".join(word), strip_tabs, i


def misplaced_placeholders(template: str, names: Iterable[str]) -> list[str]:
    """`{name} inside double quotes` (and the like) for each placeholder of `names` that stands
    where a value Pulse quoted would not stay one literal word; [] when every one stands bare."""
    names = tuple(names)
    if not names:
        return []
    placeholder = re.compile(r"\{(?:" + "|".join(map(re.escape, names)) + r")\}")
    problems: list[str] = []
    stack = [_Frame("command")]
    pending: list[tuple[str, bool]] = []  # here-documents opened on this line, read from the next
    i, n = 0, len(template)

    def misplaced(match: re.Match, where: str) -> int:
        problems.append(f"{match.group(0)} {where}")
        return match.end()

    while i < n:
        frame = stack[-1]
        kind = frame.kind
        if kind == "heredoc" and (i == 0 or template[i - 1] == "\n"):
            end = template.find("\n", i)
            line = template[i:] if end < 0 else template[i:end]
            delimiter, strip_tabs = frame.delimiters[0]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                frame.delimiters.pop(0)
                if not frame.delimiters:
                    stack.pop()
                i = n if end < 0 else end + 1
                continue
        if match := placeholder.match(template, i):
            i = match.end() if kind in _BARE else misplaced(match, _WHERE[kind])
            continue
        char = template[i]
        if char == "\\" and kind not in ("single", "comment", "heredoc"):
            if match := placeholder.match(template, i + 1):
                i = misplaced(match, "right after a backslash" if kind in _BARE else _WHERE[kind])
            else:
                i += 2
            continue
        if char == "$" and kind in _BARE | {"double", "param", "arith"}:
            if match := placeholder.match(template, i + 1):  # `${log}` would be filled as `$'…'`
                i = misplaced(match, "right after a $" if kind in _BARE else _WHERE[kind])
                continue
        if kind == "single":
            if char == "'":
                stack.pop()
        elif kind == "ansi":
            if char == "'":
                stack.pop()
        elif kind == "backquote":
            if char == "`":
                stack.pop()
        elif kind == "comment":
            if char == "\n":
                stack.pop()
                continue  # the newline ends the command line too (here-documents start after it)
        elif kind == "heredoc":
            pass
        elif char == "$" and template.startswith(("$((", "$(", "${", "$'", '$"'), i):
            two = template[i : i + 3] if template.startswith("$((", i) else template[i : i + 2]
            stack.append(_Frame({"$((": "arith", "$(": "subst", "${": "param", "$'": "ansi", '$"': "double"}[two]))
            i += len(two)
            continue
        elif char == "`":
            stack.append(_Frame("backquote"))
        elif kind == "double":
            if char == '"':
                stack.pop()
        elif char == "'":
            stack.append(_Frame("single"))
        elif char == '"':
            stack.append(_Frame("double"))
        elif kind == "param":
            if char == "{":
                frame.depth += 1
            elif char == "}":
                if frame.depth:
                    frame.depth -= 1
                else:
                    stack.pop()
        elif kind == "arith":
            if char == "(":
                frame.depth += 1
            elif char == ")":
                if frame.depth:
                    frame.depth -= 1
                else:
                    stack.pop()
                    i += 2 if template.startswith("))", i) else 1
                    continue
        elif template.startswith("((", i):
            stack.append(_Frame("arith"))
            i += 2
            continue
        elif char == "(":
            stack.append(_Frame("paren"))
        elif char == ")":
            if kind != "command":
                stack.pop()
        elif char == "#" and (i == 0 or template[i - 1] in _WORD_END):
            stack.append(_Frame("comment"))
        elif template.startswith("<<<", i):
            i += 3  # a here-string is a word like any other
            continue
        elif template.startswith("<<", i):
            delimiter, strip_tabs, i = _heredoc_word(template, i + 2)
            if delimiter:
                pending.append((delimiter, strip_tabs))
            continue
        elif char == "\n" and pending:
            stack.append(_Frame("heredoc", pending))
            pending = []
        i += 1
    return problems


def placeholder_refusal(template: str, names: Iterable[str]) -> str | None:
    """Why `template` cannot be filled safely, in one line (its misplaced placeholders); None when it can."""
    problems = misplaced_placeholders(template, names)
    if not problems:
        return None
    return "; ".join(problems) + ": Pulse quotes each value itself; write the placeholder bare, outside quotes"
