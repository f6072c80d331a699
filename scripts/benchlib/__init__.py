"""Pieces of scripts/bench: the world it measures in, each measurement, and the report."""
