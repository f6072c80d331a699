"""The bench's idle window counts a tool's frames: bursts of output, however a burst is split into writes."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from benchlib.phases import TREE_PARTS, Terminal, tree_idle  # noqa: E402

#: Five frames a second, each written as three pieces in quick succession (as a frame's escape
#: sequences and text come), for longer than the window.
DRAWER = (
    "import sys, time\n"
    "print('ready', flush=True)\n"
    "for _ in range(20):\n"
    "    for piece in ('\\x1b[1;1H', 'frame', '\\x1b[2;1H'):\n"
    "        sys.stdout.write(piece); sys.stdout.flush(); time.sleep(0.002)\n"
    "    time.sleep(0.2)\n"
)


def test_a_window_counts_each_burst_of_output_as_one_frame_beside_the_trees_cpu():
    terminal = Terminal([sys.executable, "-c", DRAWER], dict(os.environ), size=(80, 24))
    figures = tree_idle(terminal, 2.0, ready=b"ready", warm_s=0.3)
    assert set(figures) == {"total", "other", *TREE_PARTS, "frames_per_s"}
    # About 4.9 bursts a second (each 0.2 s plus its writes); never one a write (14.6 a second).
    assert 3.0 <= figures["frames_per_s"] <= 8.0
    assert figures["total"] >= 0
