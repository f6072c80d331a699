"""Metrics read from real lines of public projects' logs, one format after another.

tests/data/metric_lines.jsonl: each line as its project printed it, the repository and the issue
(or file) it was found in, and every metric a reader must take from it, and no other. The
corpus helper's tests/data/corpus/rates.jsonl, when present, is held to the issue's 95 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.model import METRIC_NAMES
from console.observe.lines import classify_line
from console.observe.textsafe import sanitize
from tests.metric_checks import metric_misses

DATA = Path(__file__).parent / "data"
RECORDS = [json.loads(line) for line in (DATA / "metric_lines.jsonl").read_text().splitlines() if line.strip()]
CORPUS_RATES = DATA / "corpus" / "rates.jsonl"


def misses(record: dict) -> list[str]:
    return metric_misses(sanitize(record["line"])[0], record["metrics"], METRIC_NAMES)


def test_the_set_is_wide_and_sourced() -> None:
    assert len(RECORDS) >= 45
    assert len({record["repo"] for record in RECORDS}) >= 25
    assert all(record["source"] and record["repo"] and record["format"] for record in RECORDS)
    named = {name for record in RECORDS for name in record["metrics"]}
    assert named == set(METRIC_NAMES)


@pytest.mark.parametrize("record", RECORDS, ids=[f"{r['format']}:{r['line'][:40]}" for r in RECORDS])
def test_metrics_of_a_real_line(record: dict) -> None:
    assert misses(record) == []


def test_serving_engines_give_the_generation_rate_not_the_prompt_rate() -> None:
    vllm = [r for r in RECORDS if r["repo"] in ("vllm-project/vllm", "noonghunna/club-3090")]
    assert vllm and all("Avg prompt throughput" in r["line"] for r in vllm)
    for record in vllm:
        generation = float(record["line"].split("Avg generation throughput: ")[1].split()[0])
        assert classify_line(record["line"]).tokens_per_s == generation
    # a prefill-only line states no generation rate, and its prompt rate is not taken for one
    prefill = next(r["line"] for r in RECORDS if "Prefill batch" in r["line"])
    assert classify_line(prefill).tokens_per_s is None


@pytest.mark.skipif(not CORPUS_RATES.exists(), reason="the corpus helper's rates.jsonl is not in this tree")
def test_corpus_rate_lines_are_read_right() -> None:
    records = [json.loads(line) for line in CORPUS_RATES.read_text().splitlines() if line.strip()]
    wrong = {record["line"][:100]: misses(record) for record in records}
    wrong = {line: miss for line, miss in wrong.items() if miss}
    assert 1 - len(wrong) / len(records) >= 0.95, wrong


def test_a_compiled_frames_id_in_torchs_log_is_no_step():
    """torch's logs write "[frame/recompile]" after their glog header: the demo's buffered run showed
    'step 0/2' from `convert_frame.py:964] [0/2] torch._dynamo hit config.recompile_limit (8)`."""
    recompile = "W1202 04:21:42.229044 19129 torch/_dynamo/convert_frame.py:964] [0/2] torch._dynamo hit config.recompile_limit (8)"
    assert (classify_line(recompile).step, classify_line(recompile).total_steps) == (None, None)
    assert classify_line("[rank0]:V1202 12:00:00.000 123 torch/_inductor/codecache.py:10] [2/3] Output code").step is None
    glog_train = classify_line("I1202 12:00:00.000 123 train.py:40] [3/300] loss 2.1")
    assert (glog_train.step, glog_train.total_steps) == (3, 300)  # a training script's own glog line keeps its step


def test_an_evaluations_rates_are_no_rate_of_the_run():
    """HF Trainer's eval dict and its `***** eval metrics *****` summary (huggingface/optimum-habana#914)
    key their rates by `eval_`: a pass over the validation set, no training step's rate. The run's own
    summary (`train_samples_per_second`) and a training step's dict are read; an eval dict's only loss is."""
    eval_dict = classify_line(
        "{'eval_loss': 0.5123, 'eval_runtime': 10.52, 'eval_samples_per_second': 95.2, "
        "'eval_steps_per_second': 3.0, 'epoch': 1.0}"
    )
    assert (eval_dict.samples_per_s, eval_dict.it_per_s, eval_dict.loss) == (None, None, 0.5123)
    assert classify_line("  eval_samples_per_second     =   3773.397").samples_per_s is None
    assert classify_line("val/tokens_per_sec: 1234 train/tokens_per_sec: 200").tokens_per_s == 200
    summary = classify_line(
        "{'train_runtime': 100.2, 'train_samples_per_second': 10.0, 'train_steps_per_second': 0.5, "
        "'train_loss': 1.2, 'epoch': 3.0}"
    )
    assert (summary.samples_per_s, summary.it_per_s, summary.loss) == (10.0, 0.5, 1.2)
    assert classify_line("  train_steps_per_second      =      9.152").it_per_s == 9.152


def test_a_samples_noun_per_second_spelled_as_a_key():
    """`samples_per_sec` is read; so are the other nouns a sample rate counts, spelled the same way."""
    assert classify_line("images_per_sec: 123.4").samples_per_s == 123.4
    assert classify_line("examples_per_second: 55.1").samples_per_s == 55.1
    assert classify_line("sequences_per_second: 12.5").samples_per_s == 12.5
    assert classify_line("num_images_per_second_seen").samples_per_s is None
