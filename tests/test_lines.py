"""classify_line on the H200 captures and on a realistic log of every supported framework."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.model import MetricPattern
from console.model import LineInfo, LineKind
from console.observe.lines import classify_line, parse_metric_value
from console.user_patterns import NO_PATTERNS, MetricPatterns, compile_metric_pattern
from console.observe.textsafe import sanitize

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "h200"
LOGS = FIXTURES / "logs"

N = LineKind.NORMAL


def read_lines(path: Path) -> list[str]:
    """A log as the follower delivers it: split on newlines, each line sanitized."""
    return [sanitize(raw)[0] for raw in path.read_bytes().split(b"\n")[:-1]]


def kinds(path: Path) -> list[str]:
    return [classify_line(line).kind.value for line in read_lines(path)]


def metrics(line: str, patterns: MetricPatterns = NO_PATTERNS) -> dict:
    return {k: v for k, v in classify_line(line, patterns).as_json().items() if v is not None and k != "kind"}


# -- the H200 captures --------------------------------------------------------


def test_h200_hung_log() -> None:
    assert kinds(H200 / "hung.log") == [
        "normal",
        "traceback",  # Exception in thread TargetForwardLoop:
        "traceback",
        "normal",
        "normal",
        "normal",
        "normal",
        "normal",
        "normal",
        "traceback",  # RuntimeError: producer died before publishing
    ]
    first = classify_line(read_lines(H200 / "hung.log")[0])
    assert first == LineInfo(LineKind.NORMAL, tokens_per_s=14200.0, loss=2.31, step=1)


def test_h200_oom() -> None:
    assert kinds(H200 / "oom.txt") == ["traceback", "normal", "oom"]


def test_h200_nan_anomaly() -> None:
    found = kinds(H200 / "nan_anomaly.txt")
    assert found[0] == "nan"  # step 7 | loss nan
    assert found[1] == "warning"  # UserWarning: Error detected in DivBackward0 ...
    assert found[5] == "traceback"
    assert found[-1] == "nan"  # RuntimeError: Function 'DivBackward0' returned nan values ...
    assert set(found[6:-1]) == {"normal"}
    nan_step = classify_line("step 7 | loss nan")
    assert nan_step == LineInfo(LineKind.NAN, step=7, nonfinite_loss=nan_step.nonfinite_loss)
    assert str(nan_step.nonfinite_loss) == "nan"  # the pane's loss figure says nan, not the last finite loss


def test_h200_device_assert() -> None:
    assert kinds(H200 / "device_assert.txt") == [
        "cuda_error",  # IndexKernel.cu:111: ... Assertion `...` failed.
        "traceback",
        "normal",
        "cuda_error",  # torch.AcceleratorError: CUDA error: device-side assert triggered
        "cuda_error",  # Search for `cudaErrorAssert' ...
        "normal",
        "normal",
        "normal",  # Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
        "normal",
    ]


# -- framework logs -------------------------------------------------------------


def test_hf_trainer_log() -> None:
    lines = read_lines(LOGS / "hf_trainer.log")
    assert [classify_line(line).kind for line in lines] == [N] * 10 + [LineKind.WARNING, LineKind.NAN, N, N]
    # the banner's `Total optimization steps = 782` is not a step report
    assert all(metrics(line) == {} for line in lines[:8])
    assert metrics(lines[8]) == {"loss": 3.4571, "grad_norm": 1.8327, "lr": 4.936e-05}
    # an eval line's only loss is its loss (issue 36: `val_loss` as the only loss on a line); its
    # `eval_samples_per_second` and `eval_steps_per_second` are the evaluation's, no rate of the run
    assert metrics(lines[12]) == {"loss": 2.9811}
    assert metrics(lines[13]) == {
        "tokens_per_s": 34081.2,
        "samples_per_s": 33.282,
        "it_per_s": 0.521,
        "loss": 2.8142,
    }


def test_tqdm_log_keeps_the_last_redraw() -> None:
    lines = read_lines(LOGS / "tqdm.log")
    assert lines[0] == "  2%|2         | 16/782 [00:06<04:58,  2.57it/s]"
    assert metrics(lines[0]) == {"it_per_s": 2.57, "step": 16, "total_steps": 782}
    assert metrics(lines[1]) == {"loss": 3.4571, "grad_norm": 1.8327, "lr": 4.936e-05}
    assert metrics(lines[2]) == {"it_per_s": pytest.approx(1 / 1.31), "step": 32, "total_steps": 782}
    assert metrics(lines[3]) == {"it_per_s": 2.59, "step": 782, "total_steps": 782}
    assert kinds(LOGS / "tqdm.log") == ["normal"] * 4


def test_lightning_log() -> None:
    lines = read_lines(LOGS / "lightning.log")
    assert set(kinds(LOGS / "lightning.log")) == {"normal"}
    assert metrics(lines[8]) == {"it_per_s": 2.5, "loss": 3.21, "step": 100, "total_steps": 1000}
    assert metrics(lines[10]) == {"it_per_s": 2.49, "loss": 2.511, "step": 1000, "total_steps": 1000}
    assert metrics(lines[4]) == {}  # the model summary table


def test_megatron_log() -> None:
    lines = read_lines(LOGS / "megatron.log")
    assert kinds(LOGS / "megatron.log") == ["normal"] * 9 + ["nan", "nccl_timeout", "nccl_timeout"]
    assert metrics(lines[6]) == {
        "it_per_s": pytest.approx(1000 / 438.3),
        "loss": 6.159759,
        "step": 609,
        "total_steps": 500000,
        "lr": 5.999998e-05,
        "grad_norm": 1.095,
    }
    assert metrics(lines[8]) == {
        "samples_per_s": 2.66,
        "it_per_s": pytest.approx(1 / 769.99),
        "loss": 63.84045,
        "step": 2,
        "total_steps": 95367,
        "lr": 3.787e-06,
        "grad_norm": 15906.21,
    }
    assert classify_line(lines[9]).loss is None  # lm loss: NaN


def test_torchtitan_log_with_colours() -> None:
    lines = read_lines(LOGS / "torchtitan.log")
    assert kinds(LOGS / "torchtitan.log") == ["normal", "normal", "normal", "normal", "warning"]
    assert metrics(lines[1]) == {"tokens_per_s": 3502.0, "loss": 8.1661, "step": 1, "grad_norm": 3.6855, "mfu": 0.19}
    assert metrics(lines[3]) == {"tokens_per_s": 177138.0, "loss": 6.1098, "step": 2, "grad_norm": 4.6416, "mfu": 9.72}
    assert metrics(lines[2]) == {}  # "adjusting timeout" is not an NCCL timeout


def test_nanogpt_log() -> None:
    lines = read_lines(LOGS / "nanogpt.log")
    assert set(kinds(LOGS / "nanogpt.log")) == {"normal"}
    assert metrics(lines[0]) == {}  # "tokens per iteration will be: 491,520" is not a rate
    assert metrics(lines[7]) == {"loss": 10.9889, "step": 0}
    assert metrics(lines[9]) == {"it_per_s": pytest.approx(1000 / 120), "loss": 9.5411, "step": 10, "mfu": 30.0}


def test_deepspeed_log() -> None:
    lines = read_lines(LOGS / "deepspeed.log")
    # the OVERFLOW line skips one step: a warning, not a problem
    assert kinds(LOGS / "deepspeed.log") == ["normal", "warning", "warning", "normal", "normal", "normal", "killed", "killed"]
    assert metrics(lines[2]) == {}  # OVERFLOW ... Attempted loss scale: a loss scale, not a loss
    assert metrics(lines[3]) == {"step": 10, "lr": 4.99804827338393e-05}
    assert metrics(lines[4]) == {"samples_per_s": pytest.approx(25.704280480541442), "step": 10}
    assert metrics(lines[5]) == {"samples_per_s": 62.5, "it_per_s": pytest.approx(1 / 0.512), "loss": 2.3031, "step": 20}


def test_torchrun_failures_log() -> None:
    assert kinds(LOGS / "torchrun_failures.log") == [
        "cuda_error",  # watchdog thread terminated with exception: CUDA error: an illegal memory access
        "cuda_error",  # CUBLAS_STATUS_EXECUTION_FAILED
        "oom",  # CUBLAS_STATUS_ALLOC_FAILED
        "cuda_error",  # Xid 79
        "warning",
        "warning",  # glog W line: closing signal SIGTERM
        "killed",  # exitcode: -9
        "traceback",
        "normal",
        "nccl_timeout",  # [rank0]: torch.distributed.DistBackendError: NCCL error ... unhandled system error
        "traceback",  # ChildFailedError:
        "killed",  # kernel OOM killer
        "killed",  # the shell's "Killed"
        "oom",  # RESOURCE_EXHAUSTED
        "nccl_timeout",  # Heartbeat monitor timed out
    ]


# -- single lines -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", LineKind.OOM),
        ("RuntimeError: CUDA error: out of memory", LineKind.OOM),
        ("MemoryError", LineKind.OOM),
        ("RuntimeError: CUDA error: device-side assert triggered", LineKind.CUDA_ERROR),
        ("cudaErrorLaunchFailure: unspecified launch failure", LineKind.CUDA_ERROR),
        ("[E ProcessGroupNCCL.cpp:475] [Rank 1] NCCL watchdog thread terminated", LineKind.NCCL_TIMEOUT),
        ("NCCL operation timed out after 1800000 ms", LineKind.NCCL_TIMEOUT),
        ("Loss is NaN, stopping training", LineKind.NAN),
        ("loss: inf", LineKind.NAN),
        ("'grad_norm': inf", LineKind.NAN),
        ("reduced_train_loss=nan.0, val_loss=inf", LineKind.NAN),  # a key is read from its start
        ("| epoch 001: loss=7.1, grad_norm 2.03 (inf), loss_scale 64", LineKind.NAN),  # its running average
        ("grad_norm: 0.3922 (0.4100)", LineKind.NORMAL),
        ("CUDA warning: misaligned address (function destroyEvent)", LineKind.CUDA_ERROR),
        ("node1:1:2 [0] NCCL WARN NET/OFI Request completed with error. RC: 21. Error: unknown error", LineKind.NCCL_TIMEOUT),
        ("srun: error: Orion-01-01: task 4: Out Of Memory", LineKind.KILLED),  # the cgroup's OOM killer
        ("srun: error: nid001277: tasks 1-3: Out Of Memory", LineKind.KILLED),
        ("CUDA Error 2: out of memory", LineKind.OOM),
        ("nan detected in gradients", LineKind.NAN),
        ("WARNING: found NaN in local grad norm", LineKind.NAN),
        ("The total norm of order 2.0 for gradients from `parameters` is non-finite", LineKind.NAN),
        ("loss tensor(nan, device='cuda:0')", LineKind.NAN),
        ("killed by signal 9", LineKind.KILLED),
        ("Signal 9 (SIGKILL) received by PID 1234", LineKind.KILLED),
        ("memory cgroup oom-kill: constraint=CONSTRAINT_MEMCG", LineKind.KILLED),
        ("    Reason: OOMKilled", LineKind.KILLED),
        ("Traceback (most recent call last):", LineKind.TRACEBACK),
        ("KeyboardInterrupt", LineKind.TRACEBACK),
        ("ValueError: shapes (3,) and (4,) not aligned", LineKind.TRACEBACK),
        ("/x/y.py:12: FutureWarning: `foo` is deprecated", LineKind.WARNING),
        ("Warning: no checkpoint found", LineKind.WARNING),
        ("[W socket.cpp:464] [c10d] The server socket has failed to bind", LineKind.WARNING),
        ("2025-01-01 12:00:00 - WARNING - slow dataloader", LineKind.WARNING),
        ("gcc: warning: unused flag", LineKind.WARNING),
        ("RESOURCE_EXHAUSTED: OOM when allocating tensor", LineKind.OOM),
        ("cudaErrorMemoryAllocation", LineKind.OOM),
        ("2025-01-01 INFO step 5 | loss inf", LineKind.NAN),  # INFO and a real inf on one line
        # the same line with two signals: the higher one wins
        ("RuntimeError: NCCL timeout while handling CUDA out of memory", LineKind.OOM),
        ("Traceback ... Killed", LineKind.KILLED),
        # a row of a run's numbers holding nan; an allocation call that failed; asyncio's traceback head
        ("76980 nan", LineKind.NAN),
        ("2022-05-08 16:27:05,927 17940 0.00 nan 0.00 ----", LineKind.NAN),
        ("[bmlib_memory][error] bm_alloc_gmem failed, dev_id = 0", LineKind.OOM),
        ("Exception in callback functools.partial(<function _raise_exception_on_finish at 0x7f>)", LineKind.TRACEBACK),
        ("ERROR 03-29 12:59:53 [core.py:1099] EngineCore failed to start.", LineKind.TRACEBACK),
        ("Grad overflow on iteration 8", LineKind.WARNING),
        ("Error executing job with overrides: ['trainer.total_epochs=1']", LineKind.TRACEBACK),
        (" 99/100 [==>.] - ETA: 3s - loss: nanEpoch 1/1000", LineKind.NAN),  # a bar run into the next heading
        # problem lines as the frameworks' own sources word them (issue 36, round 6):
        # Paddle's enforce (paddle/phi/core/enforce.h) names the CUDA library that failed
        ("OSError: (External) CUBLAS error(13). ", LineKind.CUDA_ERROR),
        ("RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR", LineKind.CUDA_ERROR),
        # SGLang's model_runner.py (KV pool too small) and vLLM's worker: memory ran short
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", LineKind.OOM),
        ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
         LineKind.OOM),
        # XLA's nccl_utils.cc / TF's nccl_manager.cc word a failed NCCL call; torch's ProcessGroupNCCL.cpp
        # aborts the communicator after a failure; NCCL's misc/socket.cc fails to accept a peer
        ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_api.cc:501: "
         "NCCL operation ncclCommInitRank(&comm, nranks, nccl_id, rank) failed: unhandled system error",
         LineKind.NCCL_TIMEOUT),
        ("RuntimeError: NCCL communicator was aborted on rank 3.", LineKind.NCCL_TIMEOUT),
        ("node1:1:2 [0] misc/socket.cc:480 NCCL WARN [Service thread] Accept failed Resource temporarily unavailable",
         LineKind.NCCL_TIMEOUT),
        # torch/distributed/elastic/multiprocessing/api.py: the agent ended by a signal it was sent
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 1234 got signal: 15",
         LineKind.KILLED),
        # deepspeed/launcher/launch.py's sigkill_handler: a worker's exit code (a signal's is `killed`)
        ("[2024-01-01 12:00:00,123] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
         "'--local_rank=0'] exits with return code = 1", LineKind.TRACEBACK),
        ("[2024-01-01 12:00:00,123] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
         "'--local_rank=0'] exits with return code = -9", LineKind.KILLED),
    ],
)
def test_kind(line: str, kind: LineKind) -> None:
    assert classify_line(line).kind is kind


@pytest.mark.parametrize(
    "line",
    [
        "using the nano config",
        "moved the model to room 4",
        "2025-01-01 12:00:00 - INFO - starting inference",
        "finance dataset loaded",
        "skip_nan_check: true",
        "applying torch.nan_to_num to logits",
        "detect_anomaly=False",
        "NaNs are filtered by the collator: banana",
        "NCCL_TIMEOUT=1800",
        "nccl timeout set to 1800 s",
        "NCCL INFO Channel 00/24 : 0 1 2 3 4 5 6 7",
        "number of nan iterations:   0",
        "errors=0 warnings_as_errors=false",
        "an Error occurred? no: all checks passed",
        "loss scale: 65536.0",
        "skillful killjoy",
        "Total optimization steps = 1,000",
        "step: 1 loss: 8.1 memory: 2.47GiB max_memory_allocated: 30.1GiB",
        "INFO INFO information: inference on the finance set",
        "0  1.0  NaN",  # pandas' missing value
        "cudaFree: deallocation failed twice, retrying",
        "ERROR 03-29 12:59:53 [api.py:10] Request 1f2e failed with status 404: not found.",
        # ProcessGroupNCCL.cpp's start-up options: a setting's timeout with its unit is no timeout
        "[I ProcessGroupNCCL.cpp:1234] [Rank 0] ProcessGroupNCCL initialization options: "
        "NCCL_ASYNC_ERROR_HANDLING: 1, TIMEOUT(ms): 1800000, USE_HIGH_PRIORITY_STREAM: 0",
        "max_grad_norm: inf",  # a clipping threshold set to none
        # a best-so-far tracker starts at inf (Keras' ModelCheckpoint, Lightning's EarlyStopping keep one)
        "best_val_loss = inf",
        "min_val_loss=inf",
        "gradient clipping: max_norm=inf",
        "NaN check: 0 nan values in batch",  # a count of none
        "[2024-01-01 12:00:00,123] [INFO] [launch.py:351:main] process 1234 exits with return code = 0",
        "If there is not enough memory, lower the batch size.",  # advice, not an exception's message
    ],
)
def test_false_positives_are_normal(line: str) -> None:
    assert classify_line(line).kind is LineKind.NORMAL, line


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("14.2K tok/s", {"tokens_per_s": 14200.0}),
        ("1.5M tokens/s", {"tokens_per_s": 1.5e6}),
        ("1,234,567 tokens/s", {"tokens_per_s": 1234567.0}),
        ("tokens/s: 14,200", {"tokens_per_s": 14200.0}),
        ("throughput 9,876 tok/sec", {"tokens_per_s": 9876.0}),
        ("tokens_per_second=512.5", {"tokens_per_s": 512.5}),
        ("tps: 14,200", {"tokens_per_s": 14200.0}),
        ("1234 tok/s/gpu", {"tokens_per_s": 1234.0}),  # a per-GPU rate is the rate the log gives
        ("lr 3.0e-04 | grad_norm 1.10 | mfu 41.2%", {"lr": 3e-4, "grad_norm": 1.1, "mfu": 41.2}),
        ("base_lr: 2.0e-03 lrm: 1.00", {}),  # the schedule's peak and a multiplier, not the lr
        ("1e999 tok/s | lr 1e400 | grad_norm: -1e999", {}),  # too large to be a reading
        ("'learning_rate': '4.9e-05'", {"lr": 4.9e-05}),
        ("64.0 samples/s", {"samples_per_s": 64.0}),
        ("12.3it/s", {"it_per_s": 12.3}),
        # a unit and its inverse, whatever the bar counts (issue 36): batches are steps, examples samples
        ("17/17 [00:02<00:00,  7.26ba/s]", {"it_per_s": 7.26, "step": 17, "total_steps": 17}),
        ("  5/10 [00:10<00:10,  2.1s/ba]", {"it_per_s": pytest.approx(1 / 2.1), "step": 5, "total_steps": 10}),
        ("1000/1000 [00:01<00:00, 150.2ex/s]", {"samples_per_s": 150.2, "step": 1000, "total_steps": 1000}),
        ("[00:01<00:00,  1.50s/ex]", {"samples_per_s": pytest.approx(1 / 1.5)}),
        ("step 3 | 30ms/sample", {"samples_per_s": pytest.approx(1 / 0.03), "step": 3}),
        # a step key written into its number; an N / M pair after an epoch's number (fairseq)
        ("iteration100 loss: 2.31", {"step": 100, "loss": 2.31}),
        ("| epoch 001:   2000 / 8223 loss=7.1", {"step": 2000, "total_steps": 8223, "loss": 7.1}),
        ("Epoch 3/10 loss 2.1", {"loss": 2.1}),
        ("1.52s/it", {"it_per_s": pytest.approx(1 / 1.52)}),
        ("loss 2.31", {"loss": 2.31}),
        ("loss: 2.31", {"loss": 2.31}),
        ("loss=2.31", {"loss": 2.31}),
        ("'loss': 2.31", {"loss": 2.31}),
        ("lm loss: 2.31E+00", {"loss": 2.31}),
        ("train_loss=2.31", {"loss": 2.31}),
        ("eval_loss=2.31", {"loss": 2.31}),  # the line's only loss
        ("train_loss=2.1 eval_loss=2.31", {"loss": 2.1}),
        ("step 10/1000", {"step": 10, "total_steps": 1000}),
        ("iteration 10/ 1000", {"step": 10, "total_steps": 1000}),
        ("global step 95 / 22140, loss: 1.78", {"step": 95, "total_steps": 22140, "loss": 1.78}),
        ("] [10] train/loss=2.3, steps_per_sec=3.2", {"step": 10, "loss": 2.3, "it_per_s": 3.2}),
        ("'step': 10", {"step": 10}),
        ("Step 1,200/10,000", {"step": 1200, "total_steps": 10000}),
        ("Epoch 0:  10%|█ | 10/100 [00:01<00:09, 9.50it/s]", {"it_per_s": 9.5, "step": 10, "total_steps": 100}),
        ("step 3 | loss 2.1 | 14.2K tok/s", {"tokens_per_s": 14200.0, "loss": 2.1, "step": 3}),
        # MindFormers' callback.py prints `{ Epoch:[%3d/%3d], step:[%5d/%5d], … per_step_time: %dms, …,
        # global_norm: %s`: a bracketed counter padded on both sides, a time per step, the gradients' norm
        ("{ Epoch:[  1/  2], step:[   10/ 1000], loss: 2.345, per_step_time: 1234ms, lr: 1e-05, "
         "overflow cond: False, loss_scale: 1.0, global_norm: [1.23]",
         {"step": 10, "total_steps": 1000, "loss": 2.345, "it_per_s": pytest.approx(1 / 1.234), "lr": 1e-05,
          "grad_norm": 1.23}),
        # verl's console logger (verl/utils/tracking.py): `step:N - key:value - …`, keys in namespaces
        ("step:100 - actor/pg_loss:0.123 - actor/grad_norm:0.5 - critic/score/mean:0.3 - timing_s/step:12.5",
         {"step": 100, "loss": 0.123, "grad_norm": 0.5, "it_per_s": pytest.approx(1 / 12.5)}),
        ("copied 10/100 files", {}),
        ("saving to /ckpt/step_100/model.pt", {}),
    ],
)
def test_metrics(line: str, expected: dict) -> None:
    assert metrics(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("(14.2k tok/s)", {"tokens_per_s": 14200.0}),
        ("14.2ktok/s", {"tokens_per_s": 14200.0}),
        ("x 1,234.5 K tok/s", {"tokens_per_s": 1234500.0}),
        ("|1.5e3 tok/s", {"tokens_per_s": 1500.0}),
        (".5 it/s", {"it_per_s": 0.5}),
        ("v1.5 tok/s", {}),  # part of a word, not a value
        ("1.2.3 tok/s", {}),
        ("12,34 tok/s", {}),  # not a thousands separator
        ("14.2k" + " " * 35 + "tok/s", {"tokens_per_s": 14200.0}),  # starts 40 characters before the unit
        # a number that starts further away is not read, not even its tail (`04`, the old reading)
        ("2.3e-04" + " " * 36 + "it/s", {}),
    ],
)
def test_value_before_its_unit(line: str, expected: dict) -> None:
    assert metrics(line) == expected


def test_config_patterns_apply_after_builtins_and_win() -> None:
    patterns = MetricPatterns((
        MetricPattern("tokens_per_s", r"tgs\): (?P<value>[\d.]+)"),
        MetricPattern("loss", r"objective=(?P<loss>\S+)"),
        MetricPattern("step", r"^\[(?P<value>\d+)\]"),
    ))
    line = "[42] step 7 | tokens per gpu per second (tgs): 633.8 | objective=1.25"
    assert metrics(line, patterns) == {"tokens_per_s": 633.8, "loss": 1.25, "step": 42}
    assert metrics("step 7 | loss 3.0", patterns) == {"loss": 3.0, "step": 7}
    assert classify_line("objective=nan", patterns).kind is LineKind.NAN


def test_bad_config_patterns_are_reported_and_never_break_a_line() -> None:
    with pytest.raises(ValueError, match="named group"):
        compile_metric_pattern(r"loss (\d+)", "loss")
    with pytest.raises(ValueError, match="must be one of"):
        compile_metric_pattern(r"(?P<value>\d+)", "speed")
    with pytest.raises(ValueError, match="metric pattern"):
        compile_metric_pattern(r"(?P<value>[", "loss")
    bad = MetricPatterns((MetricPattern("loss", "(?P<value>["), MetricPattern("loss", r"x=(?P<value>\w+)")))
    assert classify_line("step 1 loss 2.0 x=abc", bad) == LineInfo(loss=2.0, step=1)


def test_parse_metric_value() -> None:
    assert parse_metric_value("14.2K") == 14200.0
    assert parse_metric_value(" 1,234 ") == 1234.0
    assert parse_metric_value("2.31E+00") == 2.31
    assert math.isnan(parse_metric_value("nan"))
    with pytest.raises(ValueError):
        parse_metric_value("fast")


@given(st.text(max_size=400))
def test_any_text_gives_a_line_info_with_finite_metrics(text: str) -> None:
    info = classify_line(text)
    for value in (info.tokens_per_s, info.samples_per_s, info.it_per_s, info.loss, info.lr, info.grad_norm, info.mfu):
        assert value is None or math.isfinite(value)


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("nccl ", LineInfo()),
        ("a.cu:1: Assertion `x` failed ", LineInfo(LineKind.CUDA_ERROR)),
        ("tok/s ", LineInfo()),
        ("loss loss 1 ", LineInfo(loss=1.0)),
        ("| 1/2 [", LineInfo(step=1, total_steps=2)),
        ("step ", LineInfo()),
    ],
)
def test_lines_of_repeated_units(unit: str, expected: LineInfo) -> None:
    """A hostile line of one repeated token classifies like a short one (and the regexes stay near-linear)."""
    assert classify_line(sanitize((unit * 1000).encode())[0]) == expected


def test_a_bars_redraws_joined_on_one_line_read_as_the_last() -> None:
    """A paste that lost a bar's carriage returns joins its redraws (as a public README on DETR with
    Lightning shows them): the last redraw is the bar now, as the follower keeps it after a `\\r`."""
    line = (
        "Epoch 0:   0%|          | 0/328 [00:00<?, ?it/s]Epoch 0:  19%|████▎                 | 63/328 "
        "[02:01<08:31,  1.93s/it, loss=2.76, v_num=2]"
    )
    assert classify_line(line) == LineInfo(it_per_s=1 / 1.93, loss=2.76, step=63, total_steps=328)
