"""A run that dies of CUDA OOM: two step lines, then the real H200 traceback text, exit 1."""

import sys
import time

print("step 1 | loss 2.31 | 14.2K tok/s", flush=True)
print("step 2 | loss 2.29 | 14.2K tok/s", flush=True)
time.sleep(0.1)
sys.stderr.write(
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 GiB. GPU 0 has a total capacity "
    "of 139.80 GiB of which 39.29 GiB is free. Including non-PyTorch memory, this process has 100.51 GiB "
    "memory in use. Of the allocated memory 100.00 GiB is allocated by PyTorch, and 0 bytes is reserved by "
    "PyTorch but unallocated.\n"
)
sys.exit(1)
