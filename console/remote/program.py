"""Run a self-contained Python program on a target while keeping its stdin open.

`python3 -` would read the program from stdin up to EOF, leaving no stdin to watch.
Instead a one-line bootstrap reads exactly the program's bytes from stdin and runs it;
the rest of stdin stays open, so the program can exit when the channel closes (OpenSSH
does not deliver signals to a closed channel's command, so EOF is the only hang-up a
remote helper is sure to see).

An agent may import names from another console module that is itself standard library only
(console/observe/procfs.py): program_source ships that module's text before the agent's, as one
program, so the agent runs on the target as it runs here.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from pathlib import Path
from types import ModuleType

from console.remote.shell import quote
from console.remote.target import Channel, Target, TargetError

#: How long closing waits for a program to be gone before leaving it to exit by itself.
REAP_S = 5.0
#: A login shell's profile may print before the program starts (a banner, conda's notices); a
#: reader skips at most this much before the program's first line, then gives up on it.
BANNER_MAX_BYTES = 64 << 10

_BOOTSTRAP = (
    "import sys;n=int(sys.argv[1]);src=sys.stdin.buffer.read(n);del sys.argv[:2];"
    "exec(compile(src,sys.argv[0],'exec'),{'__name__':'__main__'})"
)


#: A shipped module's import of names from another console module, one statement at its top level.
_SHIPPED_IMPORT = re.compile(r"^from (console(?:\.\w+)+) import (?:\([^)]*\)|[^\n]*)\n", re.MULTILINE)
#: A `from __future__` line: Python takes it only at the top of a program.
_FUTURE_IMPORT = re.compile(r"^from __future__ import [^\n]*\n", re.MULTILINE)


def program_source(module: ModuleType) -> str:
    """The program shipped for `module`: the text of each console module it imports names from (and
    theirs, first), then its own, as one program.

    Each `from console.… import NAME, …` at a module's top level is dropped (the names are defined
    above it), as is every `from __future__` line after the first module's (each shipped module asks
    for the same ones). What one program cannot hold (another form of console import, a name
    defined twice, futures that differ) is refused by tests/test_agent_protocol.py, not here: this
    runs as the console starts.
    """
    parts: dict[str, str] = {}
    _gather(module.__name__, parts)
    texts = [_SHIPPED_IMPORT.sub("", text) for text in parts.values()]
    return "".join(texts[:1] + [_FUTURE_IMPORT.sub("", text) for text in texts[1:]])


def _gather(name: str, parts: dict[str, str]) -> None:
    """Add `name`'s shipped modules, then `name` itself, to `parts` (each once, in that order)."""
    if name in parts:
        return
    file = importlib.import_module(name).__file__
    if file is None:
        raise ValueError(f"{name} has no source file to ship")
    text = Path(file).read_text()
    for imported in _SHIPPED_IMPORT.finditer(text):
        _gather(imported.group(1), parts)
    parts[name] = text


def program_script(python: str, source: str, name: str, args: list[str]) -> str:
    """The bash line that starts `source` under `python` with `args` (exec: no shell left behind)."""
    size = len(source.encode())
    words = [quote(python), "-u", "-c", quote(_BOOTSTRAP), str(size), quote(name), *map(quote, args)]
    return "exec " + " ".join(words)


async def open_program(
    target: Target, source: str, args: list[str], *, name: str, python: str = "python3", login: bool = True
) -> Channel:
    """Start `source` on `target`; its stdin stays open until the channel is closed."""
    channel = await target.open(program_script(python, source, name, args), login=login)
    channel.write(source.encode())
    return channel


async def reap(channel: Channel) -> None:
    """After closing `channel`, wait briefly for its program to be gone, so none outlives its reader.

    If the transport is gone or slow, the program still exits on its own at stdin EOF.
    """
    try:
        async with asyncio.timeout(REAP_S):
            await channel.wait()
    except (TargetError, asyncio.TimeoutError):
        pass
