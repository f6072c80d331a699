"""What the sampling agent's look at the run's processes costs on a box with many processes.

    PYTHONPATH=. python scripts/bench_agent.py [--others 300] [--samples 200]

It starts --others `sleep` processes that are not the run, and a run of one Python process with
four worker children, then takes --samples readings through the agent's own ProcessWatch (match
mode, as the console's default, and pidfile mode), timing each in CPU time. The anchor, measured in
the same run on the same box, is one pass that reads every process's /proc/PID/stat and nothing
else: what a sample that looks at the whole machine cannot cost less than. The floor is what the
run's tree itself takes from /proc (the listing, each process's files, its threads' stats),
read raw: a sample that costs what /proc costs comes out near it, one that reads the whole
/proc above the anchor.
Run it against another checkout's `console` by putting that checkout first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from console.observe import agent

#: The run: a parent that starts four children, all asleep, all named by the match.
RUN = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', 'bench_agent_worker'])"
    " for _ in range(4)]\n"
    "time.sleep(3600)\n"
)
WORKERS = 4


def stat_pass() -> None:
    """The anchor: every process's stat read once, the least a look at the whole machine reads."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fd = os.open("/proc/%s/stat" % name, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.read(fd, 4096)
            except OSError:
                pass
            finally:
                os.close(fd)


def tree_reads(pids: list) -> None:
    """The floor: what a sample of the run's tree reads of /proc (the listing, then each process's
    stat, status, environment, stdout link and threads' stats), parsed by no one."""
    os.listdir("/proc")
    for pid in pids:
        folder = "/proc/%d" % pid
        for name in ("stat", "status", "environ"):
            with open("%s/%s" % (folder, name), "rb") as file:
                file.read()
        os.readlink(folder + "/fd/1")
        for tid in os.listdir(folder + "/task"):
            with open("%s/task/%s/stat" % (folder, tid), "rb") as file:
                file.read()


def cpu_ms(call, samples: int) -> float:
    """The median CPU time of `call`, in ms, over `samples` calls (after one to warm its caches)."""
    call()
    times = []
    for _ in range(samples):
        started = time.process_time()
        call()
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def wait_for_tree(watch: agent.ProcessWatch, size: int) -> None:
    deadline = time.monotonic() + 30
    while len(watch.read()[0]) < size:
        if time.monotonic() > deadline:
            raise SystemExit("bench_agent: the run's tree never showed all its processes")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", type=int, default=300, help="sleep processes that are not the run")
    parser.add_argument("--samples", type=int, default=200, help="samples timed per figure")
    args = parser.parse_args()
    others = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.others)]
    run = subprocess.Popen([sys.executable, "-c", RUN, "bench_agent_run"], start_new_session=True)
    try:
        with tempfile.TemporaryDirectory() as folder:
            pidfile = Path(folder) / "run.pid"
            pidfile.write_text("%d\n" % run.pid)
            by_match = agent.ProcessWatch("bench_agent_run", "")
            by_pidfile = agent.ProcessWatch("", str(pidfile))
            wait_for_tree(by_match, 1 + WORKERS)
            wait_for_tree(by_pidfile, 1 + WORKERS)
            processes = sum(name.isdigit() for name in os.listdir("/proc"))
            anchor = cpu_ms(stat_pass, args.samples)
            tree = [record["pid"] for record in by_match.read()[0]]
            floor = cpu_ms(lambda: tree_reads(tree), args.samples)
            print("%d processes visible, the run's tree %d; median CPU of %d samples" % (
                processes, len(tree), args.samples))
            print("  anchor: one stat read of every process  %7.3f ms  1.00x" % anchor)
            print("  floor: the tree's own /proc reads        %7.3f ms  %.2fx" % (floor, floor / anchor))
            for mode, watch in (("match", by_match), ("pidfile", by_pidfile)):
                took = cpu_ms(watch.read, args.samples)
                print("  agent sample, %-7s                   %7.3f ms  %.2fx" % (mode, took, took / anchor))
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the run and its workers: its own session and group
        for process in others:
            process.kill()
        for process in [*others, run]:
            process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
