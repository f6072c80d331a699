"""classify_line on a labelled corpus of real log lines from public projects (tests/data/corpus).

problems.jsonl: lines that report a problem, each with the kind it must get.
traps.jsonl: lines that look like problems but are not (memory reports, "nan" in a word,
advice about OOM, NCCL settings): each must stay normal (or a warning where it is one).
rates.jsonl: progress lines with the metrics a reader must take from them.
Every record names the repository it came from and where (an issue URL or a file path).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from console.model import PROBLEM_KINDS, LineKind
from console.observe.lines import classify_line
from tests.metric_checks import metric_misses

CORPUS = Path(__file__).parent / "data" / "corpus"
# The metrics a rate record may name; a reader that has no field for one misses it.
RATE_METRICS = ("tokens_per_s", "samples_per_s", "it_per_s", "step", "total_steps", "loss", "lr", "grad_norm", "mfu")


def load(name: str) -> list[dict]:
    with (CORPUS / f"{name}.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


PROBLEMS, TRAPS, RATES = load("problems"), load("traps"), load("rates")


def labelled() -> list[tuple[str, str]]:
    """(line, expected kind) for every record; a rate line is a normal line unless it says otherwise."""
    return [(r["line"], r["kind"]) for r in PROBLEMS + TRAPS] + [(r["line"], r.get("kind", "normal")) for r in RATES]


def test_corpus_is_wide_and_sourced() -> None:
    records = PROBLEMS + TRAPS + RATES
    assert len(records) >= 600
    assert len({r["repo"] for r in records}) >= 120
    assert len(TRAPS) >= 150
    assert len(RATES) >= 80
    assert len({r["line"] for r in records}) == len(records), "a line is recorded twice"
    kinds = {kind.value for kind in LineKind}
    for record in records:
        owner, _, name = record["repo"].partition("/")
        assert owner and name, record
        assert record["source"].startswith(f"https://github.com/{record['repo']}/"), record
        assert record.get("kind", "normal") in kinds, record
    assert {r["kind"] for r in PROBLEMS} == {kind.value for kind in PROBLEM_KINDS}
    assert all(r["kind"] in ("normal", "warning") for r in TRAPS)


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


def test_kinds_macro_f1() -> None:
    results = [(expected, classify_line(line).kind.value, line) for line, expected in labelled()]
    scores = f1_per_kind([(expected, got) for expected, got, _ in results])
    macro = sum(scores.values()) / len(scores)
    misses = "\n".join(f"  want {e:12} got {g:12} {line[:150]!r}" for e, g, line in results if e != g)
    table = ", ".join(f"{kind} {score:.3f}" for kind, score in scores.items())
    assert macro >= 0.97, f"macro F1 {macro:.4f} ({table}); misses:\n{misses}"


def test_traps_raise_no_false_alarm() -> None:
    problem_values = {kind.value for kind in PROBLEM_KINDS}
    alarms = [(classify_line(r["line"]).kind.value, r) for r in TRAPS + RATES]
    alarms = [f"  {kind:12} {r['line'][:150]!r} ({r['source']})" for kind, r in alarms if kind in problem_values]
    assert not alarms, "false alarms:\n" + "\n".join(alarms)


def rate_misses(record: dict) -> list[str]:
    """What a reader got wrong on one rate line: each named metric must be read, and no other."""
    return metric_misses(record["line"], record["metrics"], RATE_METRICS)


def test_rate_lines_metrics() -> None:
    per_format: dict[str, list[str]] = defaultdict(list)
    for record in RATES:
        wrong = rate_misses(record)
        if wrong:
            per_format[record["format"]].append(f"    {record['line'][:120]!r}: {'; '.join(wrong)}")
    missed = sum(len(lines) for lines in per_format.values())
    right = 1 - missed / len(RATES)
    report = "\n".join(
        f"  {fmt} ({len(misses)} missed)\n" + "\n".join(misses) for fmt, misses in sorted(per_format.items())
    )
    assert right >= 0.95, f"metrics right on {right:.1%} of {len(RATES)} rate lines; misses per format:\n{report}"

