"""The silent pipeline hang of fixtures/h200/hung.py, without torch.

A producer thread dies with an exception; the main thread then blocks forever in
`queue.Queue.get()`. Three helper threads wait on an Event, so the process is
multi-threaded like a real run. CPU stays idle; the log stops after one step line.
"""

import queue
import threading
import time

q = queue.Queue()
never = threading.Event()


def producer():
    time.sleep(0.2)
    raise RuntimeError("producer died before publishing")


def pack_hidden(batch):
    return q.get()


for n in range(3):
    threading.Thread(target=never.wait, name=f"Helper-{n}", daemon=True).start()
threading.Thread(target=producer, name="TargetForwardLoop", daemon=True).start()
print("step 1 | loss 2.31 | 14.2K tok/s", flush=True)
pack_hidden(1)
