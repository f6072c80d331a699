"""A process that ignores SIGTERM: only SIGKILL ends it. Prints its PID and `ready` once the handler is set."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"pid {os.getpid()} ready", flush=True)
while True:
    time.sleep(3600)
