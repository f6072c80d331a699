"""An error Pulse did not expect: saved with its traceback under the state directory, told in one line.

`pulse` reports here any exception that reaches it, and the console the one Textual catches inside
the app (Textual prints it and returns from `App.run()` as if the user had quit: see `run_themed`
in console/ui/themes.py). Exit status EXIT_CRASH (70, sysexits' EX_SOFTWARE) keeps a crash apart
from the statuses commands document (`pulse check`: 1 a problem, 2 unreachable).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from console.paths import crashes_dir

EXIT_CRASH = 70


def save_crash(error: BaseException) -> Path:
    """Write `error`'s traceback to crashes_dir()/crash-YYYYmmdd-HHMMSS-PID.txt (owner-only); its path."""
    folder = crashes_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    text = f"pulse {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(error))
    # Locals and command lines can name hosts and paths: readable by the owner only, like the audit log.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def report_crash(error: BaseException) -> int:
    """Save `error` and say where in one line on standard error; EXIT_CRASH."""
    summary = f"{type(error).__name__}: {error}".splitlines()[0]
    try:
        path = save_crash(error)
    except OSError as exc:
        traceback.print_exception(error, file=sys.stderr)
        print(f"pulse: crashed ({summary}); could not save the traceback: {exc}", file=sys.stderr)
    else:
        print(f"pulse: crashed ({summary}); traceback saved in {path}", file=sys.stderr)
    return EXIT_CRASH

