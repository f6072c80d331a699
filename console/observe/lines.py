"""What one (already sanitized) log line says: its kind and the metrics it states (pure).

classify_line reads one line; LineReader reads a log's lines in order and gives a line that
continues a problem's block (a traceback's frames, an error's message, a C++ stack) the block's
kind. Runs on every log line, so ordinary lines must cost little: the gates that can open on a
line depend on its words only, and are worked out once per line shape (its digits made 0).
Metrics are read by structure (keys and values, numbers and units, `N/M` pairs, bracketed
counters, bars), not by a pattern per framework. Extra patterns from the run's config are applied
after the built-ins and win.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from itertools import islice

from console.model import LineInfo, LineKind
from console.user_patterns import NO_PATTERNS, MetricPatterns, compile_metric_pattern

_NORMAL = LineInfo()

# Every rule below has a gate: words that any line it matches must contain (in
# lower case). A plain `in` test per gate is far cheaper than a regex search, so
# the regexes run only on the few lines that could match. Rules marked "lower"
# are matched against the lower-cased line, which keeps them case-insensitive
# without re.IGNORECASE (that flag disables the fast literal-prefix scan).

# -- kinds ---------------------------------------------------------------------

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"
_NONFINITE = r"[-+]?(?:nan|inf(?:inity)?)\b"
# A stream's prefix before a line: torchrun's `[rank0]:`, mpirun's `[1,0]<stderr>:`, Ray's and vLLM's
# `(EngineCore pid=104) `, a captured `stderr: `, docker compose's service (`vllm-1  | `, `app_1    | `)
# (the kind rules allow one before a heading they anchor at the line's start; LineReader peels the
# wrappers with _WRAPPER).
_STREAM_PREFIX = (
    r"(?:\[(?:default|rank)\d+\]:\s*|\[\d+(?:,\d+)?\]<std(?:out|err)>:\s*"
    r"|\((?:[\w.-]+ )?(?:rank=\d+ )?pid=\d+(?:, ip=[\d.]+)?\) |std(?:out|err): |[a-z][\w.-]*[-_]\d+ +\| )?"
)

# What launchers and log collectors write before each line a program printed, peeled off before the
# line is read (by its shape: lower case, digits made 0). A stream's prefix (LineReader reads each
# stream on its own): torchrun's `[rank3]:` and `--tee`'s `[default0]:`, mpirun's `[1,0]<stderr>:`
# (horovodrun's `[1]<stderr>:`, SageMaker's `[1,mpirank:0,algo-1]<stderr>:`), Lightning's `[rank: 1] `,
# MPICH's and Intel MPI's -prepend-rank `[3] `, Ray's `(RayTrainWorker pid=1234)`, `(pid=1234,
# ip=10.0.0.1)` and `(raylet)`, srun --label's `12: `, pdsh's host (DeepSpeed's multi-node launcher:
# `worker-1: `, `10.0.0.2: `), docker compose's service (`vllm-1  | `), kubectl --prefix's `[pod/x/c] `,
# a captured `stderr: `; a paste's quote (`> `); or a time that names no stream: docker's, kubectl's,
# GitHub Actions' and Jenkins' RFC 3339 stamp (`2024-01-01T00:00:00.123456789Z `,
# `[2020-04-28T19:13:39.193Z] `), syslog's and journald's head (`Jan 01 12:00:00 host python[1234]: `),
# dmesg's `[12345.678901] `. A log record's own header (`2024-01-01 12:00:00,123 - ERROR - `, glog's
# `E0626 …]`) is no wrapper: the block rules read its level.
_WRAPPER = re.compile(
    r"(?P<stream>\[[a-z][a-z_-]*\d+\]: ?|\[\d{1,4}\] |\[\d+(?:,[\w:.-]+){0,2}\]<std(?:out|err)>: ?|\[rank: ?\d+\] |\([^()]{0,80}?\bpid=\d+[^()]{0,60}\) ?"
    r"|\(raylet(?:, ip=[\d.]+)?\) ?|std(?:out|err): |\[pod/[\w.-]+/[\w.-]+\] |[a-z][\w.-]*[-_]\d+ +\| "
    r"| {0,4}\d{1,5}: |(?:localhost|\d+\.\d+\.\d+\.\d+"
    r"|(?![\w.-]*(?:error|exception|warning))(?!(?:step|iter|epoch|batch)\w*: )[a-z][\w-]*\d[\w.-]*): )"
    r"|> "
    r"|\[?\d{4}-\d\d-\d\dt\d\d:\d\d:\d\d(?:[.,]\d+)?(?:z|[+-]\d\d:?\d\d)\]? "
    r"|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec) +\d{1,2} \d\d:\d\d:\d\d [\w.-]+ [\w./@-]+(?:\[\d+\])?: "
    r"|\[ *\d+\.\d{6}\] ",
    re.ASCII,
)
#: A colour code whose escape a paste lost (`[36m(RayWorker pid=7)[0m`, `[1;31mRuntimeError[0m:`) or kept.
_COLOUR = re.compile(r"\x1b\[[\d;]*m|\[\d{1,3}(?:;\d{1,3})*m")


def _wrapper_end(shape: str) -> int:
    """Where the line a program printed starts, after its launchers' and collectors' wrappers (and the
    indentation of a paste indented as a whole, before them)."""
    indent = len(shape) - len(shape.lstrip(" \t"))
    end = indent if indent and _WRAPPER.match(shape, indent) else 0
    for _ in range(4):
        match = _WRAPPER.match(shape, end)
        if match is None or match.end() == end:
            break
        end = match.end()
    return end


def _stream_of(prefix: str) -> str:
    """The stream a line's wrappers name (`[rank3]:`, `(pid=1234, ip=…)`), without its times."""
    parts = []
    prefix = prefix.lower()
    end = len(prefix) - len(prefix.lstrip(" \t"))
    for _ in range(4):
        match = _WRAPPER.match(prefix, end)
        if match is None or match.end() == end:
            break
        if match["stream"]:
            parts.append(match["stream"].rstrip(" :|"))
        end = match.end()
    return " ".join(parts)


class _KindRule:
    """One kind's gate words and its regex. The regexes are compiled the first time a line opens
    their gate, not at import: they took ~5 ms of every start, and a healthy run's lines open
    few gates, rarely in the first second."""

    __slots__ = ("kind", "gate", "lower", "_regex", "_word", "_compiled")

    def __init__(
        self, kind: LineKind, gate: tuple[str, ...], regex: str, *, lower: bool, word: str | None = None
    ) -> None:
        self.kind, self.gate, self.lower = kind, gate, lower
        self._regex = regex
        # A quick second gate, for gate words that hide inside common words ("inf" in "INFO").
        self._word = word
        self._compiled: tuple[re.Pattern[str], re.Pattern[str] | None] | None = None

    def matches(self, text: str, low: str) -> bool:
        """Whether the line (`low`: lowered) is of this kind, once a gate word opened it."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = (re.compile(self._regex), re.compile(self._word) if self._word else None)
        regex, word = compiled
        return (word is None or word.search(low) is not None) and regex.search(low if self.lower else text) is not None


# Highest precedence first. README.md ("What a log line says") says what each kind covers and why;
# tests/test_classify_corpus.py holds them to real lines from public projects.
_KIND_RULES = (
    _KindRule(
        LineKind.OOM,
        # each alternative below holds one of these, so the gate skips nothing the regex finds;
        # plain "memory" would run the regex on every step line that reports memory use
        ("out of memory", "memoryerror", "alloc_failed", "exhausted", "memoryallocation", "out of resource",
         "oom when allocating", "defaultcpuallocator", "error_outofmemory", "error_out_of_memory", "bad_alloc",
         "errno 12", "failed to allocate", "alloc failed", "mem failed", "memory failed", "more than total",
         "enough memory", "available memory", "insufficient memory"),
        r"cuda out of memory|outofmemoryerror|\bmemoryerror\b|cublas_status_alloc_failed"
        r"|resource_?exhausted|resource exhausted|cudaerrormemoryallocation|oom when allocating|hip_error_outofmemory"
        r"|cuda_error_out_of_memory"
        # the host's allocator: C++'s `std::bad_alloc` (thrown, or its `what():`), Python's ENOMEM
        # (`OSError: [Errno 12] Cannot allocate memory`, a DataLoader's fork)
        r"|\bstd::bad_alloc\b|\[errno 12\] cannot allocate memory"
        # a device allocator's own words (Ascend's GE, TF's and CUDA's `failed to allocate memory`)
        r"|\bfailed to allocate (?:\w+ )?memory\b"
        # an allocation call that failed, named by the call (`cudaHostAlloc failed`, `bm_alloc_gmem failed`,
        # `Alloc Device Memory Failed!`), or a request larger than the device (MindSpore's
        # `alloc size : 301990400 is more than total mem size : 29464985600`); freeing is no allocation
        r"|\b(?!de)\w*alloc\w*(?: (?:device|host|gpu))?(?: mem(?:ory)?)? failed\b"
        r"|\balloc size\b.{0,40}?\bis more than total mem(?:ory)? size\b"
        # Triton: a kernel that asks for more shared memory than the GPU has, raised as an exception
        # (Inductor's autotuner only logs it, as a warning, for a candidate it then skips)
        r"|outofresources: out of resource|defaultcpuallocator: (?:can't allocate|not enough) memory"
        # an exception whose message opens by saying memory ran short (SGLang's `RuntimeError: Not enough
        # memory. Please try to increase --mem-fraction-static.`, vLLM's `ValueError: No available memory
        # for the cache blocks.`); advice that names it later in a sentence is no failure
        r"|(?:error|exception): (?:not enough|no available|insufficient) (?:\w+ )?memory\b"
        # the kernel's OOM killer also says "out of memory": that is a kill, below; TensorFlow's
        # allocator says it when a retry may still succeed ("this is not a failure"): a warning;
        # advice and forecasts name it too ("to avoid out of memory", "the out of memory issue", "running out of")
        # (Slurm's `task 4: Out Of Memory` is the cgroup's OOM killer ending a task: a kill, below)
        r"|(?<!avoid )(?<!prevent )(?<!the )(?<!running )"
        r"(?<!task \d: )(?<!task \d\d: )(?<!task \d\d\d: )(?<!\d-\d: )(?<!\d-\d\d: )\bout of memory\b"
        r"(?!: killed process)(?!.{0,300}?not a failure)",
        lower=True,
    ),
    _KindRule(
        LineKind.CUDA_ERROR,
        ("cuda", "status_", "xid", "illegal", "fallen off", "launch failure", ".cu:", "nvrm", "kernel image",
         "nvidia driver", "hip error", "nvml", "memory access fault", "amdgpu", "cublas error", "cudnn error",
         "cufft error", "curand error", "cusparse error", "cusolver error"),
        r"\bcuda error\b|cuda runtime error|device-side assert triggered|cudaerror\w*|illegal memory access"
        r"|illegal instruction (?:was )?encountered|\bcu[a-z]*_status_(?!success)[a-z]\w*|\bxid\b|fallen off the bus"
        # the driver API's status (CUDA_ERROR_ILLEGAL_ADDRESS), a glog CHECK that a CUDA call failed
        # (`Check failed: error == cudaSuccess (74 vs. 0)`), TensorRT's `Error Code 1: Cuda Runtime (…)`, AMD's HIP
        r"|\bcuda_error_(?!success\b)[a-z]\w*|check failed: .{0,80}?\b(?:cuda|cu[a-z]*_status_)success\b"
        r"|error code \d+: cuda runtime|\bhip error\b"
        # a CUDA library's error by its name (Paddle's `CUBLAS error(13).`, `CUDNN error(9)`, torch's `cuFFT error:`)
        r"|\bcu(?:blas|dnn|fft|rand|sparse|solver) error\b"
        # the driver API's and Triton's wording of a CUDA error (`CUDA driver error: invalid argument`,
        # `Triton Error [CUDA]: misaligned address`); ROCm's illegal address (`Memory access fault by GPU node-2`)
        r"|\bcuda driver error\b|\berror \[cuda\]|\bmemory access fault by gpu\b"
        # c10's C10_CUDA_CHECK_WARN: a CUDA call that failed, its error string after it
        r"|\bcuda warning: \S"
        # an exception whose class is named for CUDA (`torch.cuda.DeferredCudaCallError: CUDA call failed
        # lazily at initialization`, cupy's `CUDARuntimeError: cudaErrorNoDevice`)
        r"|\b[a-z]\w*?cuda\w*error(?:\(\w*\))?:"
        r"|unspecified launch failure|\.cu:\d+:.{0,200}?assertion `|no kernel image is available"
        r"|thcudacheck fail|exception raised from c10_cuda_check|\bcuda failure\b"
        # no usable GPU: a driver too old, missing or failing to start
        r"|cuda driver (?:version is insufficient|initialization failed)|no cuda gpus are available"
        r"|found no nvidia driver|nvidia driver on your system is too old"
        r"|failed to initialize nvml|couldn't communicate with the nvidia driver"
        # the driver's kernel log: an adapter that fails to start or stops answering (atomic: only the
        # first "nvrm: " is tried, so a line full of them stays linear)
        r"|\A(?>.*?\bnvrm: ).{0,120}?(?:\bfail|cannot|not responding)"
        # and AMD's: the GPU's page fault that amdgpu logs for a process
        r"|\bamdgpu\b.{0,60}?\bpage fault\b",
        lower=True,
    ),
    _KindRule(
        LineKind.NCCL_TIMEOUT,
        ("nccl", "collective operation", "heartbeat", "checktimeout"),
        r"collective operation timeout|heartbeat monitor timed out|\bchecktimeout\b"
        # atomic: commit to the first "nccl", so a line full of them stays linear
        r"|\bnccl error\b|\bnccl(?:system|internal|remote|invalidusage|invalidargument)error\b"
        # an NCCL call that failed as its caller words it (XLA's `NCCL operation ncclCommInitRank(…) failed:`,
        # TF's `NCCL operation ncclAllReduce failed`, Horovod's `ncclCommInitRank failed: unhandled system
        # error`), and the communicator torch aborted after a failure
        r"|\bnccl(?: operation \w+|[a-z]{4,})(?:\([^)]{0,200}\))? failed\b|\bnccl communicator was aborted\b"
        # NCCL warning of a failed transfer or connection (not of a plugin it falls back from)
        r"|nccl warn\b(?=.{0,200}?\b(?:connect(?:ion)?|accept|socket|recv|send|complet(?:e|ion|ed)|proxy|ibv_\w+|message"
        r"|request)\b)(?=.{0,200}?\b(?:failed|refused|reset|closed|error|err|unexpected)\b)"
        r"|\A(?>.*?nccl).*?(?:\b(?:timed out|timing out)\b|\btimeout\b(?!(?:\(\w+\))?\s*(?:[:=]|(?:is|set|of|to)\b))|watchdog"
        # the watchdog's last words before it ends the process
        r"|taking the entire process down)",
        lower=True,
    ),
    _KindRule(
        LineKind.NAN,
        ("nan", "inf", "non-finite", "loss scale", "invalid loss"),
        # a loss or a norm whose value is not finite, or a message saying one was seen
        # (a Keras bar that lost its line end runs into the next epoch's heading: `loss: nanEpoch 2/10`);
        # a key that names a bound, not a reading, holds inf as its start or as "none" (`best_val_loss = inf`,
        # `min_val_loss=inf`, `max_grad_norm: inf`, `clip_grad_norm: inf`): the key is read from its start
        rf"(?<!\w)(?!(?:best|min|max|lowest|clip)_)\w*?(?:loss|norm)\w*['\"\]]?\s*(?:[:=]\s*|\s+)['\"]?(?:tensor\()?(?:(?:{_NUMBER})\s*\(\s*)?"
        rf"(?:{_NONFINITE}|(?:nan|inf)(?=epoch \d))|tensor\({_NONFINITE}"
        r"|returned nan values|non-finite|number of nan iterations:\s*[1-9]"
        r"|(?:is|detected|found|encountered|got|contains?|produced|became)\s+(?:an?\s+)?(?:nan|inf(?:inite|inity)?)\b"
        r"|(?<![\w])(?<!no )(?<!\b0 )(?:nan|inf)\s+(?:detected|found|encountered|loss|values?|gradients?)\b"
        # fp16 loss scaling gave up: every step overflowed down to the smallest scale (fatal, unlike one skip)
        r"|minimum loss scale reached|loss scale already at minimum"
        # Keras's TerminateOnNaN stopping the run
        r"|invalid loss, terminating training",
        lower=True,
        word=r"(?:nan|inf)(?:(?![a-z_])|(?=epoch))|non-finite|loss scale|invalid loss",
    ),
    _KindRule(
        LineKind.NAN,
        ("nan",),
        # a row of a run's numbers, its step first, in which a value is `nan` (`76980 nan`, a logger's time
        # then `17940 0.00 nan 0.00 nan …`); matched as printed: pandas prints a missing value as `NaN`
        rf"^(?=.*\bnan\b)\s*(?:\d{{4}}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[.,]?\d*\s+)?\d+"
        rf"(?:\s+(?:{_NUMBER}|nan|inf|-{{2,}}))+\s*$",
        lower=False,
    ),
    _KindRule(
        LineKind.KILLED,
        ("kill", "exitcode", "exit code", "return code", "signal", "segmentation fault", "bus error", "core dumped",
         "aborted", "oom_reaper", "sh: ", "已杀死", "cancelled at", "bad termination", "cancelled before",
         ": out of memory", ": terminated", "sigsegv", "sigabrt", "sigbus", "sigill", "sigfpe", "unix time"),
        r"\bKilled\b|\b(?:was|been|got|be) killed\b|killed by signal|death signal"
        # a signal that ends a process, by name, or a process reported ended by one (`child terminated by
        # signal: 6`, gdb's `received signal SIGABRT`)
        r"|\bSIG(?:KILL|SEGV|ABRT|BUS|ILL|FPE)\b|\b(?:terminated|exited|interrupted)(?: abnormally)? (?:by|on|with) signal\b"
        # torchrun's agent ended by a signal it was sent (`SignalException: Process 17 got signal: 15`)
        r"|\bProcess \d+ got signal: \d+"
        # glog's failure-signal handler (TensorFlow, Paddle, caffe) heads its dump with the time it died
        r"|\*\*\* Aborted at \d+ \(unix time\)|\*\*\* Process received signal \*\*\*"
        # a negative exit code is the signal that ended the process; 128+N is the shell's way to say it
        r"|(?i:exitcode|exit code|return code)\s*[:=]?\s*(?:-\d+|13[479])\b|oom[-_ ]kill|oom_reaper|\bSignal 9\b"
        r"|\bKilling (?:subprocess|process)\b|\bkilled due to\b|OOMKilled"
        r"|[Ss]egmentation fault|\b[Bb]us error\b|\(core dumped\)"
        # the shell's report of a job that a signal ended ("已杀死" is "Killed" in a zh_CN locale)
        r"|^Aborted\b|^(?:zsh|bash|sh): (?:killed|terminated)\b|已杀死"
        # Slurm ending a job or step (time limit, preemption, scancel)
        r"|\*\*\* (?:JOB|STEP) [\d.]+ (?:ON \S+ )?CANCELLED AT\b"
        # srun's report of how a task ended (`srun: error: node: tasks 1-3: Out Of Memory`)
        r"|\btasks? [\d,-]+: (?:Out Of Memory|Killed|Terminated|Bus error)\b"
        # MPICH's box around a rank that died (its `EXIT CODE: 9` is the signal)
        r"|BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
        # Ray: the task's worker died before it ran
        r"|\bwas cancelled before it started running\b",
        lower=False,
    ),
    _KindRule(
        LineKind.TRACEBACK,
        ("traceback", "exception", "error", "interrupt", "terminate called", "failed", "fatal python", "process ",
         "call stacks", "stack trace for", "exit code", "return code"),
        # (asyncio heads the traceback of a callback's exception with `Exception in callback X`)
        r"Traceback \(most recent call last\)|Exception in (?:thread|callback)\b|\bterminate called (?:after|without)\b"
        r"|Fatal Python error|^\s*During handling of the above exception|^\s*The above exception was the direct cause"
        # what heads a traceback: multiprocessing's `Process EngineCore:`, TF's `Original stack trace for 'X':`,
        # Paddle's `C++ Call Stacks (…):` and `Error Message Summary:`
        rf"|^{_STREAM_PREFIX}Process [\w-]+:\s*$|^Original stack trace for\b|(?:^|\] )(?:C\+\+ Call Stacks|Error Message Summary:)"
        # a launcher's word that a worker exited with an error (a signal is `killed`, above): torchrun's agent,
        # DeepSpeed's launch.py (`[…] exits with return code = 1`), Slurm's `Exited with exit code 1`
        r"|\bfailed \(exitcode: [1-9]\d*\)|\bexit(?:s|ed)? with (?:return|exit) code\s*[:=]?\s*[1-9]\d*\b"
        # a process's own word that it died, before its traceback (vLLM's `EngineCore encountered a fatal error.`)
        r"|\bencountered a fatal error\b"
        # an exception announced where it was raised, its traceback to follow (Ray's `Exception raised in
        # creation task: The actor died …`, `Exception occurred while running X's function generate: …`)
        rf"|^{_STREAM_PREFIX}(?:Exception|Error) (?:raised |occurred |)(?:in|while|during|when)\b[^:\n]{{0,60}}:"
        # Hydra's announcement of the traceback it prints next (`Error executing job with overrides: […]`)
        r"|^Error executing job\b"
        # an error-level record whose short message says what failed, the traceback it logs to follow
        # (vLLM's `ERROR 06-22 11:29:08 [async_llm.py:704] AsyncLLM output_handler failed.`, `EngineCore failed to start.`)
        r"|\bERROR\b[^\]]{0,80}\] (?:[\w.:-]+ ){0,4}failed(?: to \w+)?\.\s*$"
        # a Python stack frame written as an error-level log record: part of the traceback it logs
        r"|\bERROR\b[^\"]{0,120}?\]\s+File \"[^\"]+\", line \d+, in \S"
        # an exception's last line: `ValueError: ...`, `[rank0]: torch.OutOfMemoryError: ...`, after a syslog
        # time, or TF1's `ResourceExhaustedError (see above for traceback): ...`
        rf"|^[\s>]*(?:[A-Z][a-z]{{2}} +\d+ [\d:]+ +)?{_STREAM_PREFIX}(?:(?:ERROR|CRITICAL) [^\]]{{0,60}}\] )?"
        r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failed)(?:\([A-Za-z_]\w*\))?"
        r"(?: \(see above for traceback\))?(?::|\s*$)",
        lower=False,
    ),
    _KindRule(
        LineKind.WARNING,
        ("warn", "[w", "w0", "w1", "overflow", ": w ", "were not", "recommended minimum"),  # w0, w1: glog's `W1023 10:15:43.123 ...`
        # TensorFlow's C++ log writes `<time>: W path.cc:12] ...`
        r"Warning\b|\bwarning:|WARN(?:ING)?\b|<warn>|\[W[\d ]|^W[01]\d{3} \d\d:\d\d:\d\d|\d: W [\w/.-]+:\d+\]"
        # fp16 loss scaling skipped a step and halved the scale: routine early in training
        r"|OVERFLOW!|\b[Gg]rad(?:ient)? overflow\b|\bOverflow detected\b"
        # what transformers and accelerate log at warning level, printed without the level
        r"|\bwere not used when initializing\b|\bwere not initialized from the model checkpoint\b"
        r"|\bis below the recommended minimum\b",
        lower=False,
    ),
)
_KIND_RANK = {rule.kind: rank for rank, rule in enumerate(_KIND_RULES)}
# Every rule's gate words, for one early exit on the common line that no rule can match.
# "inf" has its own test: it is mostly the start of "INFO", which most logging lines hold.
# Shorter words that hold several gates ("fail" is in "alloc_failed" and "launch failure") make the
# list shorter: each word costs one `in` test on every line.
_GATE_COVER = ("fail", "error", "kill", "warn", "out of", "exit", "oom", "stack", "dump", "fatal", "terminate")


def _gate_words() -> tuple[str, ...]:
    words = {word for rule in _KIND_RULES for word in rule.gate if word != "inf"} | set(_GATE_COVER)
    return tuple(sorted(word for word in words if not any(other != word and other in word for other in words)))


_GATE_WORDS = _gate_words()
_GATE_SHAPES = tuple(dict.fromkeys(word.translate(str.maketrans("123456789", "000000000")) for word in _GATE_WORDS))

# -- metrics -------------------------------------------------------------------
#
# Read by structure, never by a pattern per framework. A metric is a key and its value (`loss: 2.31`,
# `lr=3e-4`, `'grad_norm': '0.27'`, `loss 2.31`, `Loss：1.98`, `lr=[5e-05]`), a number and its unit
# (`14.2k tok/s`, `1.52s/it`, `454ms/step`, `405.65/s`), a unit used as a key (`tok/sec: 529,882`,
# `s/batch 0.63`, `train_speed(iter/s): 0.056`), an `N/M` pair after a step key, in brackets or before a
# bar. Keys are found by `str.find` (a literal scan, far cheaper than a regex search) and their
# values read at that spot; a line's several candidates for one metric are decided by the rules
# README.md lists ("Which of two rates", "Read by structure, not by format").

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
# A value written after a key or a unit used as one: the `: 14,200` of `tps: 14,200`, the `)=491.55`
# of `tgs (tokens/gpu/second)=491.55`, the `": "8.996"` of a JSON dict, the `：1.98` of `Loss：1.98`.
_VALUE_AFTER = re.compile(rf"['\")]{{0,2}}\s*(?:[:=：]\s*|\s+)['\"]?{_VALUE}")
_KEY_FOLLOWS = re.compile(r"['\")]{0,2}\s*[:=：]")
# What may follow a unit whose value comes before it (`14.2k tok/s |`), not a key's (`tok/s: 14,200`).
_UNIT_ENDS = frozenset(("", " ", "|", ",", ")", "]", ";"))
# A key's value, non-finite ones included (a `nan` loss is read, so it is not taken from another key):
# `: 2.31`, `=3e-4`, ` 2.31`, `': '8.996'`, `=[5e-05]`, `: tensor(2.31`, ` = 4.71`, ` is 2.3`, torchtune's
# `Loss: 2.345:`, a key in brackets (`[Loss] 2.5`). The number is taken whole (atomic), so neither a
# clock's `12:30` nor a code location's `loss_scaler.py:190:` is a value, nor `2.345:` a 2.
_KEYED_VALUE = re.compile(
    rf"['\")\]]?\s*(?:[:=：]\s*|\s+(?:is\s+)?)['\"]?(?:\[|tensor\()?\s*(?P<v>(?>{_NUMBER}|{_NONFINITE}))(?!\d|:\S)"
)
# The characters of a key (`train/loss`, `loss_cls`, `grad-norm`), and of a word (for boundaries).
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_./-")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# Candidates looked at per metric: real lines state a metric once; a line built of
# repeated keys must not cost more than a few lookups.
_MAX_TRIES = 8

# -- rates: a number before its unit, or a unit used as a key with its value after it ---------------
# Per-device rates (`Tokens/s/device:`, `tokens/gpu/sec`, `tokens_per_second_per_gpu:`) are
# the rate the log gives: the operator's baseline is then per device too.
_TOKEN_UNITS = (
    ("tok", re.compile(r"tok(?:en)?s?\s*/\s*(?:(?:gpu|device)\s*/\s*)?s(?:ec(?:ond)?)?\b(?:\s*/\s*(?:gpu|device)\b)?")),
    ("tok", re.compile(r"tokens_per_sec(?:ond)?(?:_per_(?:gpu|device))?\b|tokens (?:per gpu )?per second\b")),
    ("tps", re.compile(r"\btps\b")),
    ("tgs", re.compile(r"\btgs\b")),  # tokens per GPU per second
    ("wps", re.compile(r"\bwps\b")),  # fairseq: words (tokens) per second
    ("words", re.compile(r"\bwords/s(?:ec)?\b")),
)
_SAMPLE_UNITS = (
    ("currsamplespersec", re.compile(r"currsamplespersec")),  # the current rate, before the running average
    ("samplespersec", re.compile(r"samplespersec")),
    ("sample", re.compile(r"samples?\s*/\s*s(?:ec(?:ond)?)?\b(?!\s*/)")),
    ("sample", re.compile(r"samples_per_sec(?:ond)?\b|samples per second\b")),
    # a count of samples by its noun, over a second however it is spelled (`/s`, `/sec`, `/second`):
    # `1234.56 images/second`, mlx-examples' `6034.87 im/s`
    ("example", re.compile(r"examples?/s(?:ec(?:ond)?)?\b")),
    ("im", re.compile(r"\b(?:images?|imgs?|im)/s(?:ec(?:ond)?)?\b")),
    ("seq", re.compile(r"\bseq(?:uence)?s?/s(?:ec(?:ond)?)?\b")),
    ("record", re.compile(r"records?/s(?:ec(?:ond)?)?\b")),
    # the same nouns over a second spelled as a key (`images_per_sec`, `examples_per_second`,
    # `sequences_per_second`), as `samples_per_sec` is
    ("_per_sec", re.compile(r"(?:examples?|images?|imgs?|seq(?:uence)?s?|records?)_per_sec(?:ond)?\b")),
    ("ips", re.compile(r"\bips\b")),  # images (instances) per second: Paddle's `ips: 225.2 images/sec`
    ("imps", re.compile(r"\bimps\b")),
    ("ex/s", re.compile(r"(?<![a-z])ex/s\b")),  # a bar counting examples (HF datasets' `150.2ex/s`)
)
# A rate whose key names the prompt (prefill, input) side of a serving engine: the generation rate
# is the one that counts the work done.
_PROMPT_SIDE = ("prompt", "prefill", "input")
# Seconds per sample, the inverse of a sample rate: HF datasets' `6.32s/ examples`, a bar's `1.50s/ex`,
# old Keras's `83us/sample`.
_SECONDS_PER_SAMPLE = re.compile(
    rf"(?P<v>{_NUMBER}) ?(?P<u>us|ms|s|secs?|seconds?)/ ?(?:examples?|ex|samples?|imgs?|images?|seqs?|sequences?)(?![a-z])"
)
_PER_SAMPLE_GATES = ("s/ ex", "s/ex", "s/sampl", "s/im", "s/seq", "c/sampl", "c/im", "c/ex")
# A rate of steps, as the bar prints it or as a key: `18.56it/s`, `ups=0.2`, `global_step/sec: 0.69`,
# `steps_per_second': 1.76`, `Steps/Sec 3.2`, `train_speed(iter/s): 0.056`.
# (gate, unit, whether the value is a time per step)
_STEP_RATES = (
    ("it/s", re.compile(r"(?<![a-z])it/s\b"), False),
    ("s/it", re.compile(r"(?<![a-z])(?:(?P<ms>m)?s|sec)/it\b|s / it\b"), True),
    # a bar counting batches: `3.45ba/s`, `9.99batch/s`
    ("ba", re.compile(r"(?<![a-z])ba/s\b|(?<![a-z])batch(?:es)?/s(?:ec)?\b"), False),
)
_STEP_RATE_KEYS = ("steps_per_second", "step_per_second", "steps_per_sec", "step_per_sec", "global_step/sec",
                   "steps/sec", "steps/s", "step/sec", "step/s", "it/sec", "iter/sec", "iters/sec", "iter/s", "iters/s", "ups")
# Time per step: a unit (`454ms/step`, `17.053 sec/step`, `0.63 s/batch`, `s/ba`) or a key whose value
# is one step's time, explicit (`step_avg:258.57ms`, `elapsed time per iteration (ms): 4225.8`,
# `per-step time 0.813s`, `train_step_timing in s: 0.031`) or plain (`time: 0.593`, `iter_time: 1.599s`,
# `batch_cost: 0.28 s`, `dt: 989.44ms`): of the plain ones the longest is the step, the others its parts.
_TIME_PER_UNIT = re.compile(rf"(?P<v>{_NUMBER}) *(?P<u>us|ms|s|secs?|seconds?)/(?:step|batch|ba|iter(?:ation)?)\b")
_UNIT_AS_KEY = re.compile(r"(?<![a-z])(?P<u>ms|s|sec)/(?:batch|step|iter)\b")  # `s/batch 0.63`, `ms/batch 45.67`
_EXPLICIT_TIME_KEYS = ("step_avg", "time per iteration", "time per step", "per-step time", "step_time",
                       "step time", "train_step_timing", "time/step", "time/iter", "step_timing", "time_per_step",
                       "time_per_iteration", "per_step_time")
_PLAIN_TIME_KEYS = ("time", "iter_time", "iter time", "iteration time", "iteration_time", "batch_time",
                    "batch time", "batch (t)", "batch_cost", "avg_batch_cost", "dt", "train_time", "seconds")
# The time keys' gate: a line holds one of these where it states a time per step.
_TIME_GATE = ("tim", "dt", "cost", "step_avg", "seconds", "/step", "/ba", "/iter", "(t)")
_TIME_VALUE = re.compile(
    rf"(?P<k>\s*\((?P<ku>ms|us|s|sec)\))?(?: in (?P<ki>ms|s))?['\"]?\s*(?:[:=：]\s*|\s+)['\"]?"
    rf"(?P<v>(?>{_NUMBER}|[-+]?(?:nan|inf(?:inity)?)))(?!\d|:\S) *(?P<u>ms|us|sec|s)?(?![a-z])"
)
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0}
# A `|`-separated field that is a duration alone (`| 8060.78ms |`): the time of the step the line counts.
_DURATION_FIELD = re.compile(rf"\| (?P<v>\d+(?:\.\d+)?) ?(?P<u>ms) \|")
# Samples per second after a step's time, unnamed: timm `Time: 0.316s,  405.65/s`, open_clip `37194/s`.
_BARE_RATE = re.compile(rf"(?<![\w./])(?P<v>\d[\d,]*(?:\.\d+)?)/s\b")

# -- loss, lr, grad norm ----------------------------------------------------------------------------
# The parts of a loss key that make it the training loss (`train_loss`, `lm loss`, `loss/train/total`,
# `reduced_train_loss`, `avr_loss`) or a validation one (`val_loss`, `ValLoss`, `eval_loss`); any other
# part names a component (`loss_cls`, `nll_loss`, `box_loss`).
_TRAIN_LOSS_WORDS = frozenset(("train", "training", "lm", "total", "avg", "avr", "average", "reduced", "mean",
                               "overall", "step", "value", "running"))
_EVAL_LOSS_WORDS = frozenset(("val", "valid", "validation", "eval", "test", "dev"))
_KEY_PARTS = re.compile(r"[_./-]+")
_QUALIFIERS = tuple(_TRAIN_LOSS_WORDS | _EVAL_LOSS_WORDS)
_LR_KEYS = frozenset(("lr", "train_lr", "learning_rate", "train_learning_rate", "cur_lr", "current_lr"))
_LR_GROUP = re.compile(r"lr_?\d+$")  # ESPnet's `lr_0`: the first parameter group's
_GRAD_NORM_KEYS = frozenset(("grad_norm", "gradnorm", "grad-norm", "gnorm", "grad_norm_total", "total_grad_norm",
                             "gradient_norm", "global_norm"))

# -- steps -------------------------------------------------------------------------------------------
# Keys whose integer value is the step, the first of them on the line that gives one wins:
# `global_step: 6200`, `num_updates 574`, `step 7`, `Step=340`, `iteration 122/ 250000`, `iter: 190/1051`,
# `iters: 100`, `Batch 16/29316`, `steps: 20` (with its colon: `Total optimization steps = 782` is a plan).
# A float (`global_step=208.0`) or a share (`steps:  38%`) is no step; an epoch is never one
# (`Epoch 1/10`, `epoch: [1/50]`). clu's `] [1000] steps_per_second=…` (or `] [10] train/loss=…`) opens its fields with the step.
_STEP_KEYS = ("global_step", "num_updates", "step", "iteration", "iter", "iters", "batch", "steps")
_STEP_VALUE = re.compile(
    r"['\")]?\s*(?:[:=：]\s*|\s+)?['\"]?(?P<s>\d{1,3}(?:,\d{3})+|\d+)(?![\d.%])"
    r"(?:\s*/\s*(?P<t>\d{1,3}(?:,\d{3})+|\d+)(?![\d.]))?"
)
# `global_step/max_steps: '5/3766'`: a pair of keys and a pair of values.
_PAIR_KEY_VALUE = re.compile(r"/[a-z_]+['\"]?\s*[:=]\s*['\"]?(?P<s>\d+)/(?P<t>\d+)\b")
# A bracketed counter `[ 40/5000000]`, `[1][640/1730]`, `[  50/10009 (  0%)]`, both sides padded
# (MindFormers' `step:[%5d/%5d]`: `step:[   10/ 1000]`): the last one is the step (of the epoch, or
# the run); one keyed by `epoch` is the epoch.
_BRACKET = re.compile(r"\[\s*(?P<s>\d+)\s*/\s*(?P<t>\d+)\s*(?:\]|\()")
#: torch's logs name a compiled frame "[frame/recompile]" right after their glog header's `file.py:LINE]`:
#: `convert_frame.py:964] [0/8] torch._dynamo hit config.recompile_limit` is no step 0 of 8.
_COMPILE_ID_BEFORE = re.compile(r"torch/\S*\.py:\d+\]\s*$")
# A bar's `16/782 [` (tqdm, Keras), Keras's `1079/1079 - 21s` at the start of a line, its `13440/Unknown - 2s`
# (Keras 3's `12/Unknown 3s`) where it does not know an epoch's length, tqdm's `0it [`.
_PROGRESS_BAR = re.compile(
    r"(?<![\d.])(?P<s>\d+)/(?P<t>\d+)\s*(?:\[|━)|^\s*(?P<ks>\d+)/(?P<kt>\d+) - \d|(?<![\w./])(?P<us>\d+)/[Uu]nknown(?: -)? \d|(?<![\w.])(?P<is>\d+)it \["
)
# A tqdm bar's own rate in whatever unit it counts (`unit="step"`, `unit="img"`): `[00:17<00:00,
# 3.02step/s]`, `[00:03, 1.50s/img]`, its elapsed (and remaining) time before it; tqdm writes
# `{rate}{unit}/s`, or `{1/rate}s/{unit}` when a unit takes more than a second.
_BAR_RATE = re.compile(
    r"\[(?:\d+:)?\d+:\d+(?:<(?:(?:\d+:)?\d+:\d+|\?))?, *(?P<v>\d+(?:\.\d+)?) ?(?P<x>[kmg](?=[a-z]+/s\b))?"
    r"(?:(?P<i>s)/(?P<iu>[a-z]+)|(?P<u>[a-z]+)/s)\b"
)
#: What a bar's unit counts: the rate it reads as (steps, samples or tokens a second); any other
#: unit (`epoch`, `B`, `file`) is no rate of the run.
_BAR_UNITS = {
    **dict.fromkeys(("it", "its", "step", "steps", "ba", "batch", "batches", "iter", "iters", "iteration",
                     "iterations", "update", "updates"), "it_per_s"),
    **dict.fromkeys(("ex", "example", "examples", "sample", "samples", "img", "imgs", "image", "images", "seq",
                     "seqs", "sequence", "sequences", "sentence", "sentences", "record", "records"), "samples_per_s"),
    **dict.fromkeys(("tok", "toks", "token", "tokens"), "tokens_per_s"),
}
# A bar's count right after the bar (Lightning's RichProgressBar: `Epoch 3/99 ━━━━ 1200/2500 0:01:00 •`;
# YOLOv5's `{l_bar}{bar:10}| {n_fmt}/{total_fmt} {elapsed}`: `100%|██████████| 1849/1849 13:15`).
_PAIR_AFTER_BAR = re.compile(r"(?:━|(?<=[█▏▎▍▌▋▊▉ ])\|) +(?P<s>\d+)/(?:(?P<t>\d+)|--) ")
_FIELDS_STEP = re.compile(r"\] \[(?P<s>\d+)\] [a-z_][a-z_/]*[=:]")
# A step key written into its number (`iteration100`), its number ending the word.
_GLUED_STEP_KEYS = frozenset(("iteration", "iter", "step"))
_GLUED_STEP = re.compile(r"(?P<s>\d+)(?![\w.])")
# An `N / M` pair right after an epoch's number is the step within the epoch and its total
# (fairseq's `epoch 001:   2000 / 8223 loss=…`), as the last of `[3/300][370/1251]` is.
_EPOCH_PAIR = re.compile(r"epoch:?\s*\d+\s*[:|,]?\s+(?P<s>\d+)\s*/\s*(?P<t>\d+)(?![\d./])")
# A line that starts with its step as a column: `510 | loss 5.23 | …` (llama2.c).
_LEADING_STEP = re.compile(r"\s*(?P<s>\d+) \| ")
_RECORD_LEADING_STEP = re.compile(r"(?:[\]>-] +|(?<=[a-z_]):|(?<=info|warn|ning|rror|ebug) +)(?P<s>\d+) \| ")

_INT_METRICS = frozenset({"step", "total_steps"})
_RATE_NAMES = frozenset({"tokens_per_s", "samples_per_s", "it_per_s"})

# -- gates, by a line's shape ------------------------------------------------------------------------
#
# Which rules can apply to a line depends on the words it holds, never on its digits, so it is worked
# out once per shape (the line with every digit made 0; a training log prints a few shapes over and
# over) and kept: a bounded dict from shape to the bits of the gates that open on it.
_SHAPE = bytes.maketrans(b"123456789", b"000000000")
_SHAPE_TEXT = str.maketrans("123456789", "000000000")
_MAX_SHAPES = 4096
_SHAPES: dict[bytes, tuple[int, int, tuple[str, ...]]] = {}
(_G_KIND, _G_TOKENS, _G_SAMPLES, _G_IT_RATE, _G_STEP_RATE, _G_TIMED, _G_LOSS, _G_LR, _G_LEARNING, _G_NORM, _G_MFU,
 _G_FIELDS, _G_BRACKET, _G_BAR, _G_LEADING, _G_STEP_TIME, _G_REDRAWS, _G_COLOUR, _G_BAR_RATE) = (1 << n for n in range(19))


def _shape_gates(shape: str) -> tuple[int, tuple[str, ...]]:
    """The gates that open on a line of this shape, and the step keys it holds."""
    bits = 0
    if _may_have_kind(shape):
        bits |= _G_KIND
    if "tok" in shape or "tps" in shape or "wps" in shape or "tgs" in shape or "words/s" in shape:
        bits |= _G_TOKENS
    if any(word in shape for word in ("sampl", "exampl", "im", "seq", "record", "ps", "s/ ex", "ex/s", "s/ex")):
        bits |= _G_SAMPLES
    if "it/s" in shape or "s/it" in shape or "s / it" in shape or "sec/it" in shape or "ba/s" in shape \
            or "batch/s" in shape or "batches/s" in shape:
        bits |= _G_IT_RATE
    if any(word in shape for word in ("ups", "per_sec", "step/s", "steps/s", "iter/s", "iters/s", "/sec")):
        bits |= _G_STEP_RATE
    if _timed(shape):
        bits |= _G_TIMED
    for gate, word in ((_G_LOSS, "loss"), (_G_LR, "lr"), (_G_LEARNING, "learning"), (_G_NORM, "norm"),
                       (_G_MFU, "mfu"), (_G_FIELDS, "] [")):
        if word in shape:
            bits |= gate
    if "[" in shape and "/" in shape:
        bits |= _G_BRACKET
    if "/" in shape or "it [" in shape:
        bits |= _G_BAR
        if shape.count("[") > 1:
            bits |= _G_REDRAWS
    if "| " in shape:
        bits |= _G_LEADING
    if "tim" in shape or "ms |" in shape:
        bits |= _G_STEP_TIME
    if "0, " in shape and "]" in shape and ("/s" in shape or "s/" in shape):
        bits |= _G_BAR_RATE
    return bits, tuple(key for key in _STEP_KEYS if key in shape)


def _gates(low: str) -> tuple[int, int, tuple[str, ...]]:
    key = low.encode("utf-8", "surrogatepass").translate(_SHAPE)
    gates = _SHAPES.get(key)
    if gates is None:
        if len(_SHAPES) >= _MAX_SHAPES:
            _SHAPES.clear()
        shape = low.translate(_SHAPE_TEXT)
        if _COLOUR.search(shape):
            gates = _SHAPES[key] = (0, _G_COLOUR, ())
        else:
            cut = _wrapper_end(shape)
            gates = _SHAPES[key] = (cut, *_shape_gates(shape[cut:]))
    return gates


def classify_line(text: str, patterns: MetricPatterns = NO_PATTERNS) -> LineInfo:
    """The kind of one sanitized log line and the metrics it states, read after the wrappers that
    launchers and log collectors put before it (`[rank3]:`, `(pid=1234)`, a docker time).

    Non-finite values (a NaN loss) are not returned as metrics: the line's kind
    (`nan`) says it, and the series stay comparable; a non-finite loss is kept apart
    (LineInfo.nonfinite_loss), for the figure that shows the loss now.
    """
    if not text.isascii() and "\xa0" in text:
        text = text.replace("\xa0", " ")  # a no-break space, as a page copied from a browser has it
    low = text.lower()
    gates = _SHAPES.get(low.encode("utf-8", "surrogatepass").translate(_SHAPE))
    cut, bits, step_keys = gates if gates is not None else _gates(low)
    if bits & _G_COLOUR:
        text, low, (cut, bits, step_keys) = _without_colour(text)
    whole = text
    if cut:
        text, low = text[cut:], low[cut:]
    kind = _kind(text, low) if bits & _G_KIND else LineKind.NORMAL
    metrics = _metrics(text, low, bits, step_keys)
    if patterns:
        metrics, nonfinite = _apply_patterns(whole, patterns, metrics)
        if nonfinite and _KIND_RANK.get(kind, len(_KIND_RANK)) > _KIND_RANK[LineKind.NAN]:
            kind = LineKind.NAN
    if metrics is None:
        return _NORMAL if kind is LineKind.NORMAL else LineInfo(kind)
    return LineInfo(kind, **metrics)


def _unwrapped(text: str) -> tuple[str, int]:
    """The line classify_line reads (its lost colour codes dropped) and where the program's line
    starts in it, after its wrappers."""
    if not text.isascii() and "\xa0" in text:
        text = text.replace("\xa0", " ")
    low = text.lower()
    gates = _SHAPES.get(low.encode("utf-8", "surrogatepass").translate(_SHAPE))
    cut, bits, _ = gates if gates is not None else _gates(low)
    if bits & _G_COLOUR:
        text, _, (cut, _, _) = _without_colour(text)
    return text, cut


def _without_colour(text: str) -> tuple[str, str, tuple[int, int, tuple[str, ...]]]:
    """The line with its colour codes dropped, its lower case and its gates. What remains is read as it
    is, not tested for colour again: a code cut by another (`[3[0m1m`) leaves one that would be."""
    text = _COLOUR.sub("", text)
    low = text.lower()
    shape = low.translate(_SHAPE_TEXT)
    cut = _wrapper_end(shape)
    return text, low, (cut, *_shape_gates(shape[cut:]))


def _kind(text: str, low: str) -> LineKind:
    if text[:1] in (" ", "\t"):  # a line's indentation does not change what it says (a paste indented whole)
        text, low = text.lstrip(" \t"), low.lstrip(" \t")
    kind = _rules_kind(text, low)
    if kind is LineKind.NORMAL and text[:1] in _HEADER_STARTS:
        return _record_kind(text)
    return kind


def _rules_kind(text: str, low: str) -> LineKind:
    for rule in _KIND_RULES:
        for word in rule.gate:
            if word in low:
                if rule.matches(text, low):
                    return rule.kind
                break
    return LineKind.NORMAL


def _record_kind(text: str) -> LineKind:
    """The kind of a log record's message, read as a line of its own: a logger's header hides what
    starts the line (`2024-01-01 12:00:00,123 - ERROR - RuntimeError: DataLoader worker … exited
    unexpectedly`, `ERROR:root:Aborted`, rich's `[10/12/24 10:00:00] ERROR    RuntimeError: …`,
    transformers' `[ERROR|trainer.py:2128] 2024-01-01 12:00:00,123 >> …`, a tag before the header as
    torchtitan's `[titan] `). Records at INFO or DEBUG level are left as they read."""
    header = _record_header(text)
    if header is None or _level(text, header) in _QUIET_LEVELS:
        return LineKind.NORMAL
    rest = text[header.end():]
    if header["w"] and rest.startswith(":"):  # Python's `ERROR:root:…`
        cuts = [rest.find(":", 1)]
    else:  # the header's other fields end at a `] `, ` - `, ` | ` or ` >> ` in its first 80 characters
        cuts = sorted(at + 1 for sep in ("] ", " - ", " | ", ">> ") for at in _find_all(rest, sep, 80))
        cuts.insert(0, -1)  # or the level right after the time
    for cut in cuts[:7]:
        message = rest[cut + 1:].lstrip()
        for message in (message, _LEVEL_HEAD.sub("", message, count=1)):
            kind = _rules_kind(message, message.lower()) if message else LineKind.NORMAL
            if kind is not LineKind.NORMAL:
                return kind
    return LineKind.NORMAL


def _record_header(text: str) -> re.Match | None:
    """The log header a line starts with, after a tag before it (torchtitan's `[titan] `), or None."""
    header = _HEADER.match(text)
    if header is None and text[:1] == "[":
        header = _HEADER.match(text, text.find("] ", 0, 24) + 2)
    return header


def _find_all(text: str, part: str, reach: int) -> list[int]:
    found: list[int] = []
    at = text.find(part, 0, reach)
    while at >= 0 and len(found) < 6:
        found.append(at)
        at = text.find(part, at + 1, reach)
    return found


def _may_have_kind(shape: str) -> bool:
    """Whether any kind rule's gate opens on a line of this shape (its digits made 0: glog's `w1023`
    gate is looked for as `w0`); False for almost every line of a healthy run."""
    for word in _GATE_SHAPES:
        if word in shape:
            return True
    return shape.count("inf") > shape.count("info")


def _metrics(text: str, low: str, bits: int, step_keys: tuple[str, ...]) -> dict | None:
    if bits & _G_REDRAWS:
        cut = _last_redraw(text)
        if cut:  # the bar's redraws joined on one line (a paste lost their `\r`): the last is the bar now
            text, low = text[cut:], low[cut:]
    found: dict = {}
    if bits & _G_TOKENS:
        tokens = _tokens_per_s(low)
        if tokens is not None:
            found["tokens_per_s"] = tokens
    if bits & _G_SAMPLES:
        samples = _samples_per_s(low)
        if samples is not None:
            found["samples_per_s"] = samples
    if bits & (_G_IT_RATE | _G_STEP_RATE | _G_TIMED):
        iterations = _iterations_per_s(low, bits)
        if iterations is not None:
            found["it_per_s"] = iterations
            _bare_samples(low, found)
    if bits & _G_BAR_RATE and not found.keys() & _RATE_NAMES:
        _bar_rate(low, found)
    if bits & _G_LOSS:
        loss = _loss(low)
        if loss is not None and math.isfinite(loss):
            found["loss"] = loss
        elif loss is not None:
            found["nonfinite_loss"] = loss
    if bits & _G_LR:
        lr = _lr(low)
        if lr is not None:
            found["lr"] = lr
    if bits & _G_LEARNING and "lr" not in found:
        lr = _keyed(low, "learning_rate", ("train_",))
        if lr is None:
            lr = _keyed(low, "learning rate")
        if lr is not None:
            found["lr"] = lr
    if bits & _G_NORM:
        grad_norm = _grad_norm(low)
        if grad_norm is not None:
            found["grad_norm"] = grad_norm
    if bits & _G_MFU:
        mfu = _mfu(low)
        if mfu is not None and mfu >= 0:  # nanoGPT prints -100% before it has measured
            found["mfu"] = mfu
    step = _step(text, low, "loss" in found, bits, step_keys)
    if step is not None:
        found["step"] = step[0]
        if step[1] is not None:
            found["total_steps"] = step[1]
        if "it_per_s" not in found and bits & _G_STEP_TIME:
            seconds = _plain_step_time(low, timed_by_step=True)
            if seconds and math.isfinite(seconds):
                found["it_per_s"] = 1.0 / seconds
                _bare_samples(low, found)
    nonfinite_loss = found.pop("nonfinite_loss", None)
    total = sum(found.values())
    if total - total != 0:  # inf: `1e999 tok/s`, a number too large to be a reading
        found = {name: value for name, value in found.items() if math.isfinite(value)}
    if nonfinite_loss is not None:
        found["nonfinite_loss"] = nonfinite_loss
    return found or None


def _last_redraw(text: str) -> int:
    """Where the last of several progress bars on one line starts, or 0: after the `]` that closes
    the tqdm bar before it, its description kept (`Training: 0it [00:00, ?it/s]Epoch 1:  10%|█ |
    10/100 [00:01<00:09, 9.51it/s]`), or at its count where the count opens it (Keras' `61/82 [==>..]
    - loss: 0.6016 62/82 [===>..] - loss: 0.6010`)."""
    last = None
    for last in islice(_PROGRESS_BAR.finditer(text), 1, 64):
        pass
    if last is None:
        return 0
    cut = text.rfind("]", 0, last.start()) + 1
    between = text[cut : last.start()]
    return cut if "|" in between or between.rstrip().endswith(":") else last.start()


def _bar_rate(low: str, found: dict) -> None:
    """A tqdm bar's own rate in a unit the rate readers do not name (`3.02step/s`, `1.50s/img`),
    read as the rate of what the unit counts."""
    match = _BAR_RATE.search(low)
    if match is None:
        return
    name = _BAR_UNITS.get(match["u"] or match["iu"])
    value = float(match["v"]) * (_SUFFIX[match["x"]] if match["x"] else 1.0)
    if name is not None and value > 0:
        found[name] = 1.0 / value if match["i"] else value


def _bare_samples(low: str, found: dict) -> None:
    """A rate with no unit named after a step's time is its samples a second (timm, open_clip)."""
    if "samples_per_s" not in found and "/s" in low and ("tim" in low or "(t)" in low):
        bare = _BARE_RATE.search(low)
        if bare:
            found["samples_per_s"] = _number(bare["v"])


# -- rates --------------------------------------------------------------------------------------------


def _tokens_per_s(low: str) -> float | None:
    at = low.find("tok/s")
    if at > 0 and low[at + 5 : at + 6] in _UNIT_ENDS:  # the common `13.7k tok/s |`, without a regex
        plain = _plain_number_at_end(low[max(0, at - _VALUE_REACH - 1) : at], whole_line=at <= _VALUE_REACH)
        if plain is not None and ("put" not in low and "prompt" not in low and "prefill" not in low
                                  or not _prompt_side(low, at)):
            return plain
    return _rate(_TOKEN_UNITS, low)


def _samples_per_s(low: str) -> float | None:
    if any(gate in low for gate in _PER_SAMPLE_GATES):
        match = _SECONDS_PER_SAMPLE.search(low)
        if match:
            value = _number(match["v"]) * _TIME_UNITS[match["u"]]
            return 1.0 / value if value > 0 else None
    return _rate(_SAMPLE_UNITS, low)


def _rate(units: Sequence[tuple[str, re.Pattern]], low: str) -> float | None:
    """The first rate stated with one of `units` (in their order): `14.2k tok/s`, `tokens/s: 14,200`,
    `tps: 14,200`; not one whose key names a serving engine's prompt side."""
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
            if value is not None and not _prompt_side(low, start) and not _eval_side(low, start):
                return value
    return None


def _eval_side(low: str, at: int) -> bool:
    """Whether the rate whose unit starts at `at` is keyed as an evaluation's, by the qualifier its key
    opens with (HF Trainer's `'eval_samples_per_second': 95.2`, `eval_steps_per_second`, `val/tokens_per_sec`):
    a pass over the validation set, faster than a training step and far apart from it, is no rate of the run."""
    start = at
    while start and low[start - 1] in _KEY_CHARS:
        start -= 1
    if start == at:
        return False
    return low[start:at].partition("_")[0].partition("/")[0] in _EVAL_LOSS_WORDS


def _prompt_side(low: str, at: int) -> bool:
    """Whether the key just before `at` names a serving engine's prompt side (`Avg prompt throughput:
    871.4 tokens/s`, `input throughput (token/s): 46.36`)."""
    key = low[max(0, at - 32) : at]
    cut = max(key.rfind(","), key.rfind("|"))
    key = key[cut + 1 :]
    return any(side in key for side in _PROMPT_SIDE)


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


def _iterations_per_s(low: str, bits: int) -> float | None:
    """Steps a second: the bar's own rate (`it/s`, `s/it`), then a rate keyed as one (`ups`,
    `global_step/sec`), then an explicit time per step (`454ms/step`, `step_avg`, `time per
    iteration (ms)`), then the longest plain time of a step (`time:`, `iter_time:`, `batch_cost:`)."""
    for gate, unit, inverse in _STEP_RATES if bits & _G_IT_RATE else ():
        if gate in low or (gate == "s/it" and ("s / it" in low or "sec/it" in low)):
            for match in islice(unit.finditer(low), _MAX_TRIES):
                value = _value_before(low, match.start())
                if value:
                    if not inverse:
                        return value
                    return 1.0 / (value * 1e-3 if match["ms"] else value)
    if bits & _G_STEP_RATE:
        for key in _STEP_RATE_KEYS:
            start = low.find(key)
            if start < 0:
                continue
            end = start + len(key)
            if (start and low[start - 1] in _WORD_CHARS and "_per_" not in key) or low[end : end + 1] in _WORD_CHARS:
                continue
            value = None
            if not _KEY_FOLLOWS.match(low, end):
                value = _value_before(low, start)
            if value is None:
                value = _scaled(_VALUE_AFTER.match(low, end))
            if value is not None and not _eval_side(low, start):
                return value
    if not bits & _G_TIMED:
        return None
    seconds = _explicit_step_time(low)
    if seconds is None:
        seconds = _plain_step_time(low, timed_by_step=False)
    if seconds is not None:
        return 1.0 / seconds if seconds > 0 and math.isfinite(seconds) else None
    return None


def _timed(low: str) -> bool:
    """Whether `low` may state a time per step (one of `_TIME_GATE` is in it)."""
    for gate in _TIME_GATE:
        if gate in low:
            return True
    return False


def _explicit_step_time(low: str) -> float | None:
    """Seconds a step took as the line says it explicitly; nan when it says it is not known
    (`step_avg:nanms`); None when it does not say."""
    if "/step" in low or "/batch" in low or "/ba" in low or "/iter" in low:
        match = _TIME_PER_UNIT.search(low)
        if match:
            return _number(match["v"]) * _TIME_UNITS[match["u"]]
        unit = _UNIT_AS_KEY.search(low)
        if unit:
            value = _KEYED_VALUE.match(low, unit.end())
            if value:
                return float(value["v"].replace(",", "")) * _TIME_UNITS[unit["u"]]
    for key in _EXPLICIT_TIME_KEYS:
        at = low.find(key)
        if at >= 0 and (at == 0 or low[at - 1] not in _WORD_CHARS):
            seconds = _time_after(low, at + len(key))
            if seconds is not None:
                return seconds
    return None


def _plain_step_time(low: str, *, timed_by_step: bool) -> float | None:
    """The longest of the plain per-step times the line states (the others are parts of a step:
    `iter_time=0.001` of ESPnet's `train_time=0.014`). `time:` and a `| 8060.78ms |` field count
    only on a line that also counts steps (`timed_by_step`): a bare `Time 4981.4s` of an epoch is not
    a step's. nan when the longest is not known."""
    best = None
    for key in _PLAIN_TIME_KEYS:
        if (key == "time") is not timed_by_step:
            continue
        at = low.find(key)
        for _ in range(_MAX_TRIES):
            if at < 0:
                break
            end = at + len(key)
            if (at == 0 or low[at - 1] not in _WORD_CHARS) and low[end : end + 1] not in _WORD_CHARS \
                    and not low.endswith(("total ", "total_", "data_", "data "), 0, at):
                seconds = _time_after(low, end)
                if seconds is not None and (best is None or not seconds <= best):
                    best = seconds
            at = low.find(key, end)
    if timed_by_step and best is None and "ms |" in low:
        field = _DURATION_FIELD.search(low)
        if field:
            best = _number(field["v"]) * _TIME_UNITS[field["u"]]
    return best


def _time_after(low: str, end: int) -> float | None:
    """Seconds after a time key ending at `end`: `: 0.593`, ` 561.94ms`, ` (ms): 4225.8`, ` in s: 0.031`, `: 1.599 s`."""
    match = _TIME_VALUE.match(low, end)
    if match is None:
        return None
    value = float(match["v"].replace(",", ""))
    unit = match["u"] or match["ku"] or match["ki"] or "s"
    return value * _TIME_UNITS[unit]


# -- loss, lr, grad norm, MFU ---------------------------------------------------------------------------


def _loss(low: str) -> float | None:
    """The training loss. The first plain `loss` decides (`loss 2.31`, `'loss': 2.31`, `Loss：1.98`);
    else the first training-qualified one (`train_loss=2.31`, `lm loss: 2.3E+00`, `loss/train/total`,
    `avr_loss`); else the line's only loss of another name (caffe's `mbox_loss = 4.75`), never a
    validation loss (`val_loss:4.37`, `eval_loss`: HF's eval dict, modded-nanogpt's validation lines).
    The deciding key's value as written, non-finite included (`loss nan`: the pane says nan)."""
    first = at = low.find("loss")
    for _ in range(4 * _MAX_TRIES):  # a plain `loss` key, after a line's many `loss_cls:`-like ones
        if at < 0:
            break
        end = at + 4
        if (at == 0 or low[at - 1] in " {'\"|,(\t") and low[end : end + 1] not in _KEY_CHARS \
                and not low[max(0, at - 12) : at].rstrip(" '\"").endswith(_QUALIFIERS):
            plain = _plain_value_after(low, end)  # the common `loss 2.31` / `'loss': 2.31`, without a regex
            if plain is not None:
                return plain
            value, word = _loss_value(low, end)
            if value is not None and word is None:
                return value
        at = low.find("loss", end)
    at = first
    qualified = None
    names: dict[str, float] = {}
    evals: dict[str, float] = {}
    for _ in range(_MAX_TRIES):
        if at < 0:
            break
        start, end = at, at + 4
        while start and low[start - 1] in _KEY_CHARS:
            start -= 1
        while end < len(low) and low[end] in _KEY_CHARS:
            end += 1
        at = low.find("loss", end)
        token = low[start:end].strip("./-")
        value, word_after = _loss_value(low, end)
        if value is None:
            continue
        parts = [part for part in _KEY_PARTS.split(token) if part]
        words = set()
        for part in parts:
            words.add(part[:-4] if part.endswith("loss") and part != "loss" else part)
        words.discard("loss")
        words.discard("")
        if word_after:
            words.add(word_after)
        if token == "loss" and start and low[start - 1] == " ":
            before = low[max(0, start - 12) : start - 1].rpartition(" ")[2]
            if before.isalpha():
                words.add(before)
        if not words:
            return value
        if words <= _TRAIN_LOSS_WORDS:
            if qualified is None:
                qualified = value
        elif "scale" in words:
            continue
        elif not words & _EVAL_LOSS_WORDS:
            names.setdefault(token, value)  # a component's (`mbox_loss`)
        elif words - _EVAL_LOSS_WORDS <= _TRAIN_LOSS_WORDS:
            evals.setdefault(token, value)  # the loss only where the line states no other
    if qualified is not None:
        return qualified
    if len(names) == 1:
        value = next(iter(names.values()))
        return value
    if not names and len(evals) == 1:  # a validation line's only loss (`step:125/1480 val_loss:4.3719`)
        return next(iter(evals.values()))
    return None


def _loss_value(low: str, end: int) -> tuple[float | None, str | None]:
    """The value after a loss key ending at `end`, and the word between them if one qualifies it
    (`loss train: 21.6`, `lm loss value: 2.3`); (None, None) when no value follows (`loss scale: 1.0`
    is read as `scale`, then refused by the caller)."""
    word = None
    if low[end : end + 1] == " ":
        cut = end + 1
        stop = cut
        if low[cut : cut + 1] == "(":  # a qualifier in brackets: Pytorch-UNet's `loss (batch)=0.00319`
            close = low.find(")", cut, cut + 16)
            if close > cut + 1 and low[cut + 1 : close].isalpha() and low[close + 1 : close + 2] in (":", "="):
                word, end = low[cut + 1 : close], close + 1
        while stop < len(low) and low[stop].isalpha():
            stop += 1
        if word is None and stop > cut and low[stop : stop + 1] in (":", "="):
            word, end = low[cut:stop], stop
    match = _KEYED_VALUE.match(low, end)
    if match is None:
        return None, None
    return _number(match["v"]) if match["v"][-1].isdigit() else float(match["v"]), word


def _lr(low: str) -> float | None:
    """The learning rate: `lr`, `train_lr`, ESPnet's `lr_0` (not `base_lr`, `min_lr`, nanochat's `lrm`)."""
    at = low.find("lr")
    for _ in range(_MAX_TRIES):
        if at < 0:
            return None
        start, end = at, at + 2
        while start and low[start - 1] in _WORD_CHARS:
            start -= 1
        while end < len(low) and low[end] in _WORD_CHARS:
            end += 1
        token = low[start:end]
        if token == "lr" and low[end : end + 1] in ("-", "/") and low[end + 1 : end + 2].isalpha():
            # the rate of an optimizer or of one of its parameter groups, the first of them printed first
            # (Lightning's LearningRateMonitor: `'lr-Adam': 0.001`, `lr-AdamW/pg1`)
            while end < len(low) and low[end] in _KEY_CHARS:
                end += 1
        if token in _LR_KEYS or _LR_GROUP.match(token):
            plain = _plain_value_after(low, end)
            if plain is not None:
                return plain
            match = _KEYED_VALUE.match(low, end)
            if match and match["v"][-1].isdigit():
                return _number(match["v"])
        at = low.find("lr", end)
    return None


def _grad_norm(low: str) -> float | None:
    """The gradient norm: `grad_norm`, `grad norm`, `gnorm`, `grad-norm`; a non-finite one is none."""
    at = low.find("norm")
    if at > 4 and low[at - 5 : at] == "grad_" and (at == 5 or low[at - 6] not in _KEY_CHARS):
        plain = _plain_value_after(low, at + 4)  # the common `grad_norm 1.3`, without a regex
        if plain is not None:
            return plain
    for _ in range(_MAX_TRIES):
        if at < 0:
            return None
        start, end = at, at + 4
        while start and low[start - 1] in _KEY_CHARS:
            start -= 1
        if end < len(low) and low[end] in _WORD_CHARS:
            at = low.find("norm", end)
            continue
        token = low[start:end]
        # a key in a namespace is its last part (`train/grad_norm`, verl's `actor/grad_norm:0.5`); a bare
        # `norm` that opens a field of a line stating a loss is the gradient's (build-nanogpt's clipped norm:
        # `step    0 | loss: 10.955029 | lr 6.0000e-05 | norm: 15.3734 | dt: …`), not one another word names
        # (Megatron's `params norm:`) nor a table of weights' norms (`q_proj.weight | norm: 0.0001 | mean: …`)
        if token.rpartition("/")[2] in _GRAD_NORM_KEYS or (token == "norm" and (
                low.endswith("grad ", 0, start) or low.endswith(("| ", ", "), 0, start) and "loss" in low)):
            plain = _plain_value_after(low, end)
            if plain is not None:
                return plain
            match = _KEYED_VALUE.match(low, end)
            if match:
                return _number(match["v"]) if match["v"][-1].isdigit() else None
        at = low.find("norm", end)
    return None


def _mfu(low: str) -> float | None:
    """MFU as printed: `mfu: 13.99%`, `mfu 16.68%`, `MFU/%: 41.2`, or its value before it (`9.2% bf16 MFU`)."""
    value = _keyed(low, "mfu", ("/",))
    if value is not None:
        return value
    at = low.find("mfu")
    head = low[max(0, at - 16) : at]
    cut = head.rfind("%")
    if cut > 0:
        return _plain_number_at_end(head[:cut], whole_line=at <= 16)
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
            if match and match["v"][-1].isdigit():
                return _number(match["v"])
        at = low.find(key, at + 1)
    return None


def _plain_value_after(low: str, end: int) -> float | None:
    """A plain number right after a key ending at `end` (`: 2.31`, `=3e-4`, ` 1.5`, `': '8.996'`), or None."""
    rest = low[end : end + _VALUE_REACH]
    value = rest.lstrip(" :='\"：")
    if 0 < len(rest) - len(value) <= 4 and value[:1].isdigit():
        token = value.partition(" ")[0].rstrip(",;:|)]}'\"%")
        if token.isascii() and "_" not in token:  # _plain_float, inlined: three calls a line
            try:
                return float(token)
            except ValueError:
                return None
    return None


# -- steps ----------------------------------------------------------------------------------------------


def _step(text: str, low: str, has_loss: bool, bits: int, step_keys: tuple[str, ...]) -> tuple[int, int | None] | None:
    """The step and its total (or None): a named step key first (its total, or the total of another
    step key with the same step), then the last bracketed counter, then a bar, then the leading
    column of a line that also states a loss (`510 | loss 5.23 | …`)."""
    step = total = None
    for key in step_keys:
        found = _step_key(low, key)
        if found is None:
            continue
        if step is None:
            step, total = found
            if total is not None:
                break
        elif found[0] == step and found[1] is not None:
            total = found[1]
            break
    if step is not None:
        return step, total
    if bits & _G_FIELDS:
        fields = _FIELDS_STEP.search(low)
        if fields:
            return int(fields["s"]), None
    if bits & _G_BRACKET:
        last = None
        for match in islice(_BRACKET.finditer(low), _MAX_TRIES):
            done, of = int(match["s"]), int(match["t"])
            before = low[: match.start()]
            if 0 < of and done <= of and not before.rstrip(" :").endswith("epoch") and not _COMPILE_ID_BEFORE.search(before):
                last = done, of
        if last is not None:
            return last
    if bits & _G_BAR and "epoch" in low:
        pair = _EPOCH_PAIR.search(low)
        if pair and 0 < int(pair["t"]) and int(pair["s"]) <= int(pair["t"]):
            return int(pair["s"]), int(pair["t"])
    if bits & _G_BAR:
        for bar in islice(_PROGRESS_BAR.finditer(text), _MAX_TRIES):
            if bar["is"] or bar["us"]:
                return int(bar["is"] or bar["us"]), None
            if bar["s"] and low[: bar.start()].rstrip(" :").endswith("epoch"):
                continue  # an epoch's pair before a bar is no step: the count after the bar is
            done_text, of_text = (bar["s"], bar["t"]) if bar["s"] else (bar["ks"], bar["kt"])
            return int(done_text), int(of_text)
        if "━" in text or "%|" in text:
            after = _PAIR_AFTER_BAR.search(text)
            if after and not after["t"]:
                return int(after["s"]), None  # an iterable of unknown length: `5072/--`
            if after and 0 < int(after["t"]) and int(after["s"]) <= int(after["t"]):
                return int(after["s"]), int(after["t"])
    if has_loss and bits & _G_LEADING:
        leading = _LEADING_STEP.match(low)
        if leading is None and _record_header(text):
            # the column that leads a log record's message (`… - INFO - 510 | loss 5.23 | …`, `INFO:root:510 | …`)
            leading = _RECORD_LEADING_STEP.search(low, 0, 160)
        if leading:
            return int(leading["s"]), None
    return None


def _step_key(low: str, key: str) -> tuple[int, int | None] | None:
    """The first integer value of `key` where it is a word of its own: (step, total or None)."""
    at = low.find(key)
    for _ in range(_MAX_TRIES):
        if at < 0:
            return None
        end = at + len(key)
        if (at == 0 or low[at - 1] not in _WORD_CHARS) and low[end : end + 1].isdigit() and key in _GLUED_STEP_KEYS:
            glued = _GLUED_STEP.match(low, end)  # `iteration100 loss: …`: the key written into its value
            if glued:
                return int(glued["s"]), None
        if (at == 0 or low[at - 1] not in _WORD_CHARS) and low[end : end + 1] not in _WORD_CHARS \
                and (key != "steps" or low[end : end + 1] == ":"):
            rest = low[end : end + _VALUE_REACH]
            value = rest.lstrip(" :='\"")
            if 0 < len(rest) - len(value) <= 4:  # the plain `step 5`, `step: 5/100`, without a regex
                done, slash, of = value.partition(" ")[0].rstrip(",;|:)]}'\"").partition("/")
                if done.isdigit() and done.isascii() and (not slash or of.isdigit() and of.isascii()):
                    if not of:
                        if not value[len(done):].lstrip(" ").startswith("/"):
                            return int(done), None  # (`step 95 / 22140`, its pair spaced, is read below)
                    else:
                        done_n, of_n = int(done), int(of)
                        if 0 < of_n and done_n <= of_n:
                            return done_n, of_n
            if low[end : end + 1] == "/":
                pair = _PAIR_KEY_VALUE.match(low, end)  # `global_step/max_steps: '5/3766'`
                if pair:
                    return int(pair["s"]), int(pair["t"])
            match = _STEP_VALUE.match(low, end)
            if match:
                step = int(match["s"].replace(",", ""))
                total = int(match["t"].replace(",", "")) if match["t"] else None
                if total is None or 0 < total and step <= total:
                    return step, total
                return step, None
        at = low.find(key, end)
    return None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_metric_value(text: str) -> float:
    """A number as logs write it: `14,200`, `14.2K`, `2.31E+00`, `nan`. Raises ValueError otherwise."""
    text = text.strip().replace(",", "")
    if text and text[-1].lower() in _SUFFIX:
        return float(text[:-1]) * _SUFFIX[text[-1].lower()]
    return float(text)


def _apply_patterns(
    text: str, patterns: MetricPatterns, metrics: dict | None
) -> tuple[dict | None, bool]:
    nonfinite = False
    for pattern in patterns.patterns:
        try:
            rule = compile_metric_pattern(pattern.regex, pattern.name)
        except ValueError:
            continue  # the config loader reports bad patterns; a line must never fail on one
        match = patterns.search(rule, f"[metrics] patterns.{pattern.name}", text)
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



# -- blocks: a problem is the lines it spans -------------------------------------------------
#
# classify_line sees one line. A problem is a block: a traceback's frames, the message lines after
# an exception, a C++ stack, torchrun's failure table. LineReader reads a log's lines in order, as
# the follower feeds them, and gives a line that continues a block the kind of the line before it
# (and LineInfo.continues). Whether a line continues is read from the block's shape, never from its
# words: the stream prefix it shares, its indentation under the block's first line, a stack frame's
# marker, a delimiter that opens or closes a table, a box side or log header it shares with the
# block's first line, and the message mode the line before left (an exception's message runs on
# over the unindented lines right after it; a first line that ends with `:` announces paragraphs).

#: Lines one block may hold before it is taken as finished (a table, a long stack).
MAX_BLOCK_LINES = 400
#: Streams with a block open at once; the oldest is dropped to make room.
MAX_BLOCK_STREAMS = 64

# A stream of its own: what the line's wrappers name (`_WRAPPER`: torchrun's `[rank3]:`, Ray's
# `(EngineCore pid=104) `, …), and a process's tag: NCCL's `host:pid:tid [dev] ` (its threads share the
# process's stream) and Open MPI's `[host:pid] `.
_PROCESS_STREAM = re.compile(r"\s*(?:(?P<process>[\w.-]+:\d+):\d+ \[\d+\] |\[(?P<mpi>[\w.-]+:\d+)\] )")
# A log record's header at the start of a line: glog's `E0626 23:10:17`, a timestamp (TensorFlow's
# `…085274: E` with its level after it), mmengine's `04/21 21:03:53`, or a level first (`ERROR 07-21`).
_HEADER = re.compile(
    r"\[?(?P<g>[IWEF])\d{3,4}(?:\d{4})? \d\d:\d\d:\d\d"
    r"|[\[(|]?\s?\d{2,4}[-/]\d\d[-/]\d\d[ T_]\d\d:\d\d(?::\d\d)?[.,\d]*(?:Z|[+-]\d\d:?\d\d)?\]?(?:: (?P<t>[IWEF]) )?"
    r"|\[?\d\d[-/]\d\d[ -]\d\d:\d\d:\d\d\]?"
    r"|\[?(?P<w>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
)
#: The characters a log header may start with (`_HEADER`).
_HEADER_STARTS = frozenset("[(|IWEF0123456789 DC")
_QUIET_LEVELS = frozenset(("I", "INFO", "DEBUG"))
#: A level word that opens a record's message (rich's `ERROR    RuntimeError: …`, `ERROR: …`).
_LEVEL_HEAD = re.compile(r"^(?:ERROR|CRITICAL|FATAL|WARNING|WARN)\b:?\s*")
_LEVEL = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_ERROR_LEVELS = frozenset(("E", "F", "ERROR", "CRITICAL", "FATAL"))
_DIGITS = str.maketrans("123456789", "000000000")  # a header's digits, compared by shape
# An exception's line: `RuntimeError: …`, `torch.OutOfMemoryError: …`, `ResourceExhaustedError (see
# above for traceback): …`, `UserWarning: …`, `CUDA error: …`; its message may run on after it.
_EXCEPTION_LINE = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b[^:\n]{0,40}:|[A-Z]\w*(?: [A-Z]\w*)? [Ee]rror:"
    # an absl / XLA status code: `RESOURCE_EXHAUSTED: Out of memory …`, `INTERNAL: …`
    r"|(?!(?:DEBUG|INFO|NOTE|WARN|WARNING)\b)[A-Z]{3,}(?:_[A-Z]+)*: "
)
# An exception named inside a line's message, after a colon, a comma or a log field's `] `: the line ends
# with that exception's message, which runs on over the lines after it as at a line's start (torch's
# `[rank0]:[E ProcessGroupNCCL.cpp:1414] … watchdog thread terminated with exception: CUDA error: …`, then
# c10's `CUDA kernel errors might be asynchronously reported …` and `Compile with `TORCH_USE_CUDA_DSA` …`).
_INNER_EXCEPTION = re.compile(
    r"(?:[:,] |\] )(?:(?:[A-Za-z_]\w*\.)*[A-Za-z]\w*(?:Error|Exception)\b[^:\n]{0,40}|[A-Z]\w*(?: [A-Z]\w*)? [Ee]rror): "
)
_WHAT = ("what():", "terminate called")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# A stack's frame marker (c10's `frame #3: …`, gdb's `#3 0x…`, the flight recorder's `#0 all_reduce
# from …`, glog's `@     0x7f79831f6520 (unknown)` and its `PC: @ 0x0`, NCCL's return-code trace `NCCL INFO
# transport/net.cc:1314 -> 6`) or its heading (`Exception raised from … (most recent call first):`).
_FRAME = re.compile(r"frame #\d+\b|#\d+ +\S|(?:PC: )?@ +0x[0-9a-f]+ |Exception raised from |NCCL INFO [\w/.-]+:\d+ -> \d+")
# NCCL's return-code trace of an error (`NCCL INFO proxy.cc:698 -> 3`: a code other than ncclSuccess).
_NCCL_RETURN = re.compile(r"NCCL INFO [\w/.-]+:\d+ -> [1-9]")
_STACK_HEADINGS = ("(most recent call first):", "(most recent call last):")
_C_STACK_HEADING = "(most recent call first):"
_PY_FRAME = re.compile(r'\s+File "[^"]*", line \d+')
_DELIMITER_CHARS = frozenset("=-*_~#")
# The side of a box a block is drawn in: rich's traceback (`│`, `╰`), MPICH's `=   BAD TERMINATION`.
_RULED = frozenset("│╰╭├└┃║")
_BOX_SIDES = frozenset("=*#║│┃")

# A block's message mode: whether its next header-less, unindented line is part of it.
_NO_MESSAGE, _MESSAGE, _PARAGRAPHS = 0, 1, 2


class _Block:
    __slots__ = ("kind", "head", "indent", "side", "level", "mode", "table", "blank", "lines", "chain", "frames",
                 "warning", "outer", "base")

    def __init__(self, kind: LineKind, body: str) -> None:
        self.kind = kind
        self.lines = 0
        self.blank = False
        self.table = ""  # the delimiter character of the table the block is inside
        self.chain = False  # its last line chains the next traceback to it ("During handling…")
        self.warning = kind is LineKind.WARNING
        self.outer: _Block | None = None  # an error's block that another thread's record interrupted
        self.base = 0  # the indentation of the log's plain lines around it (a paste indented as a whole)
        self.indent = len(body) - len(body.lstrip(" \t"))
        line = body[self.indent:]
        self.side = _side(line)
        header = _HEADER.match(line)
        self.head = line[:160].translate(_DIGITS) if header else ""
        self.level = _level(line, header) if header else None
        message = _message(line, header).strip()
        self.frames = message.startswith("Traceback (most recent call last)") or message.endswith(_STACK_HEADINGS)
        # a head that announces what follows (`Exception in thread X:`, `Process EngineCore:`, asyncio's
        # `Exception in callback X` and its `handle: …` line) heads its traceback
        announces = message.endswith(":") or message.startswith("Exception in callback ") or (
            message.startswith("***") and message.endswith("***"))  # Open MPI's `*** Process received signal ***`
        self.chain = announces and not self.frames
        if announces:
            self.mode = _PARAGRAPHS  # `ResourceExhaustedError:`, `WARNING:torch.distributed.run:`: its message follows
        elif self.level in _ERROR_LEVELS or _EXCEPTION_LINE.match(message) or message.startswith(_WHAT) \
                or _INNER_EXCEPTION.search(message):
            self.mode = _MESSAGE
        else:
            self.mode = _NO_MESSAGE


class LineReader:
    """Reads one log's lines in order, each through classify_line, and gives a line that continues
    a block (a traceback, an error's message, a C++ stack) the kind of the line before it.

    The follower feeds it every line; memory is bounded (one small record per stream with a block
    open). A line with a kind of its own keeps it, but for a traceback's indented frames and source
    lines (code, whatever its words). Cheap while no block is open: one dict test per line.
    """

    __slots__ = ("patterns", "_open", "_latest", "_plain", "_base")

    def __init__(self, patterns: MetricPatterns = NO_PATTERNS) -> None:
        self.patterns = patterns
        self._open: dict[str, _Block] = {}
        self._latest = ""
        # the last line outside any block, and the indentation of the last such line that was not
        # blank: a log pasted indented as a whole indents every line by it
        self._plain, self._base = "", -1

    def clear(self) -> None:
        """Forget every open block (the log was truncated or replaced)."""
        self._open.clear()
        self._latest = ""
        self._plain, self._base = "", -1

    def read(self, text: str) -> LineInfo:
        """What `text` (the log's next sanitized line) says, in the block it continues."""
        info = classify_line(text, self.patterns)
        if not self._open and info.kind is LineKind.NORMAL:
            self._plain = text
            return info
        return self._in_block(*_unwrapped(text), info)

    def _in_block(self, text: str, cut: int, info: LineInfo) -> LineInfo:
        stream, body = (_stream_of(text[:cut]), text[cut:]) if cut else ("", text)
        process = _PROCESS_STREAM.match(body)
        if process:
            # an NCCL process's threads (`host:pid:tid [dev] `) print one failure's trace between them, as
            # Open MPI's `[host:pid] ` tags each line of a process's signal dump
            indent = body[: len(body) - len(body.lstrip(" \t"))]
            stream = f"{stream} {process['process'] or process['mpi']}"
            body = indent + body[process.end():]
        block = self._open.get(stream)
        # `stream` is the latest's first parts (a whole part: rank 1 is not rank 10), or none at all
        if block is None and self._latest != stream and (not stream or self._latest.startswith(stream + " ")):
            # the rest of a rank's error printed without its prefix (c10's stack, PyTorch's advice), or
            # with only the launcher's (`[default0]:` after `[default0]:[rank0]:`)
            latest = self._open.get(self._latest)
            if latest is not None and body.strip() and _continues(latest, body) is not None \
                    and not body.lstrip(" \t").startswith("Traceback (most recent call last)"):
                stream, block = self._latest, latest
        self._latest = stream
        kind = info.kind
        if not body.strip():
            if block is not None:
                if block.blank and not block.table:
                    del self._open[stream]  # two blank lines end any block but a table
                else:
                    block.blank = True
            return info
        rest = _continues(block, body) if block is not None and block.lines < MAX_BLOCK_LINES else None
        if rest is None and block is not None and block.outer is not None:
            rest = _continues(block.outer, body)  # the error's next record, after another thread's
            if rest is not None:
                block = self._open[stream] = block.outer
        if rest is None:
            if kind is LineKind.NORMAL:
                if block is not None:
                    del self._open[stream]
                self._plain = body
                return info
            self._start(stream, kind, body)
            return info
        assert block is not None  # a continuation comes only from an open block
        own = kind is not LineKind.NORMAL
        indented = rest[:1] in (" ", "\t")
        if kind is LineKind.NORMAL or (indented and (block.frames or (
                # a frame under a graver problem's message (`CUDA call was originally invoked at:`),
                # a traceback line by its own words, is that problem's
                kind is LineKind.TRACEBACK and _KIND_RANK[block.kind] < _KIND_RANK[LineKind.TRACEBACK]))):
            if kind is LineKind.NORMAL and _has_metrics(info) and not (block.frames and rest[:1] in (" ", "\t")):
                del self._open[stream]  # a progress line is never part of a problem (a source line may say `lr = 0.1`)
                return info
            kind = block.kind  # a frame, its source line, the message's next line
            if kind is LineKind.WARNING and _NCCL_RETURN.match(rest):
                kind = LineKind.NCCL_TIMEOUT  # NCCL returns an error code up its stack: the warning was its failure
        _advance(block, kind, rest, own, record=rest is not body and block.level in _ERROR_LEVELS)
        return _with(info, kind)

    def _start(self, stream: str, kind: LineKind, body: str) -> None:
        before = self._open.pop(stream, None)
        if len(self._open) >= MAX_BLOCK_STREAMS:
            del self._open[next(iter(self._open))]
        block = self._open[stream] = _Block(kind, body)
        plain, cut = _unwrapped(self._plain)
        plain = plain[cut:]
        if plain.strip():
            self._base = len(plain) - len(plain.lstrip(" \t"))
        elif self._base < 0:  # the log's first lines open the block: its indentation is the log's
            self._base = block.indent
        block.base = self._base
        if before is not None and before.level in _ERROR_LEVELS and block.head and block.level != before.level \
                and _KIND_RANK[kind] >= _KIND_RANK[before.kind]:
            # a lesser record of another level (another thread's warning) inside an error's records:
            # the error's next record still continues the error (one level kept: memory stays bounded)
            before.outer = None
            block.outer = before


def _with(info: LineInfo, kind: LineKind) -> LineInfo:
    return LineInfo(
        kind, info.tokens_per_s, info.samples_per_s, info.it_per_s, info.loss, info.step, info.total_steps,
        info.lr, info.grad_norm, info.mfu, True, info.nonfinite_loss,
    )


def _has_metrics(info: LineInfo) -> bool:
    return (
        info.step is not None or info.loss is not None or info.tokens_per_s is not None
        or info.samples_per_s is not None or info.it_per_s is not None or info.lr is not None
    )


def _level(line: str, header: re.Match) -> str | None:
    level = header["g"] or header["t"] or header["w"]
    if level is None:
        found = _LEVEL.search(line, header.end(), header.end() + 40)
        level = found[0] if found else None
    return level


def _message(line: str, header: re.Match | None) -> str:
    """The line's message: what follows its header (timestamp, level, logger, `file.py:12]`)."""
    if header is None:
        return line
    rest = line[header.end():]
    # the header's other fields: up to the last `] `, ` - ` or ` | ` in its first 80 characters
    cut = max(rest.rfind("] ", 0, 80), rest.rfind(" - ", 0, 80) + 1, rest.rfind(" | ", 0, 80) + 1)
    if cut > 0:
        return rest[cut + 2:]
    if header["w"] and rest.startswith(":"):  # Python's `WARNING:torch.distributed.run:…`
        return rest[1:].partition(":")[2] if rest.count(":") > 1 else rest[1:]
    return rest


def _side(line: str) -> str:
    """The box side a line starts with (`=   `, `║ `), or ""."""
    if line[:1] in _BOX_SIDES and line[1:2] in (" ", "\t"):
        return line[: len(line) - len(line[1:].lstrip(" \t"))]
    return ""


def _delimiter(line: str) -> str:
    """The character of a delimiter line (`=====`, `-----`, `*****`), or ""."""
    stripped = line.strip()
    if len(stripped) >= 10 and stripped[0] in _DELIMITER_CHARS and stripped == stripped[0] * len(stripped):
        return stripped[0]
    return ""


def _after_shared_header(block: _Block, line: str) -> str | None:
    """The rest of `line` after the log header it shares with the block's first line, or None."""
    whole, line = line, line[:160].translate(_DIGITS)
    head = block.head
    n = 0
    for a, b in zip(line, head):
        if a != b:
            break
        n += 1
    header = _HEADER.match(line)
    if header is None or n < header.end():
        return None
    # the shared part is the header's: a message that repeats the block's first one (a traceback's next
    # `  File "…"` record) is read from its start, its indentation kept
    n = min(n, len(line) - len(_message(line, header)))
    while n > header.end() and line[n - 1].isalnum() and line[n : n + 1].isalnum():
        n -= 1  # the shared part ends inside a word of the message: back to the word's start
    return whole[n:]


def _continues(block: _Block, body: str) -> str | None:
    """What of `body` (a non-blank line without its stream prefix) continues `block`, judged by its
    shape: the line under the block's indentation and shared header; None if it does not continue."""
    indent = len(body) - len(body.lstrip(" \t"))
    if indent > block.indent:
        return body[block.indent:]  # a frame, its source line, an error's indented detail
    # the next line of a message wrapped under an indented first line (judged below, as a line
    # without a header of its own)
    wrapped = indent > block.base and indent == block.indent
    line = body[indent:]
    if line[0] in _RULED:
        return line
    if block.side and line.startswith(block.side):
        return line  # the box the block is drawn in
    if block.table:
        if _HEADER.match(line) is None:
            return line
        return _after_shared_header(block, line)
    if _delimiter(line):
        return line if not block.blank or block.mode == _PARAGRAPHS else None
    if _FRAME.match(line) or line.rstrip().endswith(_C_STACK_HEADING):
        return line  # (Python's `Traceback (most recent call last):` heads a block of its own)
    header = _HEADER.match(line)
    if header is not None:
        if not block.head:
            return None  # a log record of its own
        rest = _after_shared_header(block, line)
        if rest is None:
            return None
        level = _level(line, header)
        if level != block.level:
            return None  # a record of another level
        if level in _ERROR_LEVELS:
            return rest  # the same error's next record
        stripped = rest.lstrip(" \t")
        if not stripped:
            return None
        if stripped is not rest or stripped[0] in _RULED or _FRAME.match(stripped) or _delimiter(stripped):
            return rest
        line = rest
    if line.startswith("Traceback (most recent call last)"):
        return line if block.chain else None  # a traceback of its own, unless chained to this one
    if line.startswith("- ") and header is None:
        return line  # a bullet under the block's message (transformers' "- This IS expected if…")
    if block.blank:
        return line if block.mode == _PARAGRAPHS else None
    return line if block.mode != _NO_MESSAGE or (wrapped and header is None) else None


def _advance(block: _Block, kind: LineKind, rest: str, own: bool, *, record: bool = False) -> None:
    """`rest` (the line under the block's indentation and header) joined `block` with `kind` (`own`:
    the line's own kind, not the block's; `record`: the line is the error's next log record, whose
    message may run on over the header-less lines after it, as its first record's may)."""
    block.kind = kind
    block.lines += 1
    block.blank = False
    delimiter = _delimiter(rest)
    if delimiter:
        if block.table == delimiter:
            block.table = ""
            block.mode = _NO_MESSAGE  # the table closed: only indented lines and stacks may follow
        elif not block.table:
            block.table = delimiter
        return
    if rest[:1] in (" ", "\t") or rest[:1] in _RULED:
        if _PY_FRAME.match(rest):
            block.frames = True  # what is indented under it is its source line
        if block.warning:
            block.mode = _NO_MESSAGE  # a warning is its line and the source line under it
        return
    stripped = rest.strip()
    if block.mode == _PARAGRAPHS and stripped.startswith("***") and stripped.endswith("***") and len(stripped) > 6:
        block.mode = _NO_MESSAGE  # the dump a `*** … ***` heading announced is closed by another
        return
    block.chain = stripped.startswith(_CHAINED)
    if stripped.startswith("Traceback (most recent call last)") or stripped.endswith(_STACK_HEADINGS):
        block.frames, block.mode = True, _PARAGRAPHS
        return
    block.frames = block.frames and bool(_FRAME.match(stripped))
    if _EXCEPTION_LINE.match(stripped) or stripped.startswith(_WHAT):
        block.mode = _PARAGRAPHS if stripped.endswith(":") else _MESSAGE
        block.warning = kind is LineKind.WARNING
    elif record:
        block.mode = _MESSAGE
    elif own and block.mode == _MESSAGE:
        block.mode = _NO_MESSAGE  # a statement of its own closes the message it ends (Ray's "The actor is dead…")
