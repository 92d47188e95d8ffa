"""The read-only SQL executor: one SELECT over a private in-memory copy of a task's database.

    result = run_query(db_bytes, "SELECT region, COUNT(*) FROM customers GROUP BY 1", timeout_s=3.0)
    result.columns, result.rows, result.more       # more: rows past max_rows (counted up to COUNT_CAP)
    run_query(db_bytes, "DELETE FROM orders")      # raises QueryError("tool_failed", "not authorized")

Every query gets its own connection and its own copy of the database (`deserialize` of the bytes
the generator built once), so nothing a query does can reach another query, another episode or
the scoring run. On that copy, in this order:
- limits: `PRAGMA query_only` (no write reaches even the copy), `temp_store=MEMORY` (sorts and
  temporary b-trees never touch the disk), a process-wide `hard_heap_limit` (sqlite allocations
  past it fail with "out of memory"), and per-connection limits on value length, SQL length,
  columns, expression depth, compound selects and attached databases (none);
- an authorizer that allows only reads: SELECT, READ, RECURSIVE and the functions in
  `SAFE_FUNCTIONS`; everything else (INSERT/UPDATE/DELETE, CREATE/DROP/ALTER, ATTACH/DETACH,
  PRAGMA, transactions, VACUUM, load_extension, randomness) is denied at prepare time;
- the text must start with SELECT, WITH or VALUES and be one statement (sqlite3 refuses a second);
- a progress handler aborts the query once `timeout_s` has passed (QueryError "tool_timeout"):
  a recursive CTE that never ends or a cartesian product of every table stops there;
- at most `max_rows` rows are kept (fetchmany); the rest are counted, not kept, up to COUNT_CAP.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass

from posttrain.core.errors import one_line

HEAP_LIMIT_BYTES = 512 << 20  # process-wide: sqlite's own allocations, every connection together
MAX_VALUE_BYTES = 100_000  # longest string or blob a query may build
COUNT_CAP = 100_000  # rows past max_rows are counted up to this many
PROGRESS_OPS = 2_000  # VM instructions between deadline checks
SAFE_FUNCTIONS = frozenset("""
abs avg count max min sum total group_concat round length lower upper substr substring trim ltrim rtrim replace
instr coalesce ifnull nullif iif typeof date time datetime julianday strftime unixepoch printf format char hex
unicode like glob quote soundex likely unlikely likelihood sqrt pow power floor ceil ceiling trunc log ln log10 log2
exp mod pi sign cast row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
json json_extract json_array_length json_type json_valid -> ->>
""".split())
_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: MAX_VALUE_BYTES,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 20_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 200,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 50,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 50_000,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
}
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
_LEADING = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.S)  # whitespace and comments
_heap_limited = False


class QueryError(Exception):
    """A query that failed: `kind` is a tool-error kind (tool_failed, tool_timeout), the message one line."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]  # at most max_rows
    more: int = 0  # rows past max_rows (at most COUNT_CAP)


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    if action in _ALLOWED:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in SAFE_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _limit_heap(conn: sqlite3.Connection) -> None:
    """PRAGMA hard_heap_limit is process-wide: set it once, never raising a lower limit set elsewhere."""
    global _heap_limited
    if not _heap_limited:
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > HEAP_LIMIT_BYTES:
            conn.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")
        _heap_limited = True


def open_readonly(db_bytes: bytes) -> sqlite3.Connection:
    """A private in-memory copy of the database, locked down (see the module docstring)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.deserialize(db_bytes)
    _limit_heap(conn)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    for limit, value in _LIMITS.items():
        conn.setlimit(limit, value)
    conn.set_authorizer(_authorize)
    return conn


def _check_text(sql: str) -> None:
    body = sql[_LEADING.match(sql).end():]
    word = re.match(r"[A-Za-z]+", body)
    if not body.strip():
        raise QueryError("tool_failed", "empty query")
    if word is None or word.group(0).upper() not in ("SELECT", "WITH", "VALUES"):
        first = (word.group(0) if word else body.strip()[:20])
        raise QueryError("tool_failed", f"only read queries (SELECT / WITH / VALUES) are allowed, not {first!r}")


def _query_message(error: Exception) -> str:
    """The tool-facing text of a failed query: sqlite's message (no type name), with two cases
    rephrased for the model."""
    if isinstance(error, MemoryError) or "out of memory" in str(error):
        return "out of memory: the query passed the memory bound"
    text = one_line(str(error)) or type(error).__name__
    if "one statement at a time" in text:
        return "one statement per call (the query holds more than one)"
    return text


def run_query(db_bytes: bytes, sql: str, *, timeout_s: float, max_rows: int = 50) -> QueryResult:
    """Runs one read-only query; QueryError(kind, message) when it fails, is refused or runs out of time."""
    _check_text(sql)
    deadline = time.monotonic() + timeout_s
    timed_out = False

    def progress() -> int:
        nonlocal timed_out
        if time.monotonic() > deadline:
            timed_out = True
            return 1  # non-zero interrupts the statement
        return 0

    conn = open_readonly(db_bytes)
    conn.set_progress_handler(progress, PROGRESS_OPS)
    try:
        cursor = conn.execute(sql)
        columns = tuple(d[0] for d in cursor.description or ())
        rows = tuple(cursor.fetchmany(max_rows))
        more = 0
        while more < COUNT_CAP:
            chunk = cursor.fetchmany(min(1000, COUNT_CAP - more))
            if not chunk:
                break
            more += len(chunk)
        return QueryResult(columns, rows, more)
    except (sqlite3.Error, sqlite3.Warning, OverflowError, MemoryError, ValueError) as e:
        if timed_out:
            raise QueryError("tool_timeout", f"the query ran past its {timeout_s:g} s limit") from None
        raise QueryError("tool_failed", _query_message(e)) from None
    finally:
        conn.close()
