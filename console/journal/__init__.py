"""The run journal: what a console or `pulse watch` saw of a run, kept in SQLite after it closes.

`store` owns the database (one per run, WAL, bounded by age and size), `recorder` turns a
RunState into journal rows once a second, `report` renders rows as text, JSON or Markdown,
and `headless` holds `pulse watch`, `pulse journal` and `pulse report`.
"""
