"""A slow run's look (issue 34): every process of the run recorded by py-spy for a few seconds, with
each thread's schedstat, the host's load and paging, and each GPU's clocks, power and throttle
reasons read before and after, on the target. console.slowness decides the cause from it.

One script reads /proc and NVML twice (before and after the recordings); both agents' rules hold:
standard library only (pynvml where the target has it), every read bounded.
"""

from __future__ import annotations

import asyncio
import json

from console.model import GpuReading, ProcessReading, run_pids
from console.observe.pyspy_run import DumpError, record
from console.remote.shell import quote
from console.remote.target import Target, TargetError
from console.slowness import GpuLook, HostLook, SlowLook, process_looks

#: How long every process is recorded (py-spy takes whole seconds), and at most how many at once.
LOOK_S = 3
AT_ONCE = 8
FACTS_TIMEOUT_S = 10.0
FACTS_MAX_BYTES = 1 << 20

#: Reads, for the pids in argv: each thread's schedstat, major faults, allowed CPUs; the host's load,
#: CPUs, pages swapped in and memory available; each GPU's clocks, power and throttle reasons.
FACTS_SCRIPT = r"""
import json, os, sys
out = {"sched": {}, "majflt": {}, "affinity": {}}
for pid in sys.argv[1:]:
    threads = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task")[:4096]:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run, wait = f.read(200).split()[:2]
                threads[tid] = [int(run), int(wait)]
            except (OSError, ValueError):
                pass
        with open(f"/proc/{pid}/stat") as f:
            out["majflt"][pid] = int(f.read(4096).rsplit(")", 1)[1].split()[9])
        out["affinity"][pid] = len(os.sched_getaffinity(int(pid)))
    except (OSError, ValueError, IndexError):
        pass
    out["sched"][pid] = threads
try:
    with open("/proc/loadavg") as f:
        out["load1"] = float(f.read(200).split()[0])
    out["cpus"] = os.cpu_count()
    with open("/proc/vmstat") as f:
        out["pswpin"] = next((int(l.split()[1]) for l in f.read(1 << 16).splitlines() if l.startswith("pswpin ")), None)
    with open("/proc/meminfo") as f:
        mem = dict(l.split(":", 1) for l in f.read(1 << 16).splitlines() if ":" in l)
    out["mem_available_share"] = int(mem["MemAvailable"].split()[0]) / int(mem["MemTotal"].split()[0])
except (OSError, ValueError, KeyError, ZeroDivisionError):
    pass
try:
    import pynvml
    pynvml.nvmlInit()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h, gpu = pynvml.nvmlDeviceGetHandleByIndex(i), {"index": i}
        for key, read in (("util", lambda: pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                          ("sm", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                          ("sm_max", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                          ("power_mw", lambda: pynvml.nvmlDeviceGetPowerUsage(h)),
                          ("limit_mw", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)),
                          ("throttle", lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))):
            try:
                gpu[key] = int(read())
            except Exception:
                pass
        gpus.append(gpu)
    out["gpus"] = gpus
    pynvml.nvmlShutdown()
except Exception as exc:
    out["gpu_error"] = f"{type(exc).__name__}: {exc}"[:200]
print(json.dumps(out))
"""


def parse_facts(text: str) -> dict:
    """The script's JSON object; {} when it printed none (an unreadable target reads as unread facts)."""
    try:
        found = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except (ValueError, IndexError):
        return {}
    return found if isinstance(found, dict) else {}


def _sched(facts: dict) -> dict[int, dict[int, tuple[int, int]]]:
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for pid, threads in (facts.get("sched") or {}).items():
        if isinstance(threads, dict):
            out[int(pid)] = {int(tid): (int(v[0]), int(v[1])) for tid, v in threads.items()
                             if isinstance(v, list) and len(v) == 2}
    return out


async def read_facts(target: Target, pids: list[int]) -> dict:
    """FACTS_SCRIPT's reading of `pids` under the target's Python; {} when it cannot be run or says too much."""
    argv = " ".join(str(int(pid)) for pid in pids)
    script = f"{quote(target.python)} -c {quote(FACTS_SCRIPT)} {argv}"
    try:
        result = await target.run(script, FACTS_TIMEOUT_S, login=False, limit=FACTS_MAX_BYTES)
    except TargetError:  # OutputTooLong too: a reply past its bound is no reading
        return {}
    return parse_facts(result.stdout)


async def read_slow_look(
    target: Target, processes: tuple[ProcessReading, ...], gpus: tuple[GpuReading, ...], *, py_spy: str,
    recompile_lines: int = 0, seconds: int = LOOK_S,
) -> SlowLook:
    """Every live process of the run recorded for `seconds`, /proc and NVML read around the recordings."""
    alive = [p for p in processes if p.state not in ("Z", "X")]
    pids = [p.pid for p in alive]
    limit = asyncio.Semaphore(AT_ONCE)

    async def bounded(pid: int):
        async with limit:
            return await record(target, pid, py_spy=py_spy, seconds=seconds)

    before = await read_facts(target, pids)
    loop = asyncio.get_running_loop()
    started = loop.time()
    recorded = await asyncio.gather(*(bounded(pid) for pid in pids), return_exceptions=True)
    after = await read_facts(target, pids)
    window = max(loop.time() - started, 1e-3)
    unread = []
    records = {}
    for pid, result in zip(pids, recorded):
        if isinstance(result, DumpError):
            unread.append(f"stacks of pid {pid}: {result}")
        elif isinstance(result, BaseException):
            raise result
        else:
            records[pid] = result
    faults = {int(pid): after["majflt"][pid] - n for pid, n in (before.get("majflt") or {}).items()
              if pid in (after.get("majflt") or {})}
    looks = process_looks(alive, records, _sched(before), _sched(after), faults=faults,
                          affinity={int(pid): n for pid, n in (after.get("affinity") or {}).items()})
    run_pids_any_namespace = run_pids(alive)
    shares = {g.index: g.process_sm_pct for g in gpus}
    gpu_looks = tuple(
        GpuLook(g["index"], g.get("util"), g.get("sm"), g.get("sm_max"),
                g["power_mw"] / 1000 if "power_mw" in g else None, g["limit_mw"] / 1000 if "limit_mw" in g else None,
                g.get("throttle"), shares.get(g["index"]), run_pids_any_namespace)
        for g in after.get("gpus") or ()
        if isinstance(g, dict) and "index" in g
    )
    if "gpu_error" in after:
        unread.append(f"GPU clocks and throttle reasons: {after['gpu_error']}")
    if not before:
        unread.append(f"/proc on the target: the facts script printed nothing (no {target.python} there?)")
    swapped = after.get("pswpin") - before["pswpin"] if after.get("pswpin") is not None and before.get("pswpin") is not None else None
    host = HostLook(after.get("load1"), after.get("cpus"), swapped, after.get("mem_available_share"))
    return SlowLook(window, looks, gpu_looks, host, recompile_lines, tuple(unread))
