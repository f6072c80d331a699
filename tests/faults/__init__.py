"""Fault-injection suite: real faults (cut links, churned logs, hostile text and tools) against the real parts."""
