"""A line reads the same under the wrappers that launchers and log collectors put before each line
(console/observe/lines.py, `_WRAPPER`): every train-split corpus record, its context and its line
wrapped alike, gets the kind and metrics it gets bare. The wrappers are the ones real logs carry:
torchrun's `--tee` and rank prefixes, mpirun's `--tag-output` (and SageMaker's), srun's `--label`,
Lightning's rank, Ray's worker prefixes (with the colour codes a paste loses the escape of), pdsh's host
(DeepSpeed's multi-node launcher), MPICH's `-prepend-rank`, docker's and kubectl's `--timestamps`,
GitHub Actions' and Jenkins' times, journald's head, a quote in an issue's text, and a paste indented
as a whole."""

from __future__ import annotations

import pytest

from console.model import LineKind
from console.observe.lines import LineReader, classify_line
from tests.corpus_eval import FILES, read, records
from tests.corpus_split import split_of

TRAIN = [record for name in FILES for record in records()[name] if split_of(record["repo"]) == "train"]

#: (name, prefix of the n-th line): the prefix as each wrapper writes it.
WRAPPERS = {
    "torchrun --tee": lambda n: "[default0]:",
    "torchrun rank": lambda n: "[rank3]: ",
    "torchrun --tee and rank": lambda n: "[default3]:[rank3]: ",
    "mpirun --tag-output": lambda n: "[1,0]<stderr>:",
    "SageMaker's MPI": lambda n: "[1,mpirank:0,algo-1]<stderr>:",
    "Lightning's rank": lambda n: "[rank: 1] ",
    "srun --label": lambda n: "12: ",
    "Ray worker": lambda n: "(RayTrainWorker pid=1234) ",
    "Ray worker, colour lost": lambda n: "[36m(RayWorkerWrapper pid=1234, ip=10.0.0.2)[0m ",
    "vLLM worker, colour lost": lambda n: "[1;36m(VllmWorker rank=0 pid=123)[0;0m ",
    "pdsh": lambda n: "worker-1: ",
    "docker --timestamps": lambda n: f"2024-01-01T00:00:{n % 60:02d}.{n:09d}Z ",
    "GitHub Actions": lambda n: f"2024-01-01T00:{n % 60:02d}:00.1234567Z ",
    "journald": lambda n: f"Jan 01 12:00:{n % 60:02d} node-3 python[1234]: ",
    "Jenkins timestamper": lambda n: f"[2020-04-28T19:13:{n % 60:02d}.193Z] ",
    "MPICH -prepend-rank": lambda n: "[3] ",
    "a quote in an issue": lambda n: "> ",
    "a paste indented as a whole": lambda n: "    ",
    "a paste indented in a list": lambda n: "   ",
    "a paste indented, then torchrun's rank": lambda n: "    [rank3]: ",
}
#: Prefixes written right before the line, with no space: a line indented by one space loses it
#: (the `: ` of `[rank3]: ` is a separator, and the reader takes one space after any such prefix).
NO_SPACE = ("torchrun --tee", "mpirun --tag-output", "SageMaker's MPI")


def reading(info) -> tuple:
    return info.kind.value, {k: v for k, v in info.as_json().items() if k not in ("kind", "continues")}


def wrapped(record: dict, prefix) -> tuple:
    reader = LineReader()
    context = record.get("context", [])
    for n, line in enumerate(context):
        reader.read(prefix(n) + line)
    return reading(reader.read(prefix(len(context)) + record["line"]))


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapped_line_reads_as_the_bare_line(name: str) -> None:
    prefix = WRAPPERS[name]
    changed = []
    for record in TRAIN:
        lines = [*record.get("context", []), record["line"]]
        if name in NO_SPACE and any(line[:1] == " " and line[1:2] != " " for line in lines):
            continue
        bare, got = reading(read(record)), wrapped(record, prefix)
        if got != bare:
            changed.append(f"  {bare[0]} -> {got[0]}: {record['line'][:100]!r} ({record['source']})")
    assert not changed, f"{len(changed)} of {len(TRAIN)} read otherwise under {name!r}:\n" + "\n".join(changed[:20])


PASTED = {
    "trailing spaces": lambda line: line + "   ",
    "a carriage return": lambda line: line + "\r",
    "no-break spaces (a page copied from a browser)": lambda line: line.replace(" ", "\u00a0"),
}


@pytest.mark.parametrize("name", PASTED)
def test_a_line_reads_the_same_with_what_a_paste_leaves_in_it(name: str) -> None:
    pasted = PASTED[name]
    changed = []
    for record in TRAIN:
        reader = LineReader()
        for line in record.get("context", []):
            reader.read(pasted(line))
        got, bare = reading(reader.read(pasted(record["line"]))), reading(read(record))
        if got != bare:
            changed.append(f"  {bare[0]} -> {got[0]}: {record['line'][:100]!r} ({record['source']})")
    assert not changed, f"{len(changed)} of {len(TRAIN)} read otherwise:\n" + "\n".join(changed[:20])


#: A logger's header before a record's message: the rate lines a run logs through one, and the
#: problems it logs at error level (`logger.error(exc)`), read as they read bare.
HEADERS = {
    "logging": "2024-01-01 12:00:00,123 - {level} - ",
    "DeepSpeed": "[2024-01-01 12:00:00,123] [{level}] [engine.py:123:fn] ",
    "vLLM": "{level} 06-16 10:03:14 [core.py:87] ",
    "glog": "{glog}0626 23:10:17.921506 12345 file.cc:12] ",
    "loguru": "2024-01-01 12:00:00.123 | {level:<8} | module:fn:12 - ",
    "basicConfig": "{level}:root:",
    "rich": "[10/12/24 10:00:00] {level:<8} ",
    "transformers": "[{level}|trainer.py:2128] 2024-01-01 12:00:00,123 >> ",
    "torchtitan": "[titan] 2024-01-01 12:00:00,123 - root - {level} - ",
}


def headed(name: str, level: str) -> str:
    return HEADERS[name].format(level=level, glog=level[0])


@pytest.mark.parametrize("name", HEADERS)
def test_a_rate_line_logged_through_a_logger_reads_its_metrics(name: str) -> None:
    head = headed(name, "INFO")
    changed = []
    for record in TRAIN:
        if "metrics" not in record:
            continue
        reader = LineReader()
        for line in record.get("context", []):
            reader.read(head + line)
        got = reader.read(head + record["line"])
        if reading(got)[1] != reading(read(record))[1]:
            changed.append(f"  {record['line'][:100]!r} ({record['source']})")
    assert not changed, f"{len(changed)} rate lines read otherwise under {name!r}:\n" + "\n".join(changed[:20])


@pytest.mark.parametrize("name", HEADERS)
def test_a_problem_logged_at_error_level_keeps_its_kind(name: str) -> None:
    head = headed(name, "ERROR")
    changed = []
    for record in TRAIN:
        line = record["line"]
        if "kind" not in record or record.get("context") or not line.strip() or line[:1].isspace():
            continue  # a block's first line, as a logger writes one record
        bare, got = classify_line(line).kind, classify_line(head + line).kind
        if got is not bare and not (bare is LineKind.NORMAL or got is LineKind.WARNING and "metrics" in record):
            changed.append(f"  {bare.value} -> {got.value}: {line[:100]!r} ({record['source']})")
    assert not changed, f"{len(changed)} lines read otherwise under {name!r}:\n" + "\n".join(changed[:20])


def test_a_colour_code_cut_by_another_leaves_the_line_read() -> None:
    """Dropping `[0m` from `[3[0m1m` leaves `[31m`: what remains is read as the line, not dropped whole."""
    info = classify_line("a [3[0m1m x loss=1 step=2")
    assert (info.kind, info.loss, info.step) == (LineKind.NORMAL, 1.0, 2)
