"""console/ui/start.py: the run's sources start before the UI loads, and the journal sees all they bring.

A real run writing a real log, followed by the real monitor on this machine; the UI's import is
what would take the time, so the sources run here alone, as they do while it loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from console.config import Config, GpuConfig, RunConfig
from console.journal.store import journal_path, open_for_reading, read_entries
from console.ui.start import start_sources
from tests.test_agent import spawn, unique_name  # noqa: F401  (spawn is a fixture)
from tests.test_sampler import until

HEALTHY = Path(__file__).parent / "procs" / "healthy.py"
CRASHED_BEFORE = (
    "Traceback (most recent call last):\n"
    '  File "/w/train.py", line 12, in <module>\n'
    "RuntimeError: the data loader ran out of shards\n"
)


async def test_what_arrives_while_the_ui_loads_is_journaled(spawn, tmp_path: Path, monkeypatch) -> None:
    """The journal opens on the empty state before the monitor starts: a problem already in the
    log's backlog, which arrives within milliseconds, is journaled (a journal opened after it
    took it for history from before the console and left it out)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    name = unique_name()
    log = tmp_path / "run.log"
    log.write_text(CRASHED_BEFORE)
    spawn([sys.executable, str(HEALTHY), "--interval", "0.1", f"--tag={name}"], stdout=log.open("a"))
    config = Config(run=RunConfig(name=name, match=rf"--tag={name}\b", log=str(log)), gpus=GpuConfig(source="none", poll_s=0.2))
    sources = await start_sources(config)
    try:
        await until(lambda: len(sources.state.lines) > 5 and sources.state.latest is not None, "the backlog and new lines")
        sources.watch.observe()
    finally:
        await sources.stop()
    entries = read_entries(open_for_reading(journal_path(config)))
    problems = [e.data["problem"] for e in entries if e.kind == "problem"]
    assert problems == ["traceback"], [(e.kind, e.text) for e in entries]
