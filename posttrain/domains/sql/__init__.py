"""The sql environment (env.py): generated SQLite databases (schema.py, themes.py), questions with reference
queries (questions.py, joins.py, draw.py), a read-only executor (executor.py), result-set scoring (compare.py).
Importing this package registers the `sql` env; tasks/sql.py registers the `sql` task source."""

from posttrain.domains.sql import env  # noqa: F401  (registers "sql")
