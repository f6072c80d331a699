"""The agents as console.remote.program ships them, written to files so that a test runs one as a script."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from types import ModuleType

from console.remote.program import program_source

_FOLDER = tempfile.TemporaryDirectory(prefix="pulse-shipped-")


@functools.cache
def shipped(module: ModuleType) -> Path:
    """`module`'s shipped program (program_source: the console modules it imports, then its own text)
    as a file named as the module's is."""
    path = Path(_FOLDER.name) / Path(str(module.__file__)).name
    path.write_text(program_source(module))
    return path
