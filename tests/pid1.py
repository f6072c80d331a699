"""PID 1 of the PID namespace that scripts/test runs the tests in: `pid1.py CMD...` starts CMD
(pytest) as its only child and exits with its status.

As the namespace's init it reaps every orphan the tests leave (daemonized launches, the children
of killed SSH sessions), as a host's init would, so none lingers as a zombie child of pytest. It
passes SIGTERM and SIGHUP on to pytest: init receives only signals it handles, so without this a
`timeout` around the tests could never end them. Ctrl-C reaches pytest from the terminal itself.
When it exits, the kernel kills whatever the tests left in the namespace.
"""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    child = os.posix_spawnp(argv[0], argv, os.environ)
    for forwarded in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(forwarded, lambda signum, frame: os.kill(child, signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        pid, status = os.wait()  # any child: pytest, or an orphan to reap
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: pid1.py CMD [ARG...]")
    sys.exit(main(sys.argv[1:]))
