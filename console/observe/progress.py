"""Progress bars in a log: which redraw is a bar, what its fields say, and when a framework draws
its bar only on a terminal (so the log shows no progress at all).

Pure functions over already sanitized text. A bar (tqdm and what is built on it: HF Trainer,
accelerate, Lightning's TQDMProgressBar, datasets; Keras's Progbar) redraws itself after a
carriage return and writes a newline only when it closes or something else is printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from console.model import ProgressLine
from console.observe.lines import classify_line
from console.user_patterns import NO_PATTERNS, MetricPatterns

# What a bar's redraw holds and other `\r`-separated text does not: `16/782 [`, ` 2%|`,
# a rate in it/s or s/it (tqdm's default unit), `2140it [` (no total), `examples/s]`, or rich's `━`.
_REDRAW = re.compile(r"\d/\d+ ?\[|\d%\||it/s|s/it|\dit \[|/s\]|━")

# tqdm's `[{elapsed}<{remaining}, {rate}{unit}/s{postfix}]`; without a total: `[{elapsed}, {rate}...]`.
_CLOCK = r"\d+(?::\d\d){1,2}"
_TQDM_TAIL = re.compile(
    rf"\[(?P<elapsed>{_CLOCK})(?:<(?P<eta>{_CLOCK}|\?))?"
    r"(?:,\s*(?:(?P<rate>\d+(?:\.\d+)?)(?P<scale>[kMGTP])?|\?)(?P<unit>[^,\]\d][^,\]]*))?"
    r"(?P<postfix>,[^\]]*)?\]"
)
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
# Keras's Progbar: `- ETA: 3s`, `- ETA: 1:02`; its fields: `- loss: 1.2 - accuracy: 0.5`.
_KERAS_ETA = re.compile(r"\bETA: (?P<eta>\d+(?::\d\d){0,2})s?\b")
_KERAS_FIELD = re.compile(r" - (?P<k>[A-Za-z_][\w/]*): (?P<v>[-+\w.]+)")


@dataclass(frozen=True, slots=True)
class BarFields:
    """What a redraw states beyond the metrics classify_line reads."""

    rate: float | None = None
    rate_unit: str | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    postfix: tuple[tuple[str, str], ...] = ()


def is_redraw(text: str) -> bool:
    """True when `text` (one `\\r`-separated segment) looks like a progress bar's redraw."""
    return _REDRAW.search(text) is not None


def bar_fields(text: str) -> BarFields:
    """The rate with its unit as printed, elapsed time, ETA and postfix fields of a bar's redraw."""
    match = _TQDM_TAIL.search(text)
    if match is not None:
        rate = unit = None
        if match["unit"]:
            unit = match["unit"].strip()
            if match["rate"]:
                rate = float(match["rate"]) * _SCALE.get(match["scale"] or "", 1.0)
        postfix = tuple(
            (key.strip(), value.strip())
            for key, sep, value in (item.partition("=") for item in (match["postfix"] or "").split(","))
            if sep and key.strip()
        )
        eta = match["eta"]
        return BarFields(
            rate=rate,
            rate_unit=unit,
            elapsed_s=_clock_s(match["elapsed"]),
            eta_s=_clock_s(eta) if eta and eta != "?" else None,
            postfix=postfix,
        )
    if " - " in text:
        eta_match = _KERAS_ETA.search(text)
        fields = tuple((m["k"], m["v"]) for m in _KERAS_FIELD.finditer(text) if m["k"] != "ETA")
        return BarFields(eta_s=_clock_s(eta_match["eta"]) if eta_match else None, postfix=fields)
    return BarFields()


def _clock_s(text: str) -> float:
    """Seconds of a clock reading: `02:41`, `4:07:32`, or plain seconds `3`."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


# -- progress drawn only on a terminal ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TerminalOnlyProgress:
    """A framework that draws its progress only on a terminal was seen starting in the log."""

    framework: str
    advice: str
    """The setting that puts progress into the log."""


# Lightning prints its model summary with rich (┏━━┳ … ┃ Name ┃ Type ┃ Params ┃) exactly when the
# trainer uses RichProgressBar, which draws through a rich Live display: nothing on a file.
_RICH_SUMMARY = re.compile(r"┃\s*Name\s*┃\s*Type\s*┃\s*Params")
LIGHTNING_RICH = TerminalOnlyProgress(
    "Lightning RichProgressBar",
    "RichProgressBar draws only on a terminal; for progress in the log use "
    "Trainer(callbacks=[TQDMProgressBar(refresh_rate=50)]) or log_every_n_steps with a logger that prints",
)


def terminal_only_progress(text: str) -> TerminalOnlyProgress | None:
    """The framework `text` shows starting with a terminal-only progress display, or None."""
    if "┃" in text and _RICH_SUMMARY.search(text):
        return LIGHTNING_RICH
    return None


def progress_line(text: str, written: float, patterns: MetricPatterns = NO_PATTERNS) -> ProgressLine:
    """A bar's redraw `text` (sanitized), written at local monotonic time `written`, read whole."""
    fields = bar_fields(text)
    return ProgressLine(
        text,
        classify_line(text, patterns),
        written,
        rate=fields.rate,
        rate_unit=fields.rate_unit,
        elapsed_s=fields.elapsed_s,
        eta_s=fields.eta_s,
        postfix=fields.postfix,
    )
