"""The journal's cost, fast-forwarded: a run sampled at 1 Hz for --hours, through Pulse's own
RunState, recorder, journal and alert policy, on simulated clocks (a day takes seconds).

Each simulated second the run prints one `step N | loss X | R tok/s` line (parsed by the real
line classifier), the sampler reports 8 GPUs, the recorder takes the news and the journal
commits, as `pulse watch` and the console do every second. The story: healthy; slow from
hour 2; a dead thread and a hang at hour 3; a restart 10 minutes later (through the real
audit log hook); healthy again; a 42 s SSH cut at hour 5; repeated daily.

Printed: journal writes (rows inserted or updated) and commits per hour, the database size per day, and the CPU the journaling
took (recorder + journal commits only, thread CPU time) per second of run, in % of a core.
`--live SECONDS` runs the same loop in real time instead, with the journal's own writer
thread committing every FLUSH_S, and prints the whole process's CPU (simulated run,
recorder and writer thread together: an upper bound on journaling's share).

    python scripts/bench_journal.py [--hours 24] [--journal PATH] [--json]
    python scripts/bench_journal.py --live 120

With --journal PATH the database is kept (the README's `pulse journal` / `pulse report`
samples are read from one made with --hours 6 at the path of a config's journal).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.actions.audit import AuditLog, StepEvent, StepStatus  # noqa: E402
from console.config import AlertsConfig, Config, RunConfig, TargetConfig  # noqa: E402
from console.diagnose import Verdict  # noqa: E402
from console.journal.store import Journal  # noqa: E402
from console.journal.watch import CHEAP_DIAGNOSIS_S, RunWatch  # noqa: E402
from console.model import ConnectionState, ConnectionStatus, GpuReading, LogLine, Sample  # noqa: E402
from console.observe.lines import classify_line  # noqa: E402
from console.state import RunState  # noqa: E402

BASELINE = 14200.0
VERDICTS = {
    "healthy": Verdict("healthy", "the run is alive and its log progresses", ["step lines every 1.0 s", "14,180 tok/s (100% of 14,200)"], "nothing to do", None),
    "slow": Verdict("slow", "throughput 43% of baseline", ["6,100 tok/s against a baseline of 14,200 (43%)", "GPU 3 at 31% utilisation, the others 97-99%"], "dump its stacks to see where it waits", "dump"),
    "hung": Verdict("hung", "alive, idle and silent for 312 s", ["pid 447 CPU 0.0% over 10 s, state S, 18 threads", "log silent 312 s (threshold 300 s)", "traceback: Exception in thread TargetForwardLoop:"], "dump its stacks, then restart", "dump"),
}


class Clocks:
    """The simulated run's wall clock and monotonic clock, one second per tick."""

    def __init__(self, start: float) -> None:
        self.wall_now = start
        self.mono_now = 1000.0

    def wall(self) -> float:
        return self.wall_now

    def mono(self) -> float:
        return self.mono_now

    def tick(self, seconds: float = 1.0) -> None:
        self.wall_now += seconds
        self.mono_now += seconds


def phase(second: int) -> str:
    """healthy, slow, hung or restart for a second of the day."""
    day_s = second % 86400
    if 7200 <= day_s < 10800:
        return "slow"
    if 10800 <= day_s < 11400:
        return "hung"
    return "healthy"


def simulate(hours: float, path: Path, gpus: int = 8, *, live: bool = False) -> dict:
    clocks = Clocks(time.time() - (0 if live else hours * 3600))
    config = Config(target=TargetConfig(host="root@gpu-node-7"), run=RunConfig(name="dflash"),
                    alerts=AlertsConfig(terminal=False), audit_log=str(path.with_suffix(".audit.jsonl")))
    state = RunState(clock=clocks.mono)
    journal = Journal(path, clock=time.time if live else clocks.wall)
    journal.take_lease()
    if live:
        journal.start()
    process_started, wall_started = time.process_time(), time.monotonic()
    watch = RunWatch(config, state, journal, [], wall=clocks.wall)
    cpu = 0.0
    number = step = 0
    memory = [70_000 + 500 * i for i in range(gpus)]
    seconds = int(hours * 3600)
    for second in range(seconds):
        now = clocks.mono()
        current = phase(second)
        day_s = second % 86400
        if current != "hung":
            rate = 6100.0 if current == "slow" else 14200.0
            step += 1
            number += 1
            text = f"step {step} | loss {3.2 * 0.9999 ** step:.4f} | {rate / 1000:.1f}K tok/s"
            state.add_lines([LogLine(number, text, classify_line(text), time=now)])
        if day_s == 10790:
            for text in ("Exception in thread TargetForwardLoop:", "Traceback (most recent call last):",
                         "RuntimeError: CUDA error: an illegal memory access was encountered"):
                number += 1
                state.add_lines([LogLine(number, text, classify_line(text), time=now)])
        if day_s == 11400:
            AuditLog(config.audit_log).record("restart", "root@gpu-node-7", {"launch": "python3 -u train.py"},
                                               [StepEvent("stop", StepStatus.OK, "pid 447 ended"), StepEvent("launch", StepStatus.OK, "pid 5120")],
                                               "ok: launched pid 5120")
            state.start_new_log("/workspace/train_restart.log")
        if day_s == 18000:
            state.set_connection(ConnectionState(ConnectionStatus.RECONNECTING, "Connection lost"))
        if day_s == 18042 or second == 0:
            state.set_connection(ConnectionState(ConnectionStatus.CONNECTED))
        if day_s < 18000 or day_s >= 18042:
            memory = [min(m + (1 if second % 7 == i else 0), 139_000) for i, m in enumerate(memory)]
            state.add_sample(Sample(clocks.wall(), gpus=tuple(
                GpuReading(i, f"GPU-{i}", "NVIDIA H200", m, 143771, 97.0, 55.0, 610.0, 700.0) for i, m in enumerate(memory))))
        started = time.thread_time()
        watch.observe()
        if second % CHEAP_DIAGNOSIS_S == 0:
            watch.verdict(VERDICTS[current])
        if not live:
            journal.flush()
        cpu += time.thread_time() - started
        clocks.tick()
        if live:
            time.sleep(max(0.0, wall_started + second + 1 - time.monotonic()))
    if live:
        cpu = time.process_time() - process_started
    journal.close()
    size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))
    return {
        "hours": hours,
        "writes": journal.writes,
        "writes_per_hour": round(journal.writes / hours),
        "commits_per_hour": round(journal.commits / hours),
        "bytes": size,
        "bytes_per_day": round(size * 24 / hours),
        "journal_cpu_s": round(cpu, 3),
        "journal_cpu_pct_of_core": round(100 * cpu / seconds, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--journal", type=Path, help="keep the database here (default: a temporary folder)")
    parser.add_argument("--live", type=float, metavar="SECONDS", help="real time for SECONDS, the writer thread on")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = args.journal or Path(scratch) / "bench.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            print(f"bench_journal: {path} exists; give a new path", file=sys.stderr)
            return 2
        figures = simulate(args.live / 3600 if args.live else args.hours, path, live=bool(args.live))
    if args.json:
        print(json.dumps(figures))
    elif args.live:
        print(f"live {args.live:g} s at 1 Hz: whole process CPU {figures['journal_cpu_pct_of_core']:.3f} % of a core "
              f"({figures['journal_cpu_s']:.2f} s of CPU), {figures['writes']} journal writes")
    else:
        print(f"{figures['hours']:g} h at 1 Hz: {figures['writes_per_hour']:,} journal writes/hour "
              f"in {figures['commits_per_hour']:,} commits, "
              f"{figures['bytes_per_day'] / 1e6:.2f} MB/day, journaling CPU {figures['journal_cpu_pct_of_core']:.3f} % of a core "
              f"({figures['journal_cpu_s']:.2f} s of CPU for {figures['hours']:g} h)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
