"""The line reader on a labelled corpus of real log lines from public projects (tests/data/corpus).

problems.jsonl: lines that report a problem, each with the kind it must get.
traps.jsonl: lines that look like problems but are not (memory reports, "nan" in a word,
advice about OOM, NCCL settings, healthy start-up banners): each must stay normal (or a warning
where it is one).
rates.jsonl: progress lines with the metrics a reader must take from them (and no other).
Every record names the repository it came from and the public issue, pull request or file it was
copied from (`source`); `context` holds the lines before it in that source, in order, which the
reader is fed first: a traceback's frame is scored as the follower sees it, after its head.

The corpus is split by repository (tests/corpus_split.py): the gates are judged on the test split,
where no rule was written (they are not reached there: the xfail says by how much); the train split
is held to them. A test-split assertion reports totals only, so that no rule is written from its lines.
"""

from __future__ import annotations

import functools

import pytest

from console.model import PROBLEM_KINDS, LineKind
from tests.corpus_eval import FILES, Score, records, score
from tests.corpus_split import split_of

CORPUS = records()
ALL = [record for name in FILES for record in CORPUS[name]]


@functools.cache
def scored(split: str) -> Score:
    return score(split, CORPUS)


def test_corpus_is_wide_sourced_and_split_by_repository() -> None:
    assert len(ALL) >= 2000
    assert len({r["line"] for r in ALL}) >= 2000, "at least 2,000 distinct lines"
    repos = {r["repo"] for r in ALL}
    assert len(repos) >= 300
    assert len(CORPUS["traps"]) >= 0.30 * len(ALL), "at least 30 % traps"
    test_repos = {repo for repo in repos if split_of(repo) == "test"}
    assert len(test_repos) >= 0.30 * len(repos)
    kinds = {kind.value for kind in LineKind}
    seen: dict[str, set] = {}
    for record in ALL:
        owner, _, name = record["repo"].partition("/")
        assert owner and name, record
        assert record["source"].startswith(f"https://github.com/{record['repo']}/"), record
        assert record.get("kind", "normal") in kinds, record
        context = record.get("context", [])
        assert isinstance(context, list) and len(context) <= 60 and all(isinstance(c, str) for c in context)
        # a line is recorded once per context it is read in (the same frame under two tracebacks)
        key = tuple(context)
        assert key not in seen.setdefault(record["line"], set()), f"recorded twice: {record['line'][:80]!r}"
        seen[record["line"]].add(key)
    assert {r["kind"] for r in CORPUS["problems"]} == {kind.value for kind in PROBLEM_KINDS}
    assert all(r["kind"] in ("normal", "warning") for r in CORPUS["traps"])
    for split in ("train", "test"):
        assert {r["kind"] for r in CORPUS["problems"] if split_of(r["repo"]) == split} == {
            kind.value for kind in PROBLEM_KINDS
        }, f"every problem kind in the {split} split"


@pytest.mark.xfail(
    strict=True,
    reason="issue 36's gates are not reached on the test split: macro F1 0.963 (0.97 asked), 2 false alarms "
    "(0 asked), metrics right on 91.2 % of its rate lines (95 % asked); README, 'The corpus', says so",
)
def test_the_test_split_meets_the_issue_gates() -> None:
    test = scored("test")
    f1, alarms, right, summary = test.macro_f1, len(test.false_alarms), test.metrics_right, test.summary()
    assert f1 >= 0.97, summary
    assert alarms == 0, summary
    assert right >= 0.95, summary


def test_the_test_split_holds_what_was_reached() -> None:
    """The figures the test split reached when the rules were last changed: no worse, ever. (Round 5's
    test-split records lowered them from 0.953 / 1 / 91.5 %, which its rules still reach on round 4's;
    round 7's wrappers raised the macro F1 from 0.952 to 0.958; rounds 8 to 10 left all three; round 11's
    exception named inside a line's message raised it to 0.963.)"""
    test = scored("test")
    f1, alarms, right, summary = test.macro_f1, len(test.false_alarms), test.metrics_right, test.summary()
    assert f1 >= 0.963, summary
    assert alarms <= 2, summary
    assert right >= 0.911, summary


def test_the_train_split_meets_the_gates() -> None:
    train = scored("train")
    assert train.macro_f1 >= 0.97, f"{train.summary()}\nmisses:\n{train.misses()}"
    alarms = "\n".join(f"  {r['line'][:150]!r} ({r['source']})" for r in train.false_alarms)
    assert not train.false_alarms, f"false alarms:\n{alarms}"
    wrong = "\n".join(f"  {r['line'][:120]!r}: {'; '.join(w)}" for r, w in train.metric_wrong)
    assert train.metrics_right >= 0.95, f"{train.summary()}\nmisses:\n{wrong}"


def test_the_train_split_holds_what_was_reached() -> None:
    """Round 11's train split: macro F1 0.991, metrics right on 99.7 % of 398 rate lines; no worse."""
    train = scored("train")
    assert train.macro_f1 >= 0.991, f"{train.summary()}\nmisses:\n{train.misses()}"
    wrong = "\n".join(f"  {r['line'][:120]!r}: {'; '.join(w)}" for r, w in train.metric_wrong)
    assert train.metrics_right >= 0.997, f"{train.summary()}\nmisses:\n{wrong}"
