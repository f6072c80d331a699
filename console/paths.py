"""Where Pulse keeps its files on the machine it runs on, by the platform's conventions (platformdirs).

On Linux: configuration under $XDG_CONFIG_HOME/pulse (~/.config/pulse): named runs in runs/NAME.toml,
the operator's own themes in themes/; what Pulse writes under $XDG_STATE_HOME/pulse (~/.local/state/pulse):
the audit log, saved py-spy dumps, crash reports. Functions, not constants: the environment is read
when a path is needed.
"""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_config_path, user_state_path

APP_NAME = "pulse"


def config_dir() -> Path:
    """Pulse's configuration folder (~/.config/pulse on Linux)."""
    return user_config_path(APP_NAME, appauthor=False)


def runs_dir() -> Path:
    """Named runs: `pulse NAME` reads NAME.toml here."""
    return config_dir() / "runs"


def user_themes_dir() -> Path:
    """The operator's own theme files, next to (and overriding by name) the built-in ones."""
    return config_dir() / "themes"


def state_dir() -> Path:
    """What Pulse writes for later (~/.local/state/pulse on Linux)."""
    return user_state_path(APP_NAME, appauthor=False)


def audit_log_path() -> Path:
    """The default audit log (a config's `audit_log` overrides it)."""
    return state_dir() / "audit.jsonl"


def dumps_dir() -> Path:
    """Where the dump screen saves py-spy dumps."""
    return state_dir() / "dumps"


def crashes_dir() -> Path:
    """Where an unhandled error's traceback is saved."""
    return state_dir() / "crashes"
