"""Scores of the line reader on the labelled corpus (tests/data/corpus), per split.

Each record is read as the follower reads it: a fresh LineReader is fed the record's `context` (the
lines before it in the same source, in order) and then the line, and the kind and metrics it gives
for the line are scored. `python -m tests.corpus_eval` prints both splits' figures (README quotes
them); tests/test_classify_corpus.py gates on the test split.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from console.model import PROBLEM_KINDS, LineInfo
from console.observe.lines import LineReader
from tests.corpus_split import split_of

CORPUS = Path(__file__).parent / "data" / "corpus"
FILES = ("problems", "traps", "rates")
#: The metrics a rate record may name; a reader that has no field for one misses it.
RATE_METRICS = ("tokens_per_s", "samples_per_s", "it_per_s", "step", "total_steps", "loss", "lr", "grad_norm", "mfu")
#: Rates are right within 1 %; steps and totals exactly; the values a line prints (loss, lr…) as printed.
RATES = frozenset(("tokens_per_s", "samples_per_s", "it_per_s"))
EXACT = frozenset(("step", "total_steps"))
_PROBLEM_VALUES = frozenset(kind.value for kind in PROBLEM_KINDS)


def load(name: str) -> list[dict]:
    with (CORPUS / f"{name}.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def records() -> dict[str, list[dict]]:
    return {name: load(name) for name in FILES}


def read(record: dict) -> LineInfo:
    """What the reader says of the record's line, after the lines before it."""
    reader = LineReader()
    for line in record.get("context", ()):
        reader.read(line)
    return reader.read(record["line"])


def metric_misses(got: LineInfo, expected: dict) -> list[str]:
    """Each metric the record names must be read as given (rates within 1 %), and no other."""
    values = got.as_json()
    wrong = []
    for name in RATE_METRICS:
        want, have = expected.get(name), values.get(name)
        if want is None and have is None:
            continue
        if want is None or have is None:
            wrong.append(f"{name}: want {want}, got {have}")
        elif name in EXACT:
            if want != have:
                wrong.append(f"{name}: want {want}, got {have}")
        elif not math.isclose(want, have, rel_tol=0.01 if name in RATES else 1e-6, abs_tol=1e-12):
            wrong.append(f"{name}: want {want}, got {have}")
    return wrong


def f1_per_kind(pairs: list[tuple[str, str]]) -> dict[str, float]:
    true_pos, false_pos, false_neg = Counter(), Counter(), Counter()
    for expected, got in pairs:
        if expected == got:
            true_pos[expected] += 1
        else:
            false_pos[got] += 1
            false_neg[expected] += 1
    scores = {}
    for kind in sorted({expected for expected, _ in pairs}):
        denominator = 2 * true_pos[kind] + false_pos[kind] + false_neg[kind]
        scores[kind] = 2 * true_pos[kind] / denominator
    return scores


@dataclass
class Score:
    """One split's figures."""

    split: str
    lines: int = 0
    repos: set = field(default_factory=set)
    pairs: list = field(default_factory=list)
    """(expected kind, kind read, record) per record."""
    false_alarms: list = field(default_factory=list)
    """Trap and rate records read as a problem."""
    traps: int = 0
    rate_lines: int = 0
    metric_wrong: list = field(default_factory=list)
    """(record, what was wrong) per rate record read wrong."""

    @property
    def per_kind(self) -> dict[str, float]:
        return f1_per_kind([(expected, got) for expected, got, _ in self.pairs])

    @property
    def macro_f1(self) -> float:
        scores = self.per_kind
        return sum(scores.values()) / len(scores)

    @property
    def metrics_right(self) -> float:
        return 1 - len(self.metric_wrong) / self.rate_lines if self.rate_lines else 1.0

    def __repr__(self) -> str:  # totals only: a failed assertion on the test split shows no line of it
        return f"Score({self.summary()})"

    def misses(self) -> str:
        return "\n".join(
            f"  want {e:12} got {g:12} {r['line'][:150]!r} ({r['source']})" for e, g, r in self.pairs if e != g
        )

    def summary(self) -> str:
        table = ", ".join(f"{kind} {score:.3f}" for kind, score in self.per_kind.items())
        return (
            f"{self.split}: {self.lines} lines from {len(self.repos)} repositories; macro F1 {self.macro_f1:.4f} "
            f"({table}); false alarms {len(self.false_alarms)} of {self.traps} traps and rate lines; "
            f"metrics right on {self.metrics_right:.1%} of {self.rate_lines} rate lines"
        )


def score(split: str, corpus: dict[str, list[dict]] | None = None) -> Score:
    """The reader's figures on one split ("train" or "test") of the corpus."""
    corpus = corpus or records()
    result = Score(split)
    for name, rows in corpus.items():
        for record in rows:
            if split_of(record["repo"]) != split:
                continue
            got = read(record)
            expected = record.get("kind", "normal")
            result.lines += 1
            result.repos.add(record["repo"])
            result.pairs.append((expected, got.kind.value, record))
            if name != "problems":
                result.traps += 1
                if got.kind.value in _PROBLEM_VALUES and expected not in _PROBLEM_VALUES:
                    result.false_alarms.append(record)
            if "metrics" in record:
                result.rate_lines += 1
                wrong = metric_misses(got, record["metrics"])
                if wrong:
                    result.metric_wrong.append((record, wrong))
    return result


def train_misses(train: Score) -> str:
    """Every train-split line read wrong: its kind, a false alarm, or its metrics (never the test split's)."""
    wrong = "\n".join(f"  {r['line'][:150]!r}: {'; '.join(w)} ({r['source']})" for r, w in train.metric_wrong)
    return f"kinds read wrong:\n{train.misses()}\nmetrics read wrong:\n{wrong}"


if __name__ == "__main__":
    # `--train-misses` lists the train split's misses; the test split prints totals only, always
    corpus = records()
    scores = {split: score(split, corpus) for split in ("train", "test")}
    for figures in scores.values():
        print(figures.summary())
    if "--train-misses" in sys.argv[1:]:
        print(train_misses(scores["train"]))
