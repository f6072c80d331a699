"""What one (already sanitized) log line says: its kind and the metrics it states.

Runs on every log line, so ordinary lines must cost little: a cheap pre-check
decides whether any kind rule or metric rule can apply before the real ones run.
Built in: the formats of HF Trainer, tqdm and Lightning bars, Megatron-LM,
torchtitan, nanoGPT, DeepSpeed and plain `step N | loss X | 14.2K tok/s` lines.
Extra patterns from the run's config are applied after the built-ins and win.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from itertools import islice

from console.config import MetricPattern
from console.model import LineInfo, LineKind
from console.observe.user_patterns import PatternError, compile_user_pattern, search_user_pattern

_NORMAL = LineInfo()

# Every rule below has a gate: words that any line it matches must contain (in
# lower case). A plain `in` test per gate is far cheaper than a regex search, so
# the regexes run only on the few lines that could match. Rules marked "lower"
# are matched against the lower-cased line, which keeps them case-insensitive
# without re.IGNORECASE (that flag disables the fast literal-prefix scan).

# -- kinds ---------------------------------------------------------------------

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"
_NONFINITE = r"[-+]?(?:nan|inf(?:inity)?)\b"


class _KindRule:
    __slots__ = ("kind", "gate", "regex", "lower", "word")

    def __init__(
        self, kind: LineKind, gate: tuple[str, ...], regex: str, *, lower: bool, word: str | None = None
    ) -> None:
        self.kind, self.gate, self.lower = kind, gate, lower
        self.regex = re.compile(regex)
        # A quick second gate, for gate words that hide inside common words ("inf" in "INFO").
        self.word = re.compile(word) if word else None


# Highest precedence first.
_KIND_RULES = (
    _KindRule(
        LineKind.OOM,
        # each alternative below holds one of these, so the gate skips nothing the regex finds;
        # plain "memory" would run the regex on every step line that reports memory use
        ("out of memory", "memoryerror", "alloc_failed", "exhausted", "memoryallocation"),
        r"cuda out of memory|outofmemoryerror|\bmemoryerror\b|cublas_status_alloc_failed"
        r"|resource_exhausted|cudaerrormemoryallocation|\bout of memory\b(?!: killed process)",
        lower=True,
    ),
    _KindRule(
        LineKind.CUDA_ERROR,
        ("cuda", "status_", "xid", "illegal", "fallen off", "launch failure", ".cu:"),
        r"CUDA error\b|device-side assert triggered|cudaError\w*|illegal memory access|illegal instruction"
        r"|CUBLAS_STATUS_(?!SUCCESS)\w+|CUDNN_STATUS_(?!SUCCESS)\w+|\bXid\b|fallen off the bus"
        r"|unspecified launch failure|\.cu:\d+:.{0,200}?Assertion `",
        lower=False,
    ),
    _KindRule(
        LineKind.NCCL_TIMEOUT,
        ("nccl", "collective operation", "heartbeat"),
        r"collective operation timeout|heartbeat monitor timed out"
        # atomic: commit to the first "nccl", so a line full of them stays linear
        r"|\A(?>.*?nccl).*?(?:\b(?:timed out|timing out)\b|\btimeout\b(?!\s*(?:[:=]|is|set|of|to)\b)|\bwatchdog\b)",
        lower=True,
    ),
    _KindRule(
        LineKind.NAN,
        ("nan", "inf", "non-finite"),
        # a loss or a norm whose value is not finite, or a message saying one was seen
        rf"(?:loss|norm)\w*['\"]?\s*(?:[:=]\s*|\s+)['\"]?(?:tensor\()?{_NONFINITE}"
        r"|returned nan values|non-finite|number of nan iterations:\s*[1-9]"
        r"|(?:is|detected|found|encountered|got|contains?|produced)\s+(?:an?\s+)?(?:nan|inf)\b"
        r"|(?<![\w])(?:nan|inf)\s+(?:detected|found|encountered|loss|values?|gradients?)\b",
        lower=True,
        word=r"(?:nan|inf)(?![a-z_])|non-finite",
    ),
    _KindRule(
        LineKind.KILLED,
        ("kill", "exitcode", "return code", "signal"),
        r"\bKilled\b|\b(?:was|been|got|be) killed\b|killed by signal|\bSIGKILL\b"
        r"|(?:exitcode|return code)\s*[:=]?\s*-9\b|oom[-_ ]kill|\bSignal 9\b|death signal"
        r"|\bKilling (?:subprocess|process)\b|OOMKilled",
        lower=False,
    ),
    _KindRule(
        LineKind.TRACEBACK,
        ("traceback", "exception", "error", "interrupt"),
        r"Traceback \(most recent call last\)|Exception in thread\b"
        r"|^(?:\[(?:default|rank)\d+\]:\s*)?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)(?::|$)",
        lower=False,
    ),
    _KindRule(
        LineKind.WARNING,
        ("warn", "[w", "w0", "w1"),  # w0, w1: glog's `W1023 10:15:43.123 ...`
        r"Warning\b|\bwarning:|WARN(?:ING)?\b|\[W[\d ]|^W[01]\d{3} \d\d:\d\d:\d\d",
        lower=False,
    ),
)
_KIND_RANK = {rule.kind: rank for rank, rule in enumerate(_KIND_RULES)}
# Every rule's gate words, for one early exit on the common line that no rule can match.
# "inf" has its own test: it is mostly the start of "INFO", which most logging lines hold.
_GATE_WORDS = tuple(dict.fromkeys(word for rule in _KIND_RULES for word in rule.gate if word != "inf"))

# -- metrics -------------------------------------------------------------------

_VALUE = rf"(?P<v>{_NUMBER})\s?(?P<x>[kmg](?![a-z]))?"
_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9}
# A number written right before a unit, e.g. the `14.2k ` of `14.2k tok/s`: `_NUMBER`,
# then an optional suffix, then spaces, matched on the text before the unit read
# backwards. One anchored match from the unit replaces a search tried at each of
# the ~40 start positions before it; `re` has no cheap way to search forward for
# "a number that ends right here" (a forward search costs per position scanned).
_VALUE_BEFORE_REVERSED = re.compile(
    r"\s*(?:(?P<x>[kmg])\s?)?"
    r"(?P<v>(?:\d+[-+]?e)?(?:\d+\.)?(?:(?:\d{3},)+\d{1,3}|\d+)[-+]?|\d+\.[-+]?)"
    r"(?![\w.,])"
)
# How far before a unit its value may start.
_VALUE_REACH = 40
# A value written after a key, e.g. the `: 14,200` of `tps: 14,200`.
_VALUE_AFTER = re.compile(rf"['\"]?\s*(?:[:=]\s*|\s+)['\"]?{_VALUE}")
_KEY_FOLLOWS = re.compile(r"['\"]?\s*[:=]")

# Rates: (gate, unit regex) where a number comes before the unit or a value after it.
_TOKEN_UNITS = (
    ("tok", re.compile(r"tok(?:en)?s?\s*/\s*s(?:ec(?:ond)?)?\b(?!\s*/)")),
    ("tok", re.compile(r"tokens_per_sec(?:ond)?\b|tokens per second\b")),
    ("tps", re.compile(r"\btps\b")),
)
_SAMPLE_UNITS = (
    ("currsamplespersec", re.compile(r"currsamplespersec")),  # DeepSpeed: the current rate, not the average
    ("sample", re.compile(r"samples?\s*/\s*s(?:ec(?:ond)?)?\b(?!\s*/)")),
    ("sample", re.compile(r"samples_per_sec(?:ond)?\b|samples per second\b")),
)
_ITERATIONS = re.compile(r"it/s\b")
_SECONDS_PER_ITERATION = re.compile(r"s/it\b")
_STEPS_PER_SECOND = re.compile(rf"steps_per_second['\"]?\s*[:=]\s*(?P<v>{_NUMBER})")
# Time per iteration, in the units the framework prints.
_ITERATION_TIME = (
    (re.compile(rf"elapsed time per iteration \(ms\):\s*(?P<v>{_NUMBER})"), 1e-3),  # Megatron
    (re.compile(rf"elapsed time per iteration \(s\):\s*(?P<v>{_NUMBER})"), 1.0),
    (re.compile(rf"iter time \(s\):\s*(?P<v>{_NUMBER})"), 1.0),  # DeepSpeed pipeline
    (re.compile(rf"^iter \d+: loss .*?, time (?P<v>{_NUMBER})ms"), 1e-3),  # nanoGPT
)
_LOSS = re.compile(rf"loss['\"]?\s*(?:[:=]\s*|\s+)['\"]?(?:tensor\()?(?P<v>{_NUMBER}|{_NONFINITE})")
_LOSS_PREFIXES = ("lm_", "train_", "train/", "avg_")
_STEP = re.compile(
    r"(?<!\w)(?:global_step|step|iter(?:ation)?|steps(?=['\"]?\s*:))['\"]?\s*(?:[:=]\s*|\s+)?"
    r"(?P<s>\d{1,3}(?:,\d{3})+|\d+)(?![\d.])(?:\s*/\s*(?P<t>\d{1,3}(?:,\d{3})+|\d+)\b)?"
)
_PROGRESS_BAR = re.compile(r"(?<![\d.])(?P<s>\d+)/(?P<t>\d+)\s*\[")

# Candidates looked at per metric: real lines state a metric once; a line built of
# repeated units must not cost more than a few lookups.
_MAX_TRIES = 8

_INT_METRICS = frozenset({"step", "total_steps"})
METRIC_NAMES = ("tokens_per_s", "samples_per_s", "it_per_s", "loss", "step", "total_steps")


def classify_line(text: str, patterns: Sequence[MetricPattern] = ()) -> LineInfo:
    """The kind of one sanitized log line and the metrics it states.

    Non-finite values (a NaN loss) are not returned as metrics: the line's kind
    (`nan`) says it, and the series stay comparable.
    """
    low = text.lower()
    kind = _kind(text, low)
    metrics = _metrics(text, low)
    if patterns:
        metrics, nonfinite = _apply_patterns(text, patterns, metrics)
        if nonfinite and _KIND_RANK.get(kind, len(_KIND_RANK)) > _KIND_RANK[LineKind.NAN]:
            kind = LineKind.NAN
    if metrics is None:
        return _NORMAL if kind is LineKind.NORMAL else LineInfo(kind)
    return LineInfo(kind, **metrics)


def _kind(text: str, low: str) -> LineKind:
    if not _may_have_kind(low):
        return LineKind.NORMAL
    for rule in _KIND_RULES:
        for word in rule.gate:
            if word in low:
                if (rule.word is None or rule.word.search(low)) and rule.regex.search(low if rule.lower else text):
                    return rule.kind
                break
    return LineKind.NORMAL


def _may_have_kind(low: str) -> bool:
    """Whether any kind rule's gate opens on `low` (False for almost every line of a healthy run)."""
    for word in _GATE_WORDS:
        if word in low:
            return True
    return low.count("inf") > low.count("info")


def _metrics(text: str, low: str) -> dict | None:
    found: dict = {}
    if "tok" in low or "tps" in low:
        tokens = _rate(_TOKEN_UNITS, low)
        if tokens is not None:
            found["tokens_per_s"] = tokens
    if "sample" in low:
        samples = _rate(_SAMPLE_UNITS, low)
        if samples is not None:
            found["samples_per_s"] = samples
    if "/" in low or "time" in low or "steps_per_second" in low:
        iterations = _iterations_per_s(low)
        if iterations is not None:
            found["it_per_s"] = iterations
    if "loss" in low:
        loss = _loss(low)
        if loss is not None:
            found["loss"] = loss
    match = None
    if "step" in low or "iter" in low:
        match = _STEP.search(low)
    if match is None and "|" in text and "[" in text:
        match = _PROGRESS_BAR.search(text)
    if match:
        found["step"] = int(match["s"].replace(",", ""))
        if match["t"]:
            found["total_steps"] = int(match["t"].replace(",", ""))
    return found or None


def _rate(units: Sequence[tuple[str, re.Pattern]], low: str) -> float | None:
    """The first rate stated with one of `units`: `14.2k tok/s`, `tokens/s: 14,200`, `tps: 14,200`."""
    for gate, unit in units:
        if gate not in low:
            continue
        end = 0
        for _ in range(_MAX_TRIES):  # a search per candidate: cheaper than a finditer for the usual one
            match = unit.search(low, end)
            if match is None:
                break
            start, end = match.span()
            value = None
            if not _KEY_FOLLOWS.match(low, end):
                value = _value_before(low, start)
            if value is None:
                value = _scaled(_VALUE_AFTER.match(low, end))
            if value is not None:
                return value
    return None


def _value_before(low: str, end: int) -> float | None:
    """The value written right before `end` (a unit's start): `14.2k ` → 14200.0; None if there is none."""
    # one character past the reach, so the match sees what precedes a number that starts at the reach
    match = _VALUE_BEFORE_REVERSED.match(low[max(0, end - _VALUE_REACH - 1) : end][::-1])
    if match is None or match.end() > _VALUE_REACH:
        return None
    value = _number(match["v"][::-1])
    return value * _SUFFIX[match["x"]] if match["x"] else value


def _scaled(match: re.Match | None) -> float | None:
    if match is None:
        return None
    value = _number(match["v"])
    return value * _SUFFIX[match["x"]] if match["x"] else value


def _iterations_per_s(low: str) -> float | None:
    if "it/s" in low:
        for match in islice(_ITERATIONS.finditer(low), _MAX_TRIES):
            value = _value_before(low, match.start())
            if value is not None:
                return value
    if "s/it" in low:
        for match in islice(_SECONDS_PER_ITERATION.finditer(low), _MAX_TRIES):
            value = _value_before(low, match.start())
            if value:
                return 1.0 / value
    if "steps_per_second" in low:
        match = _STEPS_PER_SECOND.search(low)
        if match:
            return _number(match["v"])
    if "time" in low:
        for rule, seconds in _ITERATION_TIME:
            match = rule.search(low)
            if match:
                value = _number(match["v"]) * seconds
                return 1.0 / value if value > 0 else None
    return None


def _loss(low: str) -> float | None:
    """The training loss: `loss 2.31`, `'loss': 2.31`, `lm loss: 2.3E+00`, `train_loss=2.31`, not `eval_loss`."""
    end = 0
    for _ in range(_MAX_TRIES):
        match = _LOSS.search(low, end)
        if match is None:
            break
        start, end = match.span()
        before = low[start - 1] if start else " "
        if (before.isalnum() or before in "_./") and not low.endswith(_LOSS_PREFIXES, 0, start):
            continue
        value = _number(match["v"])
        return value if math.isfinite(value) else None
    return None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_metric_value(text: str) -> float:
    """A number as logs write it: `14,200`, `14.2K`, `2.31E+00`, `nan`. Raises ValueError otherwise."""
    text = text.strip().replace(",", "")
    if text and text[-1].lower() in _SUFFIX:
        return float(text[:-1]) * _SUFFIX[text[-1].lower()]
    return float(text)


@lru_cache(maxsize=256)
def compile_metric_pattern(regex: str, name: str):
    """The compiled regex of a config pattern (run with a time budget); raises ValueError saying what is wrong."""
    if name not in METRIC_NAMES:
        raise ValueError(f"metric pattern for {name!r}: the metric must be one of {', '.join(METRIC_NAMES)}")
    try:
        compiled = compile_user_pattern(regex)
    except PatternError as exc:
        raise ValueError(f"metric pattern {regex!r}: {exc}") from None
    if "value" not in compiled.groupindex and name not in compiled.groupindex:
        raise ValueError(f"metric pattern {regex!r} needs a named group (?P<value>...) or (?P<{name}>...)")
    return compiled


def _apply_patterns(
    text: str, patterns: Sequence[MetricPattern], metrics: dict | None
) -> tuple[dict | None, bool]:
    nonfinite = False
    for pattern in patterns:
        try:
            rule = compile_metric_pattern(pattern.regex, pattern.name)
        except ValueError:
            continue  # the config loader reports bad patterns; a line must never fail on one
        match = search_user_pattern(rule, f"[metrics] patterns.{pattern.name}", text)
        if not match:
            continue
        raw = match.groupdict().get("value") or match.groupdict().get(pattern.name)
        if raw is None:
            continue
        try:
            value = parse_metric_value(raw)
        except ValueError:
            continue
        if not math.isfinite(value):
            nonfinite = True
            continue
        metrics = dict(metrics or {})
        metrics[pattern.name] = int(value) if pattern.name in _INT_METRICS else value
    return metrics, nonfinite
