"""A stand-in `nvidia-smi` for machines without GPUs: eight simulated H200s driven by the demo trainer.

    python -m console.demo.nvidia_smi --state PATH [nvidia-smi arguments]

It answers the invocations Pulse makes, in the exact format of the real tool (see
tests/fixtures/h200/): `--query-gpu=FIELDS` and `--query-compute-apps=FIELDS` with
`--format=csv[,noheader][,nounits]`, `-i`/`--id`, `-L`, `-l`/`-lms` loops, and `pmon -c 1`
(per-process SM %, the trainer's share being its GPU's whole use). Memory,
utilisation, power and clocks follow the trainer's state file; the trainer's PID holds
memory on every GPU while it lives, and the memory is released a moment after it dies.
Standard library only: it starts in milliseconds, like the real tool's ~27 ms.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from console.demo.machine import (
    BUS_IDS,
    BUSY_SM_MHZ,
    DRIVER_VERSION,
    GPU_COUNT,
    GPU_NAME,
    IDLE_POWER_W,
    IDLE_SM_MHZ,
    IDLE_TEMPERATURE_C,
    MEMORY_TOTAL_MIB,
    POWER_LIMIT_W,
    RELEASE_S,
    UUIDS,
    process_alive,
    read_state,
)

NA = "[N/A]"
#: What an idle GPU that still holds memory draws (captured: 122.83 W at 0 % with 21.6 GB held).
HELD_IDLE_POWER_W = 122.83
#: The driver's own share of a GPU's used memory, not attributed to any process (captured: 9 MiB).
DRIVER_RESERVED_MIB = 9


class UsageError(Exception):
    """A command line the real nvidia-smi would refuse; the message is what it prints."""


Getter = Callable[[dict], object]

#: --query-gpu field → (header name, unit, value). Aliases print the canonical header, as the real tool does.
GPU_FIELDS: dict[str, tuple[str, str | None, Getter]] = {
    "index": ("index", None, lambda g: g["index"]),
    "uuid": ("uuid", None, lambda g: UUIDS[g["index"]]),
    "gpu_uuid": ("uuid", None, lambda g: UUIDS[g["index"]]),
    "name": ("name", None, lambda g: GPU_NAME),
    "gpu_name": ("name", None, lambda g: GPU_NAME),
    "count": ("count", None, lambda g: GPU_COUNT),
    "driver_version": ("driver_version", None, lambda g: DRIVER_VERSION),
    "pci.bus_id": ("pci.bus_id", None, lambda g: BUS_IDS[g["index"]]),
    "gpu_bus_id": ("pci.bus_id", None, lambda g: BUS_IDS[g["index"]]),
    "serial": ("serial", None, lambda g: f"165402301{g['index']:04d}"),
    "persistence_mode": ("persistence_mode", None, lambda g: "Enabled"),
    "compute_mode": ("compute_mode", None, lambda g: "Default"),
    "pstate": ("pstate", None, lambda g: "P0"),
    "memory.total": ("memory.total", "MiB", lambda g: MEMORY_TOTAL_MIB),
    "memory.used": ("memory.used", "MiB", lambda g: g["memory_used_mib"]),
    "memory.free": ("memory.free", "MiB", lambda g: MEMORY_TOTAL_MIB - g["memory_used_mib"] - 544),
    "memory.reserved": ("memory.reserved", "MiB", lambda g: 544),
    "utilization.gpu": ("utilization.gpu", "%", lambda g: g["utilization_gpu_pct"]),
    "utilization.memory": ("utilization.memory", "%", lambda g: g["utilization_memory_pct"]),
    "temperature.gpu": ("temperature.gpu", None, lambda g: g["temperature_c"]),
    "temperature.memory": ("temperature.memory", None, lambda g: g["temperature_c"] - 4),
    "power.draw": ("power.draw", "W", lambda g: f"{g['power_w']:.2f}"),
    "power.draw.instant": ("power.draw.instant", "W", lambda g: f"{g['power_w']:.2f}"),
    "power.draw.average": ("power.draw.average", "W", lambda g: f"{g['power_w']:.2f}"),
    "power.limit": ("power.limit", "W", lambda g: f"{POWER_LIMIT_W:.2f}"),
    "enforced.power.limit": ("enforced.power.limit", "W", lambda g: f"{POWER_LIMIT_W:.2f}"),
    "clocks.sm": ("clocks.current.sm", "MHz", lambda g: g["sm_mhz"]),
    "clocks.current.sm": ("clocks.current.sm", "MHz", lambda g: g["sm_mhz"]),
    "clocks.mem": ("clocks.current.memory", "MHz", lambda g: 3201),
    "clocks.current.memory": ("clocks.current.memory", "MHz", lambda g: 3201),
    "clocks.max.sm": ("clocks.max.sm", "MHz", lambda g: BUSY_SM_MHZ),
    "fan.speed": ("fan.speed", "%", lambda g: NA),
    "ecc.errors.uncorrected.volatile.total": ("ecc.errors.uncorrected.volatile.total", None, lambda g: 0),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", None, lambda g: g["event_reasons"]),
    "clocks_throttle_reasons.active": ("clocks_throttle_reasons.active", None, lambda g: g["event_reasons"]),
}

#: --query-compute-apps field → (header name, unit, value of one process row).
APP_FIELDS: dict[str, tuple[str, str | None, Getter]] = {
    "gpu_uuid": ("gpu_uuid", None, lambda p: UUIDS[p["gpu"]]),
    "gpu_name": ("gpu_name", None, lambda p: GPU_NAME),
    "gpu_bus_id": ("gpu_bus_id", None, lambda p: BUS_IDS[p["gpu"]]),
    "gpu_serial": ("gpu_serial", None, lambda p: f"165402301{p['gpu']:04d}"),
    "pid": ("pid", None, lambda p: p["pid"]),
    "process_name": ("process_name", None, lambda p: p["name"]),
    "name": ("process_name", None, lambda p: p["name"]),
    "used_memory": ("used_gpu_memory", "MiB", lambda p: p["used_mib"]),
    "used_gpu_memory": ("used_gpu_memory", "MiB", lambda p: p["used_mib"]),
}


def idle_gpu(index: int, held_mib: int = 0) -> dict:
    """A GPU with no work on it, still holding `held_mib` (a hung run's memory stays allocated)."""
    return {
        "index": index,
        "memory_used_mib": held_mib,
        "utilization_gpu_pct": 0,
        "utilization_memory_pct": 0,
        "temperature_c": IDLE_TEMPERATURE_C + (2 if held_mib else 0),
        "power_w": HELD_IDLE_POWER_W if held_mib else IDLE_POWER_W,
        "sm_mhz": BUSY_SM_MHZ if held_mib else IDLE_SM_MHZ,
    }


def process_name(pid: int) -> str:
    """argv[0] of the process, which is what the driver reports as its name."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode("utf-8", "replace")
    except OSError:
        return NA


def read_machine(state: dict | None, now: float) -> tuple[list[dict], list[dict]]:
    """The GPUs and the compute processes on them, as the driver would report them now."""
    if state is None:
        return [idle_gpu(index) for index in range(GPU_COUNT)], []
    pid = state["pid"]
    alive = process_alive(pid)
    gpus = []
    for reading in state["gpus"]:
        if alive and now < state["busy_until"]:
            gpu = dict(reading)
        elif alive or now - state["updated"] < RELEASE_S:
            gpu = idle_gpu(reading["index"], reading["memory_used_mib"])
        else:
            gpu = idle_gpu(reading["index"])
        power_capped = gpu["sm_mhz"] < BUSY_SM_MHZ and gpu["power_w"] >= POWER_LIMIT_W
        gpu["event_reasons"] = "0x0000000000000004" if power_capped else "0x0000000000000000"
        gpus.append(gpu)
    processes = []
    if alive:
        name = process_name(pid)
        for gpu in gpus:
            if gpu["memory_used_mib"] > DRIVER_RESERVED_MIB:
                used = gpu["memory_used_mib"] - DRIVER_RESERVED_MIB
                processes.append({"gpu": gpu["index"], "pid": pid, "used_mib": used, "name": name})
    return gpus, processes


def render_csv(
    fields: list[str], table: dict[str, tuple[str, str | None, Getter]], rows: list[dict], header: bool, units: bool
) -> str:
    """CSV exactly as nvidia-smi prints it: `, `-separated, units after values unless `nounits`."""
    columns = []
    for field in fields:
        if field not in table:
            raise UsageError(f'Field "{field}" is not a valid field to query.')
        columns.append(table[field])
    lines = []
    if header:
        lines.append(", ".join(f"{name} [{unit}]" if unit and units else name for name, unit, _ in columns))
    for row in rows:
        values = []
        for _, unit, get in columns:
            value = str(get(row))
            values.append(f"{value} {unit}" if unit and units and value != NA else value)
        lines.append(", ".join(values))
    return "".join(f"{line}\n" for line in lines)


def parse_format(value: str) -> tuple[bool, bool]:
    """(header, units) from `csv[,noheader][,nounits]`."""
    parts = [part.strip() for part in value.split(",")]
    if parts[0] != "csv" or not set(parts[1:]) <= {"noheader", "nounits"}:
        raise UsageError(f'"{value}" is not a valid format. Use csv, optionally with noheader and nounits.')
    return "noheader" not in parts, "nounits" not in parts


def parse_args(argv: list[str]) -> dict:
    """nvidia-smi's options as Pulse uses them: `--opt=value` or `--opt value`."""
    options: dict = {"state": None, "query": None, "fields": None, "format": None, "ids": None, "loop_s": None}
    words = list(argv)
    while words:
        word = words.pop(0)
        name, _, value = word.partition("=") if word.startswith("--") else (word, "", "")

        def take() -> str:
            if value:
                return value
            if not words:
                raise UsageError(f"Option {name} needs a value.")
            return words.pop(0)

        if name == "--state":
            options["state"] = take()
        elif name == "pmon" and options["query"] is None:
            options["query"] = "pmon"
        elif name in ("-c", "--count", "-s", "--select") and options["query"] == "pmon":
            take()  # one sample of the utilization columns is all this stand-in prints
        elif name in ("--query-gpu", "--query-compute-apps"):
            options["query"], options["fields"] = name, [f.strip() for f in take().split(",") if f.strip()]
        elif name == "--format":
            options["format"] = take()
        elif name in ("-i", "--id"):
            options["ids"] = take()
        elif name in ("-L", "--list-gpus"):
            options["query"] = "-L"
        elif name in ("-l", "--loop"):
            options["loop_s"] = float(take())
        elif name in ("-lms", "--loop-ms"):
            options["loop_s"] = float(take()) / 1000
        else:
            raise UsageError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    return options


def select(gpus: list[dict], ids: str | None) -> list[dict]:
    """The GPUs named by `-i` (indices or UUIDs, comma-separated)."""
    if ids is None:
        return gpus
    chosen = []
    for token in (t.strip() for t in ids.split(",")):
        matches = [g for g in gpus if token == str(g["index"]) or token == UUIDS[g["index"]]]
        if not matches:
            raise UsageError(f"No devices were found matching {token}.")
        chosen += matches
    return chosen


def render(options: dict, now: float, header: bool) -> str:
    """One answer to the query in `options`."""
    gpus, processes = read_machine(read_state(options["state"]) if options["state"] else None, now)
    gpus = select(gpus, options["ids"])
    if options["query"] == "-L":
        return "".join(f"GPU {g['index']}: {GPU_NAME} (UUID: {UUIDS[g['index']]})\n" for g in gpus)
    if options["query"] == "pmon":
        return render_pmon(gpus, processes)
    if options["format"] is None:
        raise UsageError(f"{options['query']} requires --format (csv).")
    show_header, units = parse_format(options["format"])
    if options["query"] == "--query-gpu":
        return render_csv(options["fields"], GPU_FIELDS, gpus, show_header and header, units)
    chosen = {g["index"] for g in gpus}
    rows = [p for p in processes if p["gpu"] in chosen]
    return render_csv(options["fields"], APP_FIELDS, rows, show_header and header, units)


#: `nvidia-smi pmon -c 1` as the 580 driver prints it on an H200 (tests/data/real/*/smi_pmon.txt).
PMON_HEADER = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %    name \n"
)


def render_pmon(gpus: list[dict], processes: list[dict]) -> str:
    """One pmon sample: each GPU's compute process with the GPU's use as its own, or a row of dashes."""
    rows = [PMON_HEADER]
    for gpu in gpus:
        on_it = [p for p in processes if p["gpu"] == gpu["index"]]
        if not on_it:
            rows.append(f"{gpu['index']:>5} {'-':>10}     -      -      -      -      -      -      -    -              \n")
        for process in on_it:
            name = Path(str(process["name"])).name[:15]
            sm, mem = gpu["utilization_gpu_pct"], gpu["utilization_memory_pct"]
            rows.append(
                f"{gpu['index']:>5} {process['pid']:>10}     C {sm:>6} {mem:>6}      -      -      -      -    {name:<15}\n"
            )
    return "".join(rows)


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        if options["query"] is None:
            raise UsageError(
                "This stand-in nvidia-smi answers --query-gpu, --query-compute-apps and -L "
                "(with --format=csv[,noheader][,nounits]), and pmon -c 1."
            )
        sys.stdout.write(render(options, time.time(), header=True))
        sys.stdout.flush()
        while options["loop_s"] is not None:
            time.sleep(options["loop_s"])
            sys.stdout.write(render(options, time.time(), header=False))
            sys.stdout.flush()
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (a loop's consumer closed): end quietly, as the real tool does.
        sys.stdout = open("/dev/null", "w")
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
