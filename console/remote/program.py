"""Run a self-contained Python program on a target while keeping its stdin open.

`python3 -` would read the program from stdin up to EOF, leaving no stdin to watch.
Instead a one-line bootstrap reads exactly the program's bytes from stdin and runs it;
the rest of stdin stays open, so the program can exit when the channel closes (OpenSSH
does not deliver signals to a closed channel's command, so EOF is the only hang-up a
remote helper is sure to see).
"""

from __future__ import annotations

import asyncio

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
