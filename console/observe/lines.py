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
from itertools import islice

from console.model import LineInfo, LineKind, MetricPattern
from console.user_patterns import compile_metric_pattern, search_user_pattern

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


# Highest precedence first. docs/readme-parts/corpus.md says what each kind covers and why;
# tests/test_classify_corpus.py holds them to real lines from public projects.
_KIND_RULES = (
    _KindRule(
        LineKind.OOM,
        # each alternative below holds one of these, so the gate skips nothing the regex finds;
        # plain "memory" would run the regex on every step line that reports memory use
        ("out of memory", "memoryerror", "alloc_failed", "exhausted", "memoryallocation", "out of resource",
         "oom when allocating", "defaultcpuallocator", "error_outofmemory"),
        r"cuda out of memory|outofmemoryerror|\bmemoryerror\b|cublas_status_alloc_failed"
        r"|resource_?exhausted|resource exhausted|cudaerrormemoryallocation|oom when allocating|hip_error_outofmemory"
        # Triton: a kernel that asks for more shared memory than the GPU has, raised as an exception
        # (Inductor's autotuner only logs it, as a warning, for a candidate it then skips)
        r"|outofresources: out of resource|defaultcpuallocator: (?:can't allocate|not enough) memory"
        # the kernel's OOM killer also says "out of memory": that is a kill, below; TensorFlow's
        # allocator says it when a retry may still succeed ("this is not a failure"): a warning;
        # advice and forecasts name it too ("to avoid out of memory", "the out of memory issue", "running out of")
        r"|(?<!avoid )(?<!prevent )(?<!the )(?<!running )\bout of memory\b"
        r"(?!: killed process)(?!.{0,300}?not a failure)",
        lower=True,
    ),
    _KindRule(
        LineKind.CUDA_ERROR,
        ("cuda", "status_", "xid", "illegal", "fallen off", "launch failure", ".cu:", "nvrm", "kernel image",
         "nvidia driver"),
        r"\bcuda error\b|cuda runtime error|device-side assert triggered|cudaerror\w*|illegal memory access"
        r"|illegal instruction|cublas_status_(?!success)\w+|cudnn_status_(?!success)\w+|\bxid\b|fallen off the bus"
        r"|unspecified launch failure|\.cu:\d+:.{0,200}?assertion `|no kernel image is available"
        r"|thcudacheck fail|exception raised from c10_cuda_check|\bcuda failure\b"
        # no usable GPU: a driver too old, missing or failing to start
        r"|cuda driver (?:version is insufficient|initialization failed)|no cuda gpus are available"
        r"|found no nvidia driver|nvidia driver on your system is too old"
        # the driver's kernel log: an adapter that fails to start or stops answering (atomic: only the
        # first "nvrm: " is tried, so a line full of them stays linear)
        r"|\A(?>.*?\bnvrm: ).{0,120}?(?:\bfail|cannot|not responding)",
        lower=True,
    ),
    _KindRule(
        LineKind.NCCL_TIMEOUT,
        ("nccl", "collective operation", "heartbeat", "checktimeout"),
        r"collective operation timeout|heartbeat monitor timed out|\bchecktimeout\b"
        # atomic: commit to the first "nccl", so a line full of them stays linear
        r"|\A(?>.*?nccl).*?(?:\b(?:timed out|timing out)\b|\btimeout\b(?!\s*(?:[:=]|is|set|of|to)\b)|watchdog"
        # the watchdog's last words before it ends the process
        r"|taking the entire process down)",
        lower=True,
    ),
    _KindRule(
        LineKind.NAN,
        ("nan", "inf", "non-finite", "loss scale"),
        # a loss or a norm whose value is not finite, or a message saying one was seen
        rf"(?:loss|norm)\w*['\"]?\s*(?:[:=]\s*|\s+)['\"]?(?:tensor\()?{_NONFINITE}|tensor\({_NONFINITE}"
        r"|returned nan values|non-finite|number of nan iterations:\s*[1-9]"
        r"|(?:is|detected|found|encountered|got|contains?|produced|became)\s+(?:an?\s+)?(?:nan|inf(?:inite)?)\b"
        r"|(?<![\w])(?<!no )(?:nan|inf)\s+(?:detected|found|encountered|loss|values?|gradients?)\b"
        # fp16 loss scaling gave up: every step overflowed down to the smallest scale (fatal, unlike one skip)
        r"|minimum loss scale reached|loss scale already at minimum",
        lower=True,
        word=r"(?:nan|inf)(?![a-z_])|non-finite|loss scale",
    ),
    _KindRule(
        LineKind.KILLED,
        ("kill", "exitcode", "exit code", "return code", "signal", "segmentation fault", "bus error", "core dumped",
         "aborted", "oom_reaper", "sh: ", "已杀死", "cancelled at"),
        r"\bKilled\b|\b(?:was|been|got|be) killed\b|killed by signal|\bSIGKILL\b|\bSIGSEGV\b|death signal"
        # a negative exit code is the signal that ended the process; 128+N is the shell's way to say it
        r"|(?i:exitcode|exit code|return code)\s*[:=]?\s*(?:-\d+|13[479])\b|oom[-_ ]kill|oom_reaper|\bSignal 9\b"
        r"|\bKilling (?:subprocess|process)\b|\bkilled due to\b|OOMKilled"
        r"|[Ss]egmentation fault|\b[Bb]us error\b|\(core dumped\)"
        # the shell's report of a job that a signal ended ("已杀死" is "Killed" in a zh_CN locale)
        r"|^Aborted\b|^(?:zsh|bash|sh): (?:killed|terminated)\b|已杀死"
        # Slurm ending a job or step (time limit, preemption, scancel)
        r"|\*\*\* (?:JOB|STEP) [\d.]+ (?:ON \S+ )?CANCELLED AT\b",
        lower=False,
    ),
    _KindRule(
        LineKind.TRACEBACK,
        ("traceback", "exception", "error", "interrupt", "terminate called", "failed", "fatal python"),
        r"Traceback \(most recent call last\)|Exception in thread\b|\bterminate called (?:after|without)\b"
        r"|Fatal Python error|^During handling of the above exception|^The above exception was the direct cause"
        # an exception's last line: `ValueError: ...`, `[rank0]: torch.OutOfMemoryError: ...`, after a syslog
        # time, or TF1's `ResourceExhaustedError (see above for traceback): ...`
        r"|^[\s>]*(?:[A-Z][a-z]{2} +\d+ [\d:]+ +)?(?:\[(?:default|rank)\d+\]:\s*)?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"
        r"(?:Error|Exception|Interrupt|Failed)(?: \(see above for traceback\))?(?::|$)",
        lower=False,
    ),
    _KindRule(
        LineKind.WARNING,
        ("warn", "[w", "w0", "w1", "overflow", ": w "),  # w0, w1: glog's `W1023 10:15:43.123 ...`
        # TensorFlow's C++ log writes `<time>: W path.cc:12] ...`
        r"Warning\b|\bwarning:|WARN(?:ING)?\b|\[W[\d ]|^W[01]\d{3} \d\d:\d\d:\d\d|\d: W [\w/.-]+:\d+\]"
        # fp16 loss scaling skipped a step and halved the scale: routine early in training
        r"|OVERFLOW!|[Gg]radient overflow",
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
# A value written after a key, e.g. the `: 14,200` of `tps: 14,200`, the `)=491.55` of
# `tgs (tokens/gpu/second)=491.55`, the `": "8.996"` of a JSON dict.
_VALUE_AFTER = re.compile(rf"['\")]?\s*(?:[:=]\s*|\s+)['\"]?{_VALUE}")
_KEY_FOLLOWS = re.compile(r"['\")]?\s*[:=]")
# What may follow a unit whose value comes before it (`14.2k tok/s |`), not a key's (`tok/s: 14,200`).
_UNIT_ENDS = frozenset(("", " ", "|", ",", ")", "]", ";"))

# Rates: (gate, unit regex) where a number comes before the unit or a value after it.
# Per-device rates (`Tokens/s/device:`, `tokens/gpu/sec`, `tokens_per_second_per_gpu:`) are
# the rate the log gives: the operator's baseline is then per device too.
_TOKEN_UNITS = (
    ("tok", re.compile(r"tok(?:en)?s?\s*/\s*(?:(?:gpu|device)\s*/\s*)?s(?:ec(?:ond)?)?\b(?:\s*/\s*(?:gpu|device)\b)?")),
    ("tok", re.compile(r"tokens_per_sec(?:ond)?(?:_per_(?:gpu|device))?\b|tokens per second\b")),
    ("tps", re.compile(r"\btps\b")),
    ("wps", re.compile(r"\bwps\b")),  # fairseq: words (tokens) per second
)
_SAMPLE_UNITS = (
    ("currsamplespersec", re.compile(r"currsamplespersec")),  # DeepSpeed: the current rate, not the average
    ("samplespersec", re.compile(r"samplespersec")),
    ("sample", re.compile(r"samples?\s*/\s*s(?:ec(?:ond)?)?\b(?!\s*/)")),
    ("sample", re.compile(r"samples_per_sec(?:ond)?\b|samples per second\b")),
    ("example", re.compile(r"examples/s\b")),  # HF datasets' progress bars
    ("record", re.compile(r"records?/s(?:ec(?:ond)?)?\b")),
)
# Serving engines print the prompt (prefill) rate beside the generation rate: generation is
# the one that measures the run's work (tokens produced); a prefill-only line gives no rate.
_GENERATION_RATE = re.compile(rf"gen(?:eration)? throughput(?: \(tokens?/s\))?:\s*(?P<v>{_NUMBER})")
_PREFILL_ONLY = ("prompt throughput", "input throughput")
# Seconds per batch, then samples a second: timm `Time: 0.316s,  405.65/s`, open_clip `Batch (t): 1.762s, 37194/s`.
_BATCH_TIME_RATE = re.compile(rf"(?:batch \(t\)|\btime): (?P<t>{_NUMBER})s,?\s+(?P<v>{_NUMBER})/s\b")
_ITERATIONS = re.compile(r"it/s\b")
_SECONDS_PER_ITERATION = re.compile(r"s/it\b")
_SECONDS_PER_EXAMPLE = re.compile(rf"(?P<v>{_NUMBER})s/ examples")
_STEPS_PER_SECOND = re.compile(rf"(?:steps_per_second|global_step/sec|\bups)['\"]?\s*[:=\s]\s*['\"]?(?P<v>{_NUMBER})")
# Time per iteration, in the units the framework prints.
_ITERATION_TIME = (
    (re.compile(rf"elapsed time per iteration \(ms\):\s*(?P<v>{_NUMBER})"), 1e-3),  # Megatron
    (re.compile(rf"elapsed time per iteration \(s\):\s*(?P<v>{_NUMBER})"), 1.0),
    (re.compile(rf"iter time \(s\):\s*(?P<v>{_NUMBER})"), 1.0),  # DeepSpeed pipeline
    (re.compile(rf"^iter \d+: loss .*?, time (?P<v>{_NUMBER})ms"), 1e-3),  # nanoGPT
    (re.compile(rf"train_step_timing in s:\s*(?P<v>{_NUMBER})"), 1.0),  # NeMo
    (re.compile(rf"\biter_time: (?P<v>{_NUMBER})s"), 1.0),  # YOLOX
    (re.compile(rf"per-step time (?P<v>{_NUMBER})s"), 1.0),  # TF object detection
    (re.compile(rf"\bdt: (?P<v>{_NUMBER})ms"), 1e-3),  # nanochat
    (re.compile(rf"^completed step: \d+, seconds: (?P<v>{_NUMBER})"), 1.0),  # MaxText
    (re.compile(rf"\beta: .*?\btime: (?P<v>{_NUMBER})"), 1.0),  # mmcv/mmengine, DINO's MetricLogger
)
# Seconds per step before `/step`: Keras `454ms/step`, TF-slim `(17.053 sec/step)`, `2.900 sec/step`.
_TIME_PER_STEP = re.compile(rf"(?P<v>{_NUMBER}) ?(?P<u>us|ms|s|sec)/step\b")
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_LOSS = re.compile(
    rf"loss(?:/train/total)?['\"]?\s*(?:[:=]\s*|\s+(?:is\s+)?)['\"]?(?:tensor\()?(?P<v>{_NUMBER}|{_NONFINITE})"
)
_LOSS_PREFIXES = ("lm_", "train_", "train/", "avg_", "total_")
# What makes `loss` part of another key unless a prefix above allows it (`eval_loss`, `val.loss`).
_NOT_BEFORE_LOSS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_./")
# The value after a key found by `str.find` (a literal scan, far cheaper than a regex search
# for a key without a literal prefix): `lr: 3e-4`, `'learning_rate': '4.9e-05'`, `lr=[5e-05]`.
_KEYED_VALUE = re.compile(rf"['\"]?\s*(?:[:=]\s*|\s+)['\"]?\[?(?P<v>{_NUMBER})")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# The step: `step 7`, `step: 4`, `global_step=12`, `iter 1631:`, `iteration 122/ 250000`, `Step 00004/21400`.
_STEP = re.compile(
    r"(?<!\w)(?:global_step|step|iter(?:ation)?|steps(?=['\"]?\s*:))['\"]?\s*(?:[:=]\s*|\s+)?"
    r"(?P<s>\d{1,3}(?:,\d{3})+|\d+)(?![\d.])(?:\s*/\s*(?P<t>\d{1,3}(?:,\d{3})+|\d+)\b)?"
)
# mmcv/mmengine, DINO, timm: `Epoch [1][1200/7517]`, `Epoch(train) [1][10/90]`, `Iter(train) [1520/2046]`,
# `Epoch: [0/100]  [2240/2502]`, `Train: 0 [  50/10009 (  0%)]`: the step within the epoch (or run) and its total.
_BRACKET_STEP = re.compile(
    r"(?:epoch|iter|train: \d+)(?:\(train\))?:?\s*(?:\[\s*\d+(?:/\d+)?\]\s*)?\[\s*(?P<s>\d+)/(?P<t>\d+)(?:\]| \()"
)
# JAX/flax examples write metrics through clu: `logging_writer.py:35] [1000] steps_per_second=…`.
_CLU_STEP = re.compile(r"logging_writer\.py:\d+\] \[(?P<s>\d+)\]")
_FAIRSEQ_UPDATES = re.compile(r"num_updates['\"]?\s*[:=\s]\s*['\"]?(?P<s>\d+)")
# A bar's `16/782 [` (tqdm, Keras), or Keras's `1079/1079 - 21s` at the start of a line.
_PROGRESS_BAR = re.compile(r"(?<![\d.])(?P<s>\d+)/(?P<t>\d+)\s*(?:\[|━)|^\s*(?P<ks>\d+)/(?P<kt>\d+) - \d")

# Candidates looked at per metric: real lines state a metric once; a line built of
# repeated units must not cost more than a few lookups.
_MAX_TRIES = 8

_INT_METRICS = frozenset({"step", "total_steps"})

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
    if "tok" in low or "tps" in low or "wps" in low or "throughput" in low:
        tokens = _tokens_per_s(low)
        if tokens is not None:
            found["tokens_per_s"] = tokens
    if "sample" in low or "example" in low or "record" in low:
        samples = _samples_per_s(low)
        if samples is not None:
            found["samples_per_s"] = samples
    if "/s" in low and ("batch (t)" in low or "time:" in low):
        match = _BATCH_TIME_RATE.search(low)
        if match:
            found["samples_per_s"] = _number(match["v"])
            seconds = _number(match["t"])
            if seconds > 0:
                found["it_per_s"] = 1.0 / seconds
    if "it_per_s" not in found and (
        "/" in low or "tim" in low or "steps_per_second" in low or "ups" in low or "dt:" in low or "seconds:" in low
    ):
        iterations = _iterations_per_s(low)
        if iterations is not None:
            found["it_per_s"] = iterations
    if "loss" in low:
        loss = _loss(low)
        if loss is not None:
            found["loss"] = loss
    if "lr" in low:
        # `lr`, `train_lr`; not `base_lr` (the schedule's peak); `lrm` fails on what follows
        lr = _keyed(low, "lr", ("train_",))
        if lr is not None:
            found["lr"] = lr
    if "learning" in low and "lr" not in found:
        lr = _keyed(low, "learning_rate", ("train_",)) or _keyed(low, "learning rate")
        if lr is not None:
            found["lr"] = lr
    if "norm" in low:
        grad_norm = _keyed(low, "norm", ("grad_", "grad ", "grad-", "g"), alone=False)
        if grad_norm is not None:
            found["grad_norm"] = grad_norm
    if "mfu" in low:
        mfu = _keyed(low, "mfu", ("/",))
        if mfu is not None and mfu >= 0:  # nanoGPT prints -100% before it has measured
            found["mfu"] = mfu
    step = _step(text, low)
    if step is not None:
        found["step"] = int(step[0].replace(",", ""))
        if step[1]:
            found["total_steps"] = int(step[1].replace(",", ""))
    total = sum(found.values())
    if total - total != 0:  # inf: `1e999 tok/s`, a number too large to be a reading
        found = {name: value for name, value in found.items() if math.isfinite(value)}
    return found or None


def _step(text: str, low: str) -> tuple[str, str | None] | None:
    """The step and its total (or None) the line states, from the most specific form it has."""
    if "[" in low and ("epoch" in low or "iter" in low or "train:" in low):
        match = _BRACKET_STEP.search(low)
        if match:
            return match["s"], match["t"]
    if "num_updates" in low:
        match = _FAIRSEQ_UPDATES.search(low)
        if match:
            return match["s"], None
    if "logging_writer" in low:
        match = _CLU_STEP.search(low)
        if match:
            return match["s"], None
    if "step" in low or "iter" in low:
        found = _step_word(low)
        if found:
            return found
    if "/" in text:
        match = _PROGRESS_BAR.search(text)
        if match:
            return (match["s"], match["t"]) if match["s"] else (match["ks"], match["kt"])
    return None


def _tokens_per_s(low: str) -> float | None:
    if "throughput" in low:
        match = _GENERATION_RATE.search(low)
        if match:
            return _number(match["v"])
        if any(prefill in low for prefill in _PREFILL_ONLY):
            return None
    at = low.find("tok/s")
    if at > 0 and low[at + 5 : at + 6] in _UNIT_ENDS:  # the common `13.7k tok/s |`, without a regex
        plain = _plain_number_at_end(low[max(0, at - _VALUE_REACH - 1) : at], whole_line=at <= _VALUE_REACH)
        if plain is not None:
            return plain
    return _rate(_TOKEN_UNITS, low)


def _samples_per_s(low: str) -> float | None:
    if "s/ examples" in low:
        match = _SECONDS_PER_EXAMPLE.search(low)
        if match:
            value = _number(match["v"])
            return 1.0 / value if value > 0 else None
    return _rate(_SAMPLE_UNITS, low)


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
    head = low[max(0, end - _VALUE_REACH - 1) : end]
    plain = _plain_number_at_end(head, whole_line=end <= _VALUE_REACH)
    if plain is not None:
        return plain
    match = _VALUE_BEFORE_REVERSED.match(head[::-1])
    if match is None or match.end() > _VALUE_REACH:
        return None
    value = _number(match["v"][::-1])
    return value * _SUFFIX[match["x"]] if match["x"] else value


def _plain_number_at_end(head: str, *, whole_line: bool) -> float | None:
    """The common case of `_value_before` without a regex: a plain decimal (`13.7`, `14200`,
    `13.7k`) after a space (or at the line's start); None sends anything else to the full rules."""
    word = head.rstrip()
    cut = word.rfind(" ")
    if cut < 0 and not whole_line:
        return None
    token = word[cut + 1 :]
    scale = 1.0
    if token and token[-1] in _SUFFIX:
        scale = _SUFFIX[token[-1]]
        token = token[:-1]
    value = _plain_float(token)
    return None if value is None else value * scale


def _plain_float(token: str) -> float | None:
    """`token` as a number when it is a plain one (`13.7`, `14200`, `3.0e-04`), else None."""
    if token[:1].isdigit() and token.isascii() and "_" not in token:
        try:
            return float(token)
        except ValueError:
            return None
    return None


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
    if "steps_per_second" in low or "global_step/sec" in low or "ups" in low:
        match = _STEPS_PER_SECOND.search(low)
        if match:
            return _number(match["v"])
    if "/step" in low:
        match = _TIME_PER_STEP.search(low)
        if match:
            seconds = _number(match["v"]) * _TIME_UNITS[match["u"]]
            return 1.0 / seconds if seconds > 0 else None
    if "tim" in low or "dt:" in low or "seconds:" in low:  # time, timing
        for rule, seconds in _ITERATION_TIME:
            match = rule.search(low)
            if match:
                value = _number(match["v"]) * seconds
                return 1.0 / value if value > 0 else None
    return None


def _loss(low: str) -> float | None:
    """The training loss: `loss 2.31`, `'loss': 2.31`, `lm loss: 2.3E+00`, `train_loss=2.31`, not `eval_loss`."""
    at = low.find("loss")
    if at == 0 or low[at - 1] not in _NOT_BEFORE_LOSS or low.endswith(_LOSS_PREFIXES, 0, at):
        plain = _plain_value_after(low, at + 4)  # the common `loss 2.31`, without a regex
        if plain is not None:
            return plain
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


def _keyed(low: str, key: str, prefixes: tuple[str, ...] = (), *, alone: bool = True) -> float | None:
    """The value after `key` where it is a key: a word of its own (when `alone`) or right behind
    one of `prefixes`. Found by `str.find`, a literal scan far cheaper than a regex search for a
    key with no literal prefix; a plain `key value`, `key: value`, `key=value` is read without one."""
    at = low.find(key)
    for _ in range(_MAX_TRIES):
        if at < 0:
            return None
        if (alone and (at == 0 or low[at - 1] not in _WORD_CHARS)) or low.endswith(prefixes, 0, at):
            end = at + len(key)
            plain = _plain_value_after(low, end)
            if plain is not None:
                return plain
            match = _KEYED_VALUE.match(low, end)
            if match:
                return _number(match["v"])
        at = low.find(key, at + 1)
    return None


def _plain_value_after(low: str, end: int) -> float | None:
    """A plain number right after a key ending at `end` (`: 2.31`, `=3e-4`, ` 1.5`, `': '8.996'`), or None."""
    rest = low[end : end + _VALUE_REACH]
    value = rest.lstrip(" :='\"")
    if 0 < len(rest) - len(value) <= 4:
        return _plain_float(value.partition(" ")[0].rstrip(",;|)]}'\""))
    return None


def _step_word(low: str) -> tuple[str, str | None] | None:
    """`_STEP`'s first match (step, total); tried first where the line's first `step` or `iter`
    starts, which is where it matches on almost every line, and there a plain `step 5/100` is read
    without a regex."""
    step, iteration = low.find("step"), low.find("iter")
    at = step if iteration < 0 or 0 <= step < iteration else iteration
    if at >= 0:
        start = at - 7 if low.endswith("global_", 0, at) else at
        if start == 0 or low[start - 1] not in _WORD_CHARS:
            rest = low[at + 4 : at + _VALUE_REACH]
            value = rest.lstrip(" :='\"")
            if 0 < len(rest) - len(value) <= 4:
                done, _, total = value.partition(" ")[0].rstrip(",;|:)]}'\"").partition("/")
                if done.isdigit() and done.isascii() and (not total or total.isdigit() and total.isascii()):
                    return done, total or None
        match = _STEP.match(low, start)
        if match:
            return match["s"], match["t"]
    match = _STEP.search(low)
    return (match["s"], match["t"]) if match else None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_metric_value(text: str) -> float:
    """A number as logs write it: `14,200`, `14.2K`, `2.31E+00`, `nan`. Raises ValueError otherwise."""
    text = text.strip().replace(",", "")
    if text and text[-1].lower() in _SUFFIX:
        return float(text[:-1]) * _SUFFIX[text[-1].lower()]
    return float(text)


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
