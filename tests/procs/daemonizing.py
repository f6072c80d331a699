"""A launch that daemonizes: the first process forks a session leader that keeps running, then exits 0.

The daemon prints `step N | …` lines (flushed) to the inherited stdout, as a run that
detaches itself does; extra arguments (a test's tag) stay in its command line.
"""

import os
import sys
import time

if os.fork():
    os._exit(0)  # the launcher returns at once, as `daemon(3)` does
os.setsid()
if os.fork():
    os._exit(0)
for step in range(1, 100000):
    print(f"step {step} | loss 2.31 | 14.2K tok/s", flush=True)
    time.sleep(0.05)
sys.exit(0)
