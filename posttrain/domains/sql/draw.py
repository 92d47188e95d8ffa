"""Drawing a task's question: a template of its level, checked on the database, re-drawn until usable.

    q = draw_question(db, seed=7, level=3)   # Question, or None when ATTEMPTS draws all failed `check`

Attempt i of (seed, level) draws from its own random stream ("sql-q/SEED/LEVEL/i"), so the draw
is deterministic. `check` refuses a question whose reference answer is empty, all NULL or a single
zero, has more than MAX_ANSWER_ROWS rows, is a GROUP BY answer with fewer than two groups, or asks
for an order that has ties (among the answer's rows, and at a LIMIT's cut, through the probe query
with LIMIT k + 1): such a question has no answer or more than one.
"""

from __future__ import annotations

import random

from posttrain.domains.sql import joins, questions
from posttrain.domains.sql.executor import QueryError, run_query
from posttrain.domains.sql.questions import Names, Question
from posttrain.domains.sql.schema import Database

MAX_ANSWER_ROWS = 30
ATTEMPTS = 60
TEMPLATES = {1: questions.LEVEL_1, 2: questions.LEVEL_2, 3: joins.LEVEL_3, 4: joins.LEVEL_4, 5: joins.LEVEL_5}


def check(db: Database, q: Question) -> str:
    """Why the question cannot ship ('' when it can)."""
    try:
        rows = run_query(db.data, q.sql, timeout_s=5.0, max_rows=MAX_ANSWER_ROWS + 1).rows
        probe = run_query(db.data, q.probe, timeout_s=5.0, max_rows=MAX_ANSWER_ROWS + 2).rows if q.probe else rows
    except QueryError as e:
        raise ValueError(f"sql: a reference query fails ({e}): {q.sql}") from None  # a template bug
    values = [v for r in rows for v in r]
    if not rows or all(v is None for v in values):
        return "empty"
    if len(values) == 1 and values[0] in (0, 0.0):
        return "zero"
    if len(rows) > MAX_ANSWER_ROWS:
        return "too many rows"
    if q.groups and len(rows) < 2:
        return "one group"
    if q.ordered and len({tuple(r[i] for i in q.key) for r in probe}) < len(probe):
        return "ties in the order"
    return ""


def draw_question(db: Database, seed: int, level: int) -> Question | None:
    names = Names(db)
    pool = TEMPLATES[level]
    for attempt in range(ATTEMPTS):
        rng = random.Random(f"sql-q/{seed}/{level}/{attempt}")
        q = rng.choice(pool)(names, rng)
        if q is not None and not check(db, q):
            return q
    return None
