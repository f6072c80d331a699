"""A busy run whose stdout is block-buffered into its log (no -u) while its stderr warns: the log grows
only by warnings (stderr is unbuffered), every 2 s, like a torch run's UserWarnings and dynamo's
recompile notices, while its step lines wait in the 8 KiB buffer. Extra arguments are ignored.
"""

import itertools
import sys
import time
import warnings

for step in itertools.count(1):
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        pass
    print(f"step {step} | loss 2.31 | 14.2K tok/s")
    if step % 4 == 0:
        warnings.warn(f"None of the inputs have requires_grad=True (step {step})", UserWarning, stacklevel=1)
        sys.stderr.flush()
