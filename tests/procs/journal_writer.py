"""A journal writer that never stops: entry N (data {"seq": N}) every --every seconds, through
Pulse's own Journal (its writer thread commits every FLUSH_S). Prints `ready` after the first
commit. Tests kill it with SIGKILL mid-write and read what survived.

    journal_writer.py PATH [--every S] [--kind KIND]   (each entry also feeds one tokens_per_s value)
"""

import argparse
import time

from console.journal.store import Journal

parser = argparse.ArgumentParser()
parser.add_argument("path")
parser.add_argument("--every", type=float, default=0.002)
parser.add_argument("--kind", default="action")
args, _ = parser.parse_known_args()

journal = Journal(args.path).start()
journal.take_lease()
seq = 0
while True:
    seq += 1
    now = time.time()
    journal.add(args.kind, f"record {seq}", {"seq": seq}, at=now)
    journal.add_values("tokens_per_s", [(now, float(seq))])
    if seq == 1:
        journal.flush()
        print("ready", flush=True)
    time.sleep(args.every)
