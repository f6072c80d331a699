"""NCCL's own account of a hang: ProcessGroupNCCL watchdog lines and flight-recorder dumps (pure).

The watchdog line names the collective, its sequence number, the rank and the timeout:

    [rank0]:[E1130 10:50:10.36 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=5530, OpType=ALLREDUCE, …, Timeout(ms)=20000) ran for …

and each rank's dump signal line says how far it got ("Last enqueued NCCL work: 5529"). The
flight recorder (TORCH_NCCL_DUMP_ON_TIMEOUT=1) writes one pickle per rank to
`${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}RANK` (default /tmp/nccl_trace_rank_): a dict of builtins
with its `entries`, each a collective with `collective_seq_id`, `profiling_name`
(`nccl:all_reduce`) and `state`. A dump comes from the target, so it is read with an
unpickler that refuses every class: only dicts, lists, tuples, strings and numbers load.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Where the flight recorder writes when the run does not say (PyTorch's default prefix).
DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"
#: Environment variables that move it (the newer name first).
DUMP_PREFIX_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
#: A dump larger than this is not read (a 2000-entry buffer with stacks is about 1 MiB).
MAX_DUMP_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class NcclFact:
    """What one NCCL watchdog / flight-recorder line says."""

    node: str
    rank: int | None
    op: str | None
    seq: int | None
    """The collective's sequence number: the one that timed out, or how far the rank got."""
    timeout_ms: int | None
    flight_recorder: bool
    text: str


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """One rank's flight-recorder dump, reduced to how far it got."""

    rank: int
    last_seq: int | None
    """The highest collective sequence number it enqueued."""
    last_op: str | None
    """That collective's name, e.g. 'all_reduce'."""
    last_state: str | None
    """'scheduled', 'started' or 'completed'."""
    completed_seq: int | None


_SEQ = re.compile(r"\bSeqNum=(\d+)|Last enqueued NCCL work: (\d+)")
_OP = re.compile(r"\bOpType=(\w+)")
_TIMEOUT = re.compile(r"\bTimeout\(ms\)=(\d+)")
_RANK = re.compile(r"\[(?:PG \S+ )?[Rr]ank ?(\d+)\]")
FLIGHT = re.compile(r"flight.?recorder|dump(?:ing)? debug info|DUMP_ON_TIMEOUT", re.IGNORECASE)


def nccl_fact(node: str, text: str) -> NcclFact | None:
    """The facts of an NCCL watchdog or flight-recorder line; None for any other line."""
    flight = bool(FLIGHT.search(text))
    if not flight and "nccl" not in text.lower():
        return None
    seq = next((int(g) for m in [_SEQ.search(text)] if m for g in m.groups() if g), None)
    op, timeout, rank = (m.group(1) if (m := r.search(text)) else None for r in (_OP, _TIMEOUT, _RANK))
    if seq is None and op is None and not flight:
        return None  # an NCCL line that says nothing about a collective (init, version)
    return NcclFact(
        node=node,
        rank=int(rank) if rank else None,
        op=op,
        seq=seq,
        timeout_ms=int(timeout) if timeout else None,
        flight_recorder=flight,
        text=text[:300],
    )


def nccl_lines(facts: list[NcclFact], flights: Sequence[FlightRecord] = ()) -> list[str]:
    """The NCCL facts as evidence: the collective that timed out and the ranks that never joined it."""
    lines = []
    timed_out = [f for f in facts if f.op]
    if timed_out:
        first = timed_out[0]
        after = f" after {first.timeout_ms / 1000:g} s" if first.timeout_ms else ""
        nodes = len({f.node for f in facts})
        where = f" on {nodes} node(s)" if nodes > 1 or first.node else ""
        seq = f" #{first.seq}" if first.seq is not None else ""
        lines.append(f"NCCL watchdog timed out in {', '.join(sorted({f.op for f in timed_out if f.op}))}{seq}{after}{where}")
    seqs: dict = {}
    for f in facts:
        if f.seq is not None:
            who = f.rank if f.rank is not None else f.node
            seqs[who] = max(seqs.get(who, f.seq), f.seq)
    if len(set(seqs.values())) > 1:
        low = min(seqs.values())
        behind = sorted(str(k) for k, v in seqs.items() if v == low)
        who = f"rank {behind[0]} is" if len(behind) == 1 else f"ranks {', '.join(behind)} are"
        lines.append(f"{who} behind at collective #{low} (others reached #{max(seqs.values())})")
    lines += flight_lines(list(flights))
    if any(f.flight_recorder for f in facts) and not flights:
        lines.append("NCCL flight recorder dumped (see the nodes' logs)")
    return lines


def never_joined(flights: list[FlightRecord]) -> tuple[int | None, str | None, list[int]]:
    """(sequence number, collective, ranks that never enqueued it) from the ranks' dumps."""
    known = [(f.last_seq, f) for f in flights if f.last_seq is not None]
    if not known:
        return None, None, []
    top_seq, top = max(known, key=lambda pair: pair[0])
    missing = sorted(f.rank for seq, f in known if seq < top_seq)
    return top_seq, top.last_op, missing


def flight_lines(flights: list[FlightRecord]) -> list[str]:
    """'flight recorder: all_reduce #5530 never joined by rank 1 (rank 0: scheduled)'."""
    seq, op, missing = never_joined(flights)
    if seq is None:
        return []
    states = ", ".join(f"rank {f.rank}: {f.last_state}" for f in flights if f.last_seq == seq)
    if missing:
        who = ", ".join(f"rank {r}" for r in missing)
        return [f"flight recorder: {op or 'collective'} #{seq} never joined by {who} ({states})"]
    return [f"flight recorder: every rank reached {op or 'collective'} #{seq} ({states})"]


class _BuiltinsOnly(pickle.Unpickler):
    """Loads dicts, lists, tuples, strings and numbers; any class or function is refused."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 (pickle's signature)
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight-recorder dump holds only builtins")


def parse_flight_record(data: bytes, rank: int) -> FlightRecord:
    """Rank `rank`'s dump (the pickle PyTorch writes); ValueError with one line when it is not one."""
    if len(data) > MAX_DUMP_BYTES:
        raise ValueError(f"flight-recorder dump of rank {rank} is over {MAX_DUMP_BYTES >> 20} MiB: not read")
    try:
        dump = _BuiltinsOnly(io.BytesIO(data)).load()
    except Exception as exc:  # any malformed pickle: unpickling raises many kinds
        raise ValueError(f"flight-recorder dump of rank {rank} is unreadable: {type(exc).__name__}: {str(exc)[:120]}") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError(f"flight-recorder dump of rank {rank} is not a dict with entries")
    collectives = [
        e for e in dump.get("entries", []) if isinstance(e, dict) and isinstance(e.get("collective_seq_id"), int) and not e.get("is_p2p")
    ]
    if not collectives:
        return FlightRecord(rank, None, None, None, None)
    last = max(collectives, key=lambda e: e["collective_seq_id"])
    completed = [e["collective_seq_id"] for e in collectives if e.get("state") == "completed"]
    name = str(last.get("profiling_name") or "")
    return FlightRecord(
        rank=rank,
        last_seq=last["collective_seq_id"],
        last_op=name.removeprefix("nccl:") or None,
        last_state=str(last.get("state")) if last.get("state") is not None else None,
        completed_seq=max(completed) if completed else None,
    )


def dump_rank(path: str, prefix: str) -> int | None:
    """The rank a dump file is for: the digits after `prefix` in its name."""
    rest = path[len(prefix) :] if path.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None
