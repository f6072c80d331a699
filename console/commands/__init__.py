"""The headless commands, one module each: what `pulse check`, `classify`, `dump`, `restart`,
`warmup`, `watch`, `journal` and `report` run once console/cli.py has parsed their flags.

`check` and `actions` act on one machine; `fleet_check` and `fleet_actions` on a Slurm job or a
host list; `journal` is `watch` (journal and alert without a screen), `journal` and `report`.
"""
