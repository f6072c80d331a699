"""A run with DataLoader-like worker processes: two forked children block on a multiprocessing queue.

The parent prints `workers ready` once both children have started, then sleeps.
Extra arguments (a test's tag) are ignored.
"""

import multiprocessing
import time


def worker(tasks, started):
    started.release()
    tasks.get()


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    tasks = multiprocessing.Queue()
    started = multiprocessing.Semaphore(0)
    children = [multiprocessing.Process(target=worker, args=(tasks, started), daemon=True) for _ in range(2)]
    for child in children:
        child.start()
    for _ in children:
        started.acquire()
    print("workers ready", flush=True)
    while True:
        time.sleep(3600)
