"""The simulated machine the demo runs on: eight H200s and the state file the trainer shares.

The trainer writes its load per GPU to a small JSON state file after every step; the
stand-in nvidia-smi reads it. Both sides use only the standard library and this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

GPU_NAME = "NVIDIA H200"
GPU_COUNT = 8
TARGET_GPUS = (0, 1, 2, 3, 4)
DRAFTER_GPUS = (5, 6, 7)
MEMORY_TOTAL_MIB = 143771
POWER_LIMIT_W = 700.0
DRIVER_VERSION = "580.159.04"
#: GPU 0's UUID is the captured card's; the others follow its shape.
UUIDS = (
    "GPU-06eb1f4e-90e3-123f-e50b-b07664ee52f9",
    "GPU-1a7c3d92-4be1-07d5-8c2e-5f13a9d07b61",
    "GPU-2f9e8b14-c03a-6d7e-b251-0e8d4c7f3a92",
    "GPU-3c41d0a7-9e25-b8f3-4a6d-d17e2b95c0e8",
    "GPU-48b2f6e3-1d7c-a905-e3f8-62c0a4d918b7",
    "GPU-5d07a9c1-e6b4-3f82-9c1d-a8e57b3206f4",
    "GPU-6e93c2b8-07fd-d416-25a9-f4b1c08e7d53",
    "GPU-7f28e5d6-b3a1-9c07-e84b-1d69f2a0c5b3",
)
BUS_IDS = tuple(f"00000000:{bus:02X}:00.0" for bus in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB))

IDLE_POWER_W = 78.06
IDLE_SM_MHZ = 345
BUSY_SM_MHZ = 1980
IDLE_TEMPERATURE_C = 37
#: After the run's process is gone the driver takes a moment to release its memory.
RELEASE_S = 2.0


def write_state(path: str | Path, state: dict) -> None:
    """Replace the state file atomically, so a reader never sees half of it."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def read_state(path: str | Path) -> dict | None:
    """The trainer's last state, or None when it has written none yet."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie has ended: its GPU contexts are gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")
