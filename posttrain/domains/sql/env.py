"""The sql environment: a generated SQLite database, a read-only `run_sql` tool, a SQL query as the answer.

    env = make_env("sql", resources)               # a task of the `sql` source (domains/sql/source.py)
    messages = await env.reset(task)               # system (instructions + schema) + the question
    obs, done, info = await env.step(action)       # run_sql -> a text table; submit -> done
    scores = env.score(task, env.state())          # the submission's rows against the reference's

Reset rebuilds the database from `task.reference` ({"seed", "level", "rows", "sql", ...}; cached,
about 1 ms). Tools: `run_sql(query)` answers with the rows as a text table (header, at most
SHOW_ROWS rows, then how many more), or an error observation: tool_failed with SQLite's message
(or the executor's refusal of a write), tool_timeout past `limits.tool_timeout`, bad_arguments for
a missing or non-string query. `submit(query)` records the final answer and ends the episode (calls
after it in the same turn are not run). A turn without calls ends it too; its answer is then the
last ```sql fenced block of the turn's text, if any. Every query runs on its own read-only copy of
the database (executor.py), in a worker thread (Resources.run_blocking).

State: {"queries": [the run_sql queries], "submitted": the answer or None, "via": "submit" |
"fenced" | None}. Score, from the state alone: the reference and the submission run through the
same executor with the same limits (SCORE_ROWS rows at most) and compare as compare.py says: 1.0 or
0.0, details {"error"?, "rows", "expected_rows", "ordered"}. No submission, a failing or timed-out
submission: 0 with the reason. A reference query that fails is the infrastructure's fault
(InfraError: the episode is retried, never scored).
"""

from __future__ import annotations

import re
import time
from typing import Any, Mapping

from posttrain.envs.env import Action, InfraError, Observation, Resources, StepResult, error_observation
from posttrain.domains.sql.compare import has_top_level_order_by, rows_match
from posttrain.domains.sql.executor import COUNT_CAP, QueryError, QueryResult, run_query
from posttrain.domains.sql.schema import Database, build_database
from posttrain.core.types import Message, Score, Task

SHOW_ROWS = 30  # rows shown by run_sql
SCORE_ROWS = 1000  # rows compared at scoring; a submission with more fails
CELL_CHARS = 60
_FENCE = re.compile(r"```sql\s*\n?(.*?)```", re.S | re.I)


def _tool(name: str, description: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "description": "one SQLite SELECT statement"}},
        "required": ["query"]}}}


TOOLS = [
    _tool("run_sql", "Run one read-only SQLite query (SELECT / WITH) on the database and see its rows."),
    _tool("submit", "Submit the SQL query whose result answers the question. Ends the episode."),
]
SYSTEM = """You are a data analyst. Answer the user's question about the SQLite database below by writing one SQL query.
Call run_sql(query) to explore the data (read-only: SELECT or WITH; one statement per call;
at most {rows} rows are shown). When your query is right, call submit(query) with it: its result
is compared with the expected result (the values and the number of columns must match, column
names do not matter, row order matters only when the question asks for an order).
Submitting ends the episode.

Schema ({theme} data):
```sql
{schema}
```"""


def _cell(v: Any) -> str:
    text = "NULL" if v is None else repr(v) if isinstance(v, float) else str(v)
    text = " ".join(text.split())
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 3] + "..."


def format_result(result: QueryResult) -> str:
    """Header, rows (' | ' between cells), then the row count, and how many more rows there were."""
    lines = [" | ".join(result.columns)] + [" | ".join(_cell(v) for v in row) for row in result.rows]
    shown = len(result.rows)
    if result.more:
        more = f"at least {result.more}" if result.more >= COUNT_CAP else str(result.more)
        lines.append(f"({shown} rows shown, {more} more)")
    else:
        lines.append(f"({shown} row{'s' if shown != 1 else ''})")
    return "\n".join(lines)


def fenced_sql(text: str) -> str | None:
    """The last ```sql ... ``` block of a text, stripped, or None."""
    blocks = [b.strip() for b in _FENCE.findall(text or "")]
    return blocks[-1] if blocks and blocks[-1] else None


def database_for(reference: Mapping[str, Any]) -> Database:
    try:
        return build_database(int(reference["seed"]), int(reference["level"]), int(reference["rows"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"not an sql task reference (needs seed, level, rows): {e}") from None


class SqlEnv:
    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self.tools = TOOLS
        self._task: Task | None = None
        self._db: Database | None = None
        self._queries: list[str] = []
        self._submitted: str | None = None
        self._via: str | None = None

    async def reset(self, task: Task) -> list[Message]:
        if not isinstance(task.reference, Mapping) or "sql" not in task.reference:
            raise ValueError(f"task {task.id!r}: not an sql task (its reference has no reference query)")
        self._db = await self._resources.run_blocking(database_for, task.reference)
        self._task, self._queries, self._submitted, self._via = task, [], None, None
        system = SYSTEM.format(rows=SHOW_ROWS, theme=self._db.theme.name, schema=self._db.schema_text())
        return [{"role": "system", "content": system}, *task.prompt]

    async def _run_sql(self, query: str) -> Observation:
        assert self._db is not None and self._task is not None
        try:
            result = await self._resources.run_blocking(
                lambda: run_query(self._db.data, query, timeout_s=self._task.limits.tool_timeout, max_rows=SHOW_ROWS))
        except QueryError as e:
            return error_observation(e.kind, str(e), "run_sql")
        return Observation(format_result(result), name="run_sql")

    async def step(self, action: Action) -> StepResult:
        assert self._task is not None, "step() before reset()"
        started = time.perf_counter()
        observations = [error_observation("malformed", e.message) for e in action.errors]
        if not action.tool_calls:
            if action.errors:  # only unreadable calls: the model sees why and goes on
                return StepResult(observations, False, {})
            self._submitted = fenced_sql(action.content or action.text)
            self._via = "fenced" if self._submitted is not None else None
            return StepResult([], True, {})
        done = False
        for call in action.tool_calls:
            query = call.arguments.get("query") if isinstance(call.arguments, Mapping) else None
            if call.name not in ("run_sql", "submit"):
                observations.append(error_observation("unknown_tool", f"no tool named {call.name!r} "
                                                      "(tools: run_sql, submit)", call.name))
            elif not isinstance(query, str) or not query.strip():
                observations.append(error_observation("bad_arguments", f"{call.name}: 'query' must be a non-empty "
                                                      "string", call.name))
            elif call.name == "run_sql":
                self._queries.append(query)
                observations.append(await self._run_sql(query))
            else:
                self._submitted, self._via, done = query, "submit", True
                observations.append(Observation("Submitted.", name="submit"))
                break
        return StepResult(observations, done, {"env_seconds": time.perf_counter() - started,
                                               "tool_calls": len(action.tool_calls)})

    def state(self) -> dict:
        return {"queries": list(self._queries), "submitted": self._submitted, "via": self._via}

    def score(self, task: Task, state: Any) -> list[Score]:
        return [score_state(task, state)]

    async def close(self) -> None:
        self._db = None


def score_state(task: Task, state: Any) -> Score:
    """The reward from a saved state alone (module docstring)."""
    ref = task.reference
    ordered = has_top_level_order_by(ref["sql"])
    decimals = ref.get("decimals")
    db = database_for(ref)
    timeout = task.limits.tool_timeout
    try:
        expected = run_query(db.data, ref["sql"], timeout_s=timeout, max_rows=SCORE_ROWS)
    except QueryError as e:
        raise InfraError(f"sql: the reference query of {task.id} failed ({e})") from None
    details: dict[str, Any] = {"rows": 0, "expected_rows": len(expected.rows), "ordered": ordered}
    submitted = state.get("submitted") if isinstance(state, Mapping) else None
    if not isinstance(submitted, str) or not submitted.strip():
        return Score(0.0, "env_score", {**details, "error": "no query submitted"})
    try:
        got = run_query(db.data, submitted, timeout_s=timeout, max_rows=SCORE_ROWS)
    except QueryError as e:
        return Score(0.0, "env_score", {**details, "error": f"the submitted query failed ({e.kind}): {e}"})
    details["rows"] = len(got.rows) + got.more
    if got.more:
        return Score(0.0, "env_score", {**details, "error": f"more than {SCORE_ROWS} rows"})
    if len(got.columns) != len(expected.columns):
        return Score(0.0, "env_score", {**details, "error": f"{len(got.columns)} columns, expected "
                                                            f"{len(expected.columns)}"})
    same, why = rows_match(expected.rows, got.rows, ordered=ordered, decimals=decimals)
    return Score(1.0 if same else 0.0, "env_score", details if same else {**details, "error": why})

