"""Pulse against the ssh one-liners it replaces, on a real sshd on 127.0.0.1.

    scripts/bench [--quick] [--json] [--out FILE] [--only poll,tail,...] [--memory-watch SECONDS]

Phases: 1 poll, 2 tail, 3 flood, 4 idle, 5 memory, 6 start, 7 diagnosis, 8 silence, and 9 fleet
only when named in --only (see benchlib/).
Every figure is a median with tail percentiles over repetitions, and each comparison is
against the manual way measured in the same run. Prints a markdown report (or, with
--json, one JSON object: the headline figures, the goals, the machine and every detail);
--out FILE writes the markdown there too. --quick takes under a minute. Exit status 0
when every phase ran (goals missed or not: this is a measurement), 1 when a phase failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(Path(__file__).resolve().parent)]

PHASE_NAMES = ("poll", "tail", "flood", "idle", "logs", "memory", "start", "diagnosis", "silence", "fleet")
#: The fleet runs only when named (--only fleet): its 256 simulated nodes run 256 agents on this
#: machine, more than a small shared box has cores for.
DEFAULT_PHASES = tuple(name for name in PHASE_NAMES if name != "fleet")
#: How long the memory phase watches the run after its flood (s): in full, with --quick.
MEMORY_WATCH_S = (300, 30)


def _watch_seconds(text: str) -> float:
    seconds = float(text)
    if seconds < 10:
        raise argparse.ArgumentTypeError(f"{text}: at least 10 seconds (the growth is a slope over the second half)")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 10 s idle, 200k lines: under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the markdown")
    parser.add_argument("--out", metavar="FILE", help="also write the markdown report to FILE")
    parser.add_argument("--only", metavar="PHASES", help=f"comma-separated subset of {','.join(PHASE_NAMES)}")
    parser.add_argument("--memory-watch", type=_watch_seconds, metavar="SECONDS",
                        help=f"how long the memory phase watches the run after its flood (default {MEMORY_WATCH_S[0]}, {MEMORY_WATCH_S[1]} with --quick)")
    parser.add_argument("--child", nargs=3, metavar=("PHASE", "SPEC", "RESULT"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        from benchlib.apps import run_child

        return run_child(*args.child)
    chosen = DEFAULT_PHASES if not args.only else tuple(name.strip() for name in args.only.split(","))
    unknown = [name for name in chosen if name not in PHASE_NAMES]
    if unknown:
        print(f"scripts/bench: unknown phase {', '.join(unknown)}; choose from {', '.join(PHASE_NAMES)}", file=sys.stderr)
        return 2

    from benchlib import phases, procs, report
    from benchlib.world import World

    started = time.monotonic()
    machine = procs.machine()
    results: dict = {}
    failed = False
    try:
        with World() as world:
            for name in chosen:
                print(f"scripts/bench: {name}…", file=sys.stderr, flush=True)
                phase_started = time.monotonic()
                try:
                    options = {"watch_s": args.memory_watch or MEMORY_WATCH_S[args.quick]} if name == "memory" else {}
                    results[name] = getattr(phases, f"run_{name}")(world, args.quick, **options)
                except Exception as exc:  # one broken phase must not lose the others' figures
                    failed = True
                    results[name] = {"error": f"{type(exc).__name__}: {exc}"}
                    traceback.print_exc(file=sys.stderr)
                results[name]["phase_s"] = round(time.monotonic() - phase_started, 1)
    except (OSError, RuntimeError) as exc:
        print(f"scripts/bench: could not set up the bench: {exc}", file=sys.stderr)
        return 1
    machine["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    figures = report.headline(results)
    result = {
        **figures,
        "goals": report.goals(figures, results),
        "quick": args.quick,
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": machine,
        "figures": figures,
        "phases": results,
    }
    text = report.markdown(result)
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps(result) if args.json else text, end="\n" if args.json else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
