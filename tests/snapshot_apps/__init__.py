"""Apps and states for the UI's pilot and snapshot tests (see scenarios.py)."""
