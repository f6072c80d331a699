"""A problem spans its lines (console/observe/problems.py), on real captures and real PyTorch text:
a traceback is one problem named by its exception line, chains and CUDA advice stay with it,
interleaved ranks do not break it, and the diagnosis quotes each problem once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.diagnose import diagnose
from console.model import LineKind, LogLine
from console.observe.lines import classify_line
from console.observe.problems import MAX_GAP, ProblemSpans
from console.state import RunState
from tests.real_captures import REAL, Capture

CORPUS = Path(__file__).parent / "data" / "corpus" / "problems.jsonl"


def log_lines(texts: list[str], first: int = 1) -> list[LogLine]:
    return [LogLine(number, text, classify_line(text), time=float(number)) for number, text in enumerate(texts, first)]


def spans_of(lines: list[LogLine]) -> ProblemSpans:
    spans = ProblemSpans()
    for line in lines:
        spans.add(line)
    return spans


@pytest.mark.parametrize(
    "capture, head, name, kind, thread",
    [
        ("triton_oom", "Traceback (most recent call last):", "triton.runtime.errors.OutOfResources: out of resource: shared memory,", "oom", None),
        ("triton_oom_thread", "Exception in thread TargetWarmup-0:", "triton.runtime.errors.OutOfResources: out of resource:", "oom", "TargetWarmup-0"),
        ("thread_oom", "Exception in thread TargetForwardLoop:", "torch.OutOfMemoryError: CUDA out of memory.", "oom", "TargetForwardLoop"),
        # the traceback glued to the last redraw of a tqdm bar
        ("hf_oom", "Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory.", "oom", None),
        ("pipeline_producer_dies", "Exception in thread producer:", "RuntimeError: producer lost its data source", "traceback", "producer"),
    ],
)
def test_a_real_traceback_is_one_problem_named_by_its_exception_line(capture, head, name, kind, thread):
    lines = Capture(REAL / capture).lines()
    (problem,) = spans_of(lines).problems
    by_number = {line.number: line for line in lines}
    assert by_number[problem.first].text.endswith(head)
    assert problem.name.number == problem.last and problem.name.text.startswith(name)
    assert (problem.kind.value, problem.thread) == (kind, thread)
    # every frame between is its own: nothing of the traceback is left outside it
    inside = [by_number[n].text for n in range(problem.first + 1, problem.last) if n in by_number]
    assert inside and all(text.startswith((" ", "Traceback")) for text in inside)


def test_interleaved_ranks_and_a_cpp_abort_of_a_real_watchdog_timeout():
    # the whole log (the capture's snapshot was taken before the watchdog fired)
    lines = log_lines((REAL / "torchrun_watchdog" / "run.log").read_text().splitlines())
    problems = list(spans_of(lines).problems)
    text = {line.number: line.text for line in lines}
    # rank 0's traceback, written between the lines of the C++ abort of the unprefixed stream
    traceback = next(p for p in problems if text[p.first] == "[rank0]: Traceback (most recent call last):")
    assert p_name(traceback).startswith("[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted")
    abort = next(p for p in problems if text[p.first].startswith("terminate called after throwing"))
    assert abort.first < traceback.first and traceback.last < abort.last
    assert p_name(abort).startswith("  what():  [PG ID 0") and abort.kind is LineKind.NCCL_TIMEOUT
    assert text[abort.last].startswith("frame #4")  # both of its stacks, the blank line between too
    # the watchdog's C++ stack lost the [rank0]: prefix its first line had: it stays with that line
    watchdog = next(p for p in problems if "Some NCCL operations have failed" in p_name(p))
    assert text[watchdog.last].startswith("frame #6") and "terminated with exception" in text[watchdog.last - 8]
    assert not any("Traceback (most recent call last)" in p_name(p) or p_name(p).startswith("frame #") for p in problems)
    assert len(problems) == 8  # of 24 problem lines


def p_name(problem) -> str:
    return problem.name.text


# PyTorch's own text for an illegal memory access, as its issues quote it.
CUDA_ERROR = [
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "    loss.backward()",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "",
    "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error: an illegal memory access was encountered",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "",
    "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f1c4a8a1d87 in /usr/lib/libc10.so)",
    "step 13 | loss 2.1",
]


def test_the_cuda_advice_belongs_to_the_cuda_error_before_it():
    first, abort = spans_of(log_lines(CUDA_ERROR)).problems
    assert (first.first, first.last, first.name.number, first.kind) == (1, 7, 4, LineKind.CUDA_ERROR)
    assert (abort.first, abort.last, abort.name.number, abort.kind) == (9, 16, 10, LineKind.CUDA_ERROR)


def test_a_chain_of_exceptions_is_one_problem_named_by_the_last():
    texts = [
        "Exception in thread loader (worker):",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in f',
        "RuntimeError: no shard left",
        "step 10 | loss 2.0",
        "Traceback (most recent call last):",
        "KeyboardInterrupt",
    ]
    lines = log_lines(texts)
    chained, interrupted = spans_of(lines).problems
    assert (chained.first, chained.last, chained.name.text, chained.thread) == (1, 10, "RuntimeError: no shard left", "loader")
    assert chained.kind is LineKind.OOM  # the gravest of its lines: the OOM it began with
    assert (interrupted.first, interrupted.name.text) == (12, "KeyboardInterrupt")
    (alone,) = spans_of(lines[:1]).problems  # the traceback has not come yet: named by its head for now
    assert alone.name.number == 1


def test_lines_of_another_rank_or_thread_in_between_do_not_break_a_traceback():
    texts = []
    for frame in ("[rank{}]: Traceback (most recent call last):", '[rank{}]:   File "t.py", line 9, in <module>', "[rank{}]:     step()"):
        texts += [frame.format(0), frame.format(1), "step 7 | loss 1.0 | 88.4 it/s"]
    texts += ["[rank1]: torch.OutOfMemoryError: CUDA out of memory.", "[rank0]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970"]
    rank0, rank1 = spans_of(log_lines(texts)).problems
    assert (rank0.first, rank0.name.text, rank0.last) == (1, texts[-1], len(texts))
    assert (rank1.first, rank1.name.text, rank1.last) == (2, texts[-2], len(texts) - 1)


def test_an_unfinished_traceback_stops_being_open_and_memory_stays_bounded():
    spans = ProblemSpans(max_problems=3)
    texts = ["Traceback (most recent call last):"] + ["step 1 | loss 1.0"] * (MAX_GAP + 1)
    for round_ in range(5):
        for line in log_lines(texts, first=1 + round_ * len(texts)):
            spans.add(line)
        assert not spans.open  # the flood path is back to one test per line
    assert len(spans.problems) == 3 and all(p.first == p.last for p in spans.problems)


def test_real_traceback_heads_from_public_projects_open_a_traceback():
    """IPython's, rich's and a logger's heads from the corpus: the exception line after them names the problem."""
    heads = [
        entry["line"]
        for entry in map(json.loads, CORPUS.read_text().splitlines())
        if "Traceback (most recent call last)" in entry["line"] and entry["kind"] in ("traceback", "oom")
    ]
    assert len(heads) >= 5
    for head in heads:
        rank = head[: head.index("]:") + 2] if head.startswith("[rank") else ""  # torchrun prefixes every line
        (problem,) = spans_of(log_lines([head, f"{rank}    x = f()", f"{rank}ValueError: bad shard"])).problems
        assert problem.name.text == f"{rank}ValueError: bad shard", head


def test_the_diagnosis_names_the_real_triton_oom_by_its_exception_line():
    capture = Capture(REAL / "triton_oom")
    evidence = capture.evidence()
    (problem,) = evidence.problems
    assert problem.text.startswith("triton.runtime.errors.OutOfResources: out of resource: shared memory")
    verdict = diagnose(evidence, capture.config)
    assert verdict.evidence[0].startswith("oom (") and "OutOfResources: out of resource: shared memory" in verdict.evidence[0]
    assert not any("Traceback" in line for line in verdict.evidence)


def test_a_thread_that_died_in_an_earlier_launch_is_forgotten_with_its_log():
    state = RunState(clock=lambda: 10.0)
    state.add_lines(log_lines(["Exception in thread loader:", "Traceback (most recent call last):", "RuntimeError: gone"]))
    assert [p.thread for p in state.spans.problems] == ["loader"]
    state.start_new_log("/w/train2.log")
    state.add_lines(log_lines(["Traceback (most recent call last):"], first=4))
    assert [p.first for p in state.spans.problems] == [4] and not state.spans.problems[0].thread


def test_untrusted_lines_inside_a_traceback_are_read_by_their_shape_only():
    """16 KiB words that nearly look like an exception's line (one once cost the regex seconds), a logger's `INFO:`."""
    texts = [
        "Exception in thread loader:",
        "Traceback (most recent call last):",
        "A" + "a" * 16_000 + "!",
        "a." * 8_000 + "!",
        "INFO: rank 3 still alive",
        '  File "x.py", line 1, in f',
        "ValueError: " + "\x1b[31m" * 100,
    ]
    (problem,) = spans_of(log_lines(texts)).problems
    assert (problem.first, problem.last, problem.name.number) == (1, 7, 7)
    assert problem.thread == "loader"
