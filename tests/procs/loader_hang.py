"""A DataLoader-like run whose workers hang: the main thread waits on their queue forever (stdlib only).

The main process forks two workers (same command line, as DataLoader workers are); each
blocks in `Dataset.__getitem__` on a lock nobody releases, so the main thread waits in
`_get_data` on a result queue. It prints a few step lines first. Extra arguments are ignored.
"""

import multiprocessing
import time


class Dataset:
    def __init__(self, stuck):
        self.stuck = stuck

    def __getitem__(self, index):
        self.stuck.acquire()  # a read that never returns
        return index


def worker_loop(dataset, results):
    results.put(dataset[0])


def _get_data(results):
    return results.get()


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    stuck = multiprocessing.Lock()
    stuck.acquire()
    results = multiprocessing.Queue()
    dataset = Dataset(stuck)
    workers = [multiprocessing.Process(target=worker_loop, args=(dataset, results), daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    for step in range(1, 6):
        print(f"step {step} | loss 2.0", flush=True)
        time.sleep(0.05)
    print("waiting for the next batch", flush=True)
    _get_data(results)
