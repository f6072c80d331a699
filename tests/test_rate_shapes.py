"""A rate line reads the same in the neighbouring shapes that real logs print it in
(console/observe/lines.py): every train-split rate record whose metrics are read right keeps them
when its line ends in a carriage return or trailing spaces (a CRLF log, a paste), when its numbers and
units are padded apart (`17.053  sec/step`, `step time: 100.87  ms`: printf's field widths), and when
its keys and values are spaced or glued differently (`loss:2.31`, `loss:  2.31`), and under a paste's
artifacts (a nested tqdm bar's `[A`, a colour code that lost its escape, no-break spaces). Issue 36: "Rates in
other units" and "Steps and totals in common formats" miss in neighbouring shapes of the formats the
rules were written for."""

from __future__ import annotations

import re

import pytest

from console.observe.lines import LineReader
from tests.corpus_eval import load, metric_misses, read
from tests.corpus_split import split_of

TRAIN_RATES = [record for record in load("rates") if split_of(record["repo"]) == "train"]
READ_RIGHT = [record for record in TRAIN_RATES if not metric_misses(read(record), record["metrics"])]

#: name: how a shape rewrites a line (each keeps what the line states).
SHAPES = {
    "a carriage return": lambda line: line + "\r",
    "trailing spaces": lambda line: line + "   ",
    "a number padded from its unit": lambda line: re.sub(r"(?<=\d) (?=[A-Za-z/%])", "  ", line),
    "a key glued to its value": lambda line: re.sub(r"(?<=[A-Za-z_\)]): (?=[-\d.])", ":", line),
    "a key padded from its value": lambda line: re.sub(r"(?<=[A-Za-z_\)]): (?=[-\d.])", ":  ", line),
    "upper and lower case": lambda line: line.lower(),
    "fields split by ` | `": lambda line: re.sub(r", (?=[A-Za-z])", " | ", line),
    "the second spelled out": lambda line: re.sub(r"(?<=\d) ?(?:s|sec)/(step|batch|iter)\b", r" seconds/\1", line),
    "a tab after a key": lambda line: re.sub(r"(?<=[A-Za-z_\)]): (?=[-\d.])", ":\t", line),
    "a nested bar's cursor-up a paste kept": lambda line: line + "[A",
    "a colour code a paste lost the escape of": lambda line: re.sub(
        r"(?<=[=: ])(\d+\.\d+)(?=[ ,|]|$)", r"[36m\1[0m", line, count=1
    ),
    "no-break spaces (a page copied from a browser)": lambda line: line.replace(" ", "\u00a0"),
}


def test_most_train_rate_lines_are_read_right() -> None:
    assert len(READ_RIGHT) >= 0.99 * len(TRAIN_RATES)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_rate_line_reads_the_same_in_a_neighbouring_shape(shape: str) -> None:
    rewrite = SHAPES[shape]
    wrong = []
    for record in READ_RIGHT:
        line = rewrite(record["line"])
        if line == record["line"]:
            continue
        reader = LineReader()
        for before in record.get("context", ()):
            reader.read(before)
        misses = metric_misses(reader.read(line), record["metrics"])
        if misses:
            wrong.append((line, misses))
    assert not wrong, wrong[:3]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # tqdm's `unit=`: a bar's own rate in what it counts (milesial/Pytorch-UNet's `unit='img'`)
        ("Epoch 14/50:  30%|███       | 84/277 [00:18<00:08, 23.33img/s, loss (batch)=0.00319]",
         {"samples_per_s": 23.33, "step": 84, "total_steps": 277, "loss": 0.00319}),
        ("100%|██████████| 17/17 [00:17<00:00,  3.02step/s]", {"it_per_s": 3.02, "step": 17, "total_steps": 17}),
        ("100%|██████████| 17/17 [00:17<00:00,  1.50s/img]",
         {"samples_per_s": 1 / 1.5, "step": 17, "total_steps": 17}),
        ("12step [00:03,  3.5step/s]", {"it_per_s": 3.5}),
        # the count after the bar: Lightning's RichProgressBar (its epoch's pair before the bar is no
        # step; an iterable of unknown length is `5072/--`), YOLOv5's `| {n_fmt}/{total_fmt} {elapsed}`
        ("Epoch 6/9  ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 910/910 0:05:58 • 0:00:00 2.56it/s v_num: mcyz train/loss: 1.545",
         {"step": 910, "total_steps": 910, "it_per_s": 2.56, "loss": 1.545}),
        ("Epoch 0/-2 ━━━━━━━━━━━━━━━━━━━━━━ 5072/-- 2:40:43 • -:--:-- 0.57it/s v_num: xn3p train_loss: 10.416",
         {"step": 5072, "it_per_s": 0.57, "loss": 10.416}),
        ("        0/1      22.4G    0.07281    0.08384    0.06359        199        640: 100%|██████████| 1849/1849 13:15",
         {"step": 1849, "total_steps": 1849}),
        # Keras where it does not know an epoch's length (tf.data): the count without a total
        ("  13440/Unknown - 2s - loss: 0.8068 - acc: 0.7432", {"step": 13440, "loss": 0.8068}),
        ("     12/Unknown 3s 25ms/step - loss: 0.3", {"step": 12, "it_per_s": 40, "loss": 0.3}),
        # Keras 3's pair before its bar is the step
        (" 1/10 ━━━━━━━━━━━━━━━━━━━━ 0s 5ms/step - loss: 0.5", {"step": 1, "total_steps": 10, "it_per_s": 200, "loss": 0.5}),
        # the second spelled out, per step and per sample (`({:.2f} seconds/step)` in a user's loop)
        ("Step 100: \t loss = 0.2345 \t acc = 0.9000 \t (0.45 seconds/step)",
         {"step": 100, "loss": 0.2345, "it_per_s": 1 / 0.45}),
        ("step 100 | 0.3 sec/sample | loss 2.1", {"step": 100, "loss": 2.1, "samples_per_s": 1 / 0.3}),
        ("step 100 | 0.3 s/iteration | loss 2.1", {"step": 100, "loss": 2.1, "it_per_s": 1 / 0.3}),
        # a bar of epochs or of bytes is no rate of the run's steps; its count is still read as a bar's
        # (a reader cannot tell a download's bar from the run's by its shape: the run's next bar replaces it)
        ("Training: 100%|██████████| 2/2 [07:43<00:00, 231.64s/epoch]", {"step": 2, "total_steps": 2}),
        ("model.safetensors: 100%|██████████| 17/17 [00:17<00:00,  3.02MB/s]", {"step": 17, "total_steps": 17}),
    ],
)
def test_a_bar_reads_its_own_rate_in_the_unit_it_counts(line: str, expected: dict) -> None:
    assert not metric_misses(LineReader().read(line), expected)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # a sample's noun over a second however it is spelled: mlx-examples' `{:.2f} im/s` (its CVAE
        # example, ml-explore/mlx-examples#656), the second written out
        ("Epoch    1 | Loss   15650.48 | Throughput  6034.87 im/s | Time     13.7 (s)",
         {"loss": 15650.48, "samples_per_s": 6034.87}),
        ("Epoch 3 | Train loss 2.303 | Throughput: 1234.56 images/second", {"loss": 2.303, "samples_per_s": 1234.56}),
        ("step 5 | 812.5 examples/second | loss 1.2", {"step": 5, "loss": 1.2, "samples_per_s": 812.5}),
        # Lightning's LearningRateMonitor names the rate by its optimizer (`lr-Adam`), and by a parameter
        # group where there are several (`lr-AdamW/pg1`): the first printed is read
        ("{'lr-Adam': 0.001, 'train_loss': 0.52}", {"lr": 0.001, "loss": 0.52}),
        ("Epoch 3: 100%|██████████| 20/20 [00:02<00:00,  9.12it/s, lr-AdamW/pg1=0.0003, lr-AdamW/pg2=0.003, loss=0.4]",
         {"lr": 0.0003, "loss": 0.4, "step": 20, "total_steps": 20, "it_per_s": 9.12}),
        # build-nanogpt's clipped gradient norm, a bare `norm` field beside the loss (karpathy/build-nanogpt's
        # train_gpt2.py: `step {step:4d} | loss: {…:.6f} | lr {lr:.4e} | norm: {norm:.4f} | dt: {…:.2f}ms | tok/sec: …`)
        ("step    0 | loss: 10.955029 | lr 6.0000e-05 | norm: 15.3734 | dt: 2353.59ms | tok/sec: 222760.31",
         {"step": 0, "loss": 10.955029, "lr": 6e-05, "grad_norm": 15.3734, "it_per_s": 1 / 2.35359,
          "tokens_per_s": 222760.31}),
    ],
)
def test_units_and_keys_in_their_other_spellings(line: str, expected: dict) -> None:
    assert not metric_misses(LineReader().read(line), expected)


@pytest.mark.parametrize(
    ("line", "metric"),
    [
        # a norm that is no gradient's: another word names it, or no loss is on the line (a table of weights)
        (" iteration     5427/  250000 | learning rate: 2.999E-04 | lm loss: 2.3E+00 | params norm: 123.4 |",
         "grad_norm"),
        ("self_attn.q_proj.weight      | norm: 0.000001 | mean: 0.000000 | max: 0.000002 | nonzero:  0.1%", "grad_norm"),
        # a word ending in `im` over a second is no image rate; a setting named `lr-…` without a number is no rate
        ("the claim/s of the sim/s", "samples_per_s"),
        ("lr-schedule: cosine", "lr"),
    ],
)
def test_neighbours_of_the_other_spellings_are_not_read_as_them(line: str, metric: str) -> None:
    assert getattr(LineReader().read(line), metric) is None
