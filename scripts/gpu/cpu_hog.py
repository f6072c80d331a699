"""A busy loop on the CPU, forever (pinned with taskset beside a run to starve it of its cores)."""

while True:
    pass
