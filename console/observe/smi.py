"""Parse `nvidia-smi --query-gpu` and `--query-compute-apps` CSV into GpuReading / GpuProcess.

Both formats are accepted: `csv,noheader,nounits` (what Pulse asks for) and plain
`csv`, whose header names the columns and whose values carry units (`0 MiB`, `78.06 W`).
The field lists are constants so the remote agent, the nvidia-smi source and the
demo's stand-in all ask for exactly the same columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from console.model import GpuProcess, GpuReading

#: Columns of `--query-gpu` Pulse asks for, in this order.
GPU_QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
)
#: Columns of `--query-compute-apps` Pulse asks for, in this order.
APP_QUERY_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")
#: The arguments after `nvidia-smi` for one reading of each (add `-lms N` to stream).
GPU_QUERY_ARGS = (f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,noheader,nounits")
APP_QUERY_ARGS = (f"--query-compute-apps={','.join(APP_QUERY_FIELDS)}", "--format=csv,noheader,nounits")

# Header text (units removed) → the query field it answers, where they differ.
_HEADER_ALIASES = {
    "gpu_uuid": "uuid",  # in --query-gpu
    "gpu_name": "name",
    "used_gpu_memory": "used_memory",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
}
_APP_HEADER_ALIASES = {"used_gpu_memory": "used_memory", "name": "process_name"}
# Values that mean "this GPU cannot say", as opposed to a fault of the GPU.
_NOT_AVAILABLE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Not Found]", ""})
_UNITS = (" MiB", " MB", " GiB", " %", " W", " MHz", " C")


T = TypeVar("T")


class ParseError(ValueError):
    """nvidia-smi printed something that is not the CSV asked for; the message is one line."""


def parse_gpu_csv(
    text: str, fields: Sequence[str] = GPU_QUERY_FIELDS, errors: list[str] | None = None
) -> list[GpuReading]:
    """GPU readings from `--query-gpu` output (with or without header and units).

    `fields` names the columns of header-less output; a header line overrides it.
    A row that cannot be read raises ParseError, or, when `errors` is a list, is
    skipped and described there so the other GPUs still show.
    """
    return _read_rows(text, fields, _HEADER_ALIASES, ("index", "uuid"), "--query-gpu", GPU_QUERY_FIELDS, _gpu_row, errors)


def parse_apps_csv(
    text: str, fields: Sequence[str] = APP_QUERY_FIELDS, errors: list[str] | None = None
) -> list[tuple[str, GpuProcess]]:
    """(GPU uuid, process) pairs from `--query-compute-apps` output; a header alone means none.

    PIDs are the driver's, i.e. the host's PID namespace. Bad rows as in parse_gpu_csv.
    """
    return _read_rows(
        text, fields, _APP_HEADER_ALIASES, ("gpu_uuid", "pid"), "--query-compute-apps", APP_QUERY_FIELDS, _app_row, errors
    )


def _read_rows(
    text: str,
    fields: Sequence[str],
    aliases: dict[str, str],
    required: tuple[str, ...],
    query: str,
    asked: Sequence[str],
    read: Callable[[dict[str, str], int, str], T],
    errors: list[str] | None,
) -> list[T]:
    """Each row of a `nvidia-smi --query-*` table as `read(row, line number, line)` makes it; a row it
    refuses (ParseError) raises, or, when `errors` is a list, is described there and skipped."""
    columns, rows = _table(text, fields, aliases, required[0])
    for name in required:
        if name not in columns:
            raise ParseError(f"nvidia-smi {query} output has no {name} column; ask for {','.join(asked)}")
    found = []
    for number, cells in rows:
        try:
            found.append(read(dict(zip(columns, _split(cells, columns, number))), number, cells))
        except ParseError as exc:
            if errors is None:
                raise
            errors.append(str(exc))
    return found


def _gpu_row(row: dict[str, str], number: int, cells: str) -> GpuReading:
    return _gpu_reading(row, number)


def _app_row(row: dict[str, str], number: int, cells: str) -> tuple[str, GpuProcess]:
    pid = _integer(row["pid"], "pid", number)
    if pid is None:
        raise ParseError(f"nvidia-smi line {number}: no pid in {cells!r}")
    name = row.get("process_name")
    process = GpuProcess(
        pid=pid,
        used_mib=_integer(row.get("used_memory"), "used_memory", number),
        name=None if name is None or name in _NOT_AVAILABLE else name,
    )
    return row["gpu_uuid"], process


def parse_pmon(text: str) -> dict[int, tuple[tuple[int, float], ...]]:
    """(pid, SM %) per GPU index from `nvidia-smi pmon -c 1 -s u` (columns named by its `# gpu pid ...` header).

    A GPU with no process prints a row of dashes; a process without a sample shows `-` (0 %).
    """
    columns: list[str] | None = None
    found: dict[int, list[tuple[int, float]]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if words[0] == "#":
            if columns is None and "pid" in words[1:]:
                columns = words[1:]
            continue
        if words[0].startswith("#"):
            if columns is None and "pid" in [words[0][1:], *words[1:]]:
                columns = [words[0][1:], *words[1:]]
            continue
        if columns is None or "gpu" not in columns or "sm" not in columns:
            raise ParseError(f"nvidia-smi pmon: no '# gpu pid ... sm' header before line {number}: {line[:120]!r}")
        cells = line.split(None, len(columns) - 1)
        if len(cells) < columns.index("sm") + 1:
            raise ParseError(f"nvidia-smi pmon line {number}: expected {len(columns)} columns: {line[:120]!r}")
        row = dict(zip(columns, cells))
        if not row["gpu"].isdigit():
            raise ParseError(f"nvidia-smi pmon line {number}: gpu is {row['gpu']!r}, not an index")
        gpu = found.setdefault(int(row["gpu"]), [])
        if not row.get("pid", "-").isdigit():
            continue  # no process on this GPU
        sm = row["sm"]
        try:
            gpu.append((int(row["pid"]), 0.0 if sm == "-" else float(sm)))
        except ValueError:
            raise ParseError(f"nvidia-smi pmon line {number}: sm is {sm!r}, not a number") from None
    return {index: tuple(rows) for index, rows in found.items()}


def attach_processes(gpus: Iterable[GpuReading], apps: Iterable[tuple[str, GpuProcess]]) -> tuple[GpuReading, ...]:
    """The readings with each GPU's compute processes filled in (matched by uuid)."""
    by_uuid: dict[str, list[GpuProcess]] = {}
    for uuid, process in apps:
        by_uuid.setdefault(uuid, []).append(process)
    return tuple(dataclasses.replace(gpu, processes=tuple(by_uuid.get(gpu.uuid, ()))) for gpu in gpus)


def _table(
    text: str, fields: Sequence[str], aliases: dict[str, str], first_header: str
) -> tuple[list[str], list[tuple[int, str]]]:
    """The column names and the numbered data lines of one CSV answer."""
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if lines and "," not in lines[0][1] and len(fields) > 1:
        # nvidia-smi's own failures are prose: "NVIDIA-SMI has failed because ...", "No devices were found".
        raise ParseError(f"nvidia-smi: {lines[0][1][:200]}")
    columns = list(fields)
    if lines and lines[0][1].split(",", 1)[0].strip() == first_header:
        columns = [_header_field(cell, aliases) for cell in lines[0][1].split(",")]
        lines = lines[1:]
    return columns, lines


def _header_field(cell: str, aliases: dict[str, str]) -> str:
    name = cell.strip().split(" [", 1)[0]
    return aliases.get(name, name)


def _split(line: str, columns: Sequence[str], number: int) -> list[str]:
    count = len(columns)
    # A process name may itself hold commas: as the last column it takes the rest of the line.
    maxsplit = count - 1 if columns[-1] == "process_name" else -1
    cells = [cell.strip() for cell in line.split(",", maxsplit)]
    if len(cells) != count:
        raise ParseError(f"nvidia-smi line {number}: expected {count} columns, got {len(cells)}: {line[:120]!r}")
    return cells


def _gpu_reading(row: dict[str, str], number: int) -> GpuReading:
    faults = [value for value in row.values() if value.startswith("[") and value not in _NOT_AVAILABLE]
    index = _integer(row["index"], "index", number)
    if index is None:
        raise ParseError(f"nvidia-smi line {number}: GPU row without an index")
    return GpuReading(
        index=index,
        uuid=row["uuid"],
        name=row.get("name", ""),
        memory_used_mib=_integer(row.get("memory.used"), "memory.used", number),
        memory_total_mib=_integer(row.get("memory.total"), "memory.total", number),
        utilization_pct=_decimal(row.get("utilization.gpu"), "utilization.gpu", number),
        temperature_c=_decimal(row.get("temperature.gpu"), "temperature.gpu", number),
        power_w=_decimal(row.get("power.draw"), "power.draw", number),
        power_limit_w=_decimal(row.get("power.limit"), "power.limit", number),
        sm_clock_mhz=_decimal(row.get("clocks.sm"), "clocks.sm", number),
        error=", ".join(dict.fromkeys(faults)) or None,
    )


def _decimal(value: str | None, field: str, number: int) -> float | None:
    """A number without its unit; None when the tool cannot say or the GPU reports a fault."""
    if value is None or value in _NOT_AVAILABLE or value.startswith("["):
        return None
    for unit in _UNITS:
        if value.endswith(unit):
            value = value[: -len(unit)]
            break
    try:
        return float(value)
    except ValueError:
        raise ParseError(f"nvidia-smi line {number}: {field} is {value!r}, not a number") from None


def _integer(value: str | None, field: str, number: int) -> int | None:
    found = _decimal(value, field, number)
    return None if found is None else int(found)
