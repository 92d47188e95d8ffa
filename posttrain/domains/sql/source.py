"""The sql task source: generated data-analysis questions over SQLite, run by the `sql` env.

    tasks = make_source_tasks("sql", n=8, seed=0, options={"level": 3})                  # train seeds
    tasks = make_source_tasks("sql", n=8, seed=0, options={"level": [4, 5], "split": "test", "rows": 80})

One task per (seed, level, rows): the database (domains/sql/schema.py) and the question with its
reference query (domains/sql/draw.py) are drawn from them; the task carries only the question and
reference {"seed", "level", "rows", "theme", "sql", "decimals"}, from which the env rebuilds the
database at reset and at scoring. Options: `rows` (int, the fact table's row count, 1..1000,
default 40); a (seed, rows) that gives no usable question (tiny tables) is a ConfigError.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from posttrain.domains.sql.draw import draw_question
from posttrain.domains.sql.env import TOOLS
from posttrain.domains.sql.schema import MAX_ROWS, build_database
from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import OracleTurn, calls, register_generated
from posttrain.core.types import Limits, Task

LIMITS = Limits(max_turns=6, max_new_tokens=256, seconds=60.0, tool_timeout=3.0)
INSTRUCTION = "Answer with one SQL query: explore with run_sql, then call submit with your final query."


def sql_oracle(task: Task) -> list[OracleTurn]:
    """A look at the question's main table, then the reference query."""
    look = f"SELECT * FROM {task.metadata['table']} LIMIT 3"
    return [OracleTurn(calls=calls(("run_sql", {"query": look}))),
            OracleTurn(calls=calls(("submit", {"query": task.reference["sql"]})))]


@register_generated("sql", levels=5, oracle=sql_oracle, options={"rows": (int, 40)},
                    description="SQL data analysis over a generated SQLite database, scored by result-set equality")
def sql_task(seed: int, level: int, options: Mapping[str, Any]) -> Task:
    rows = options["rows"]
    if not 1 <= rows <= MAX_ROWS:
        raise ConfigError(f"sql: option rows must be in 1..{MAX_ROWS}, got {rows}")
    db = build_database(seed, level, rows)
    question = draw_question(db, seed, level)
    if question is None:
        raise ConfigError(f"sql: no usable question for seed {seed} at level {level} with rows {rows} "
                          "(the tables are too small; use more rows)")
    main = re.search(r"\bFROM\s+(\w+)", question.sql).group(1)  # the table the oracle looks at first
    return Task(
        id=f"sql/L{level}/{seed}",
        domain="sql",
        prompt=({"role": "user", "content": f"{question.text}\n\n{INSTRUCTION}"},),
        reference={"seed": seed, "level": level, "rows": rows, "theme": db.theme.name, "sql": question.sql,
                   "decimals": question.decimals},
        verifiers=("env_score",),
        env="sql",
        limits=LIMITS,
        metadata={"tools": TOOLS, "level": level, "seed": seed, "theme": db.theme.name, "table": main},
    )
