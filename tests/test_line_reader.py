"""LineReader (console/observe/lines.py): a problem is a block, read by its shape, as the follower
feeds the lines. Real lines: the H200 captures in tests/fixtures and tests/data/real, and corpus
lines from public issues (their sources are in tests/data/corpus)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from console.model import LineKind, LogLine
from console.observe.lines import MAX_BLOCK_STREAMS, LineReader, classify_line
from console.observe.problems import ProblemSpans

FIXTURES = Path(__file__).parent / "fixtures"
REAL = Path(__file__).parent / "data" / "real"


def read(lines: list[str]) -> list[tuple[str, bool]]:
    reader = LineReader()
    return [(info.kind.value, info.continues) for info in map(reader.read, lines)]


def test_a_threads_traceback_is_one_block_of_its_kind() -> None:
    lines = (FIXTURES / "h200" / "hung.log").read_text().splitlines()
    assert read(lines) == [("normal", False), ("traceback", False)] + [("traceback", True)] * 8


def test_the_cuda_advice_continues_a_ranks_error_printed_without_its_prefix() -> None:
    # vllm-project/vllm: c10's watchdog line under torchrun's prefix, PyTorch's advice without it
    lines = [
        "[rank2]:[E626 23:10:17.921506443 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 Rank 2] Process group watchdog "
        "thread terminated with exception: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
    assert read(lines) == [("cuda_error", False)] + [("cuda_error", True)] * 3
    assert [classify_line(line).kind.value for line in lines] == ["cuda_error"] + ["normal"] * 3


def test_a_stream_continues_only_its_own_or_a_longer_prefix_of_its_own() -> None:
    """Rank 1's lines are not rank 10's: srun --label's `1: ` and pdsh's `worker-1: ` are whole streams."""
    for ten, one in (("10: ", "1: "), ("worker-10: ", "worker-1: "), ("vllm-10  | ", "vllm-1  | ")):
        lines = [f"{ten}Traceback (most recent call last):", f'{ten}  File "train.py", line 9, in <module>',
                 f"{one}    x = step(batch)", f"{one}saving checkpoint"]
        assert read(lines) == [("traceback", False), ("traceback", True), ("normal", False), ("normal", False)], ten
    # the same stream with one prefix less (torchrun's `[default0]:` after `[default0]:[rank0]:`) continues it
    lines = ["[default0]:[rank0]: Traceback (most recent call last):", '[default0]:[rank0]:   File "t.py", line 9, in <module>',
             "[default0]:    raise RuntimeError('x')"]
    assert read(lines)[2] == ("traceback", True)


def test_a_blank_line_or_a_progress_line_ends_a_message() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    assert read([oom, "", "Epoch 2 starting"]) == [("oom", False), ("normal", False), ("normal", False)]
    assert read([oom, "step 5 | loss 2.31"])[1] == ("normal", False)
    # a line of another stream, or a new log record, is not the message's next line
    assert read([oom, "[2024-01-01 10:00:00,000] [INFO] saving checkpoint"])[1] == ("normal", False)


def test_an_indented_source_line_in_a_traceback_is_code_whatever_it_says() -> None:
    # EdjeElectronics/TensorFlow-Object-Detection-API-Tutorial-Train-Multiple-Objects-Windows-10#…
    lines = [
        "Original stack trace for 'CheckNumerics':",
        '  File "_5train.py", line 185, in <module>',
        "    total_loss = tf.check_numerics(total_loss, 'LossTensor is inf or nan.')",
    ]
    assert classify_line(lines[2]).kind is LineKind.NAN
    assert read(lines)[2] == ("traceback", True)


def test_a_delimited_table_continues_until_its_delimiter_closes_it() -> None:
    # lzhxmu/CPPO#6: torchrun's ChildFailedError report
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "src/open_r1/grpo_gsm.py FAILED",
        "Root Cause (first observed failure):",
        "[0]:",
        "  exitcode  : -9 (pid: 14750)",
        "  error_file: <N/A>",
        "============================================================",
        "Loading the next config",
    ]
    kinds = read(lines)
    assert kinds[:5] == [("traceback", False)] + [("traceback", True)] * 4
    assert kinds[5:8] == [("killed", True)] * 3  # a row with a kind of its own keeps it; the rows after take it
    assert kinds[8] == ("normal", False)


def test_an_nccl_threads_return_code_trace_continues_its_warning_only() -> None:
    # deepspeedai/DeepSpeed#6875 and huggingface/finetrainers#344
    warn = (
        "50428e4af543:34610:36821 [4] ib_plugin.c:1673 NCCL WARN NET/IB: Got completion from peer 10.0.1.23<34696> "
        "with status=5 opcode=0 len=0 vendor err 249 (Recv) hca ibp152s0"
    )
    trace = "50428e4af543:34610:36821 [4] NCCL INFO transport/net.cc:1314 -> 6"
    assert read([warn, trace]) == [("nccl_timeout", False), ("nccl_timeout", True)]
    assert read([trace]) == [("normal", False)]
    assert read(["DESKTOP-1CE5APL:1689:2800 [0] NCCL INFO Failed to open libibverbs.so[.1]"]) == [("normal", False)]


def test_an_nccl_processs_threads_share_one_block_and_an_error_code_makes_a_warning_its_failure() -> None:
    # deepseek-ai/DeepEP#143: the warning on one thread, the trace on another of the same process
    warn = "msm-h200-2:4011:4581 [2] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory"
    other_thread = "msm-h200-2:4011:4011 [2] NCCL INFO group.cc:418 -> 2"
    assert read([warn, other_thread]) == [("nccl_timeout", False), ("nccl_timeout", True)]
    # aws/aws-ofi-nccl#927: a warning NCCL answers with an error code up its stack
    lines = ["init.cc:290 NCCL WARN Attempt to use communicator before the previous operation returned ncclSuccess",
             "NCCL INFO enqueue.cc:2014 -> 3", "NCCL INFO collectives.cc:128 -> 3"]
    assert read(lines) == [("warning", False), ("nccl_timeout", True), ("nccl_timeout", True)]
    assert read([lines[0], "NCCL INFO enqueue.cc:2014 -> 0"]) == [("warning", False), ("warning", True)]
    # the same issue's warning of an unexpected message is the failure on its own line
    unexpected = "get_req_from_imm_data:1411 NCCL WARN NET/OFI Unexpected status (0) for message 246"
    assert read([unexpected, "NCCL INFO transport/net.cc:1302 -> 3"]) == [("nccl_timeout", False), ("nccl_timeout", True)]


def test_an_exception_named_inside_a_line_opens_its_message() -> None:
    # vllm-project/vllm#6042: torch 2.3's `[E file.cpp:N]` (no time, so no log header) names the CUDA error
    # after `with exception: `; c10's advice after it, without the rank's prefix, is that error's message
    lines = [
        "[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 2 Rank 0] Process group watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
    assert read(lines) == [("cuda_error", False), ("cuda_error", True)]
    # a line that names no exception leaves the next line alone
    assert read(["[rank0]:[E ProcessGroupNCCL.cpp:1414] NCCL watchdog thread terminated: Killed", "Epoch 2 starts"])[1] == (
        "normal", False)


def test_a_status_code_heads_its_message_like_an_exception() -> None:
    # jax-ml/jax#13428: XLA's OOM and the debugging block under it
    lines = ["RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.", "BufferAssignment OOM Debugging.",
             "BufferAssignment stats:", "             parameter allocation:    6.00MiB"]
    assert read(lines) == [("oom", False)] + [("oom", True)] * 3
    assert read(["INFO: Started server process [1]", "Waiting for application startup."]) == [("normal", False)] * 2


def test_a_ranks_watchdog_messages_are_one_problem_in_the_real_capture() -> None:
    lines = (REAL / "torchrun_watchdog" / "run.log").read_text().splitlines()
    reader, spans = LineReader(), ProblemSpans()
    for number, text in enumerate(lines, 1):
        spans.add(LogLine(number, text, reader.read(text)))
    first = spans.problems[0]
    assert (first.kind, first.first, first.last) == (LineKind.NCCL_TIMEOUT, 117, 129)
    # its Python traceback (under the same prefix) stays a problem of its own, named by its exception, which
    # says the communicator was aborted: the NCCL failure's kind, not a plain traceback's
    assert any(p.kind is LineKind.NCCL_TIMEOUT and p.first > first.last
               and p.name.text.startswith("[rank0]: torch.distributed.DistBackendError") for p in spans.problems)


def test_a_docker_compose_services_prefix_is_its_stream() -> None:
    # vllm-project/vllm#10439: vLLM's traceback as `docker compose` prints it, each line after `vllm-1  | `
    lines = [
        'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/'
        'worker.py", line 493, in raise_if_cache_size_invalid',
        'vllm-1  | ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("No available memory for the cache blocks. "',
        "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.",
        "web_1    | INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK",
    ]
    assert read(lines) == [("traceback", False), ("traceback", True), ("oom", True), ("normal", False)]


def test_open_blocks_are_bounded() -> None:
    reader = LineReader()
    for rank in range(3 * MAX_BLOCK_STREAMS):
        reader.read(f"[rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert len(reader._open) <= MAX_BLOCK_STREAMS
    reader.clear()
    assert reader.read("  continued?") == classify_line("  continued?")


@given(st.lists(st.text(max_size=200), max_size=30))
def test_any_lines_are_read_without_error_and_keep_their_metrics(lines: list[str]) -> None:
    reader = LineReader()
    for line in lines:
        info, alone = reader.read(line), classify_line(line)
        assert (info.step, info.loss, info.tokens_per_s) == (alone.step, alone.loss, alone.tokens_per_s)
        assert info.kind is alone.kind or info.continues
