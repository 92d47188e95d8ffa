"""The sql environment (env.py): generated SQLite databases (schema.py, themes.py), questions with reference
queries (questions.py, joins.py, draw.py), a read-only executor (executor.py), result-set scoring (compare.py),
the generated `sql` task source (source.py)."""

from posttrain.envs.env import register_env

register_env("sql", "posttrain.domains.sql.env:SqlEnv")

from posttrain.domains.sql import source  # noqa: E402,F401  (registers the `sql` source)
