"""The read-only executor: writes, schema changes, ATTACH, PRAGMA, extensions and chained statements are
refused; runaway queries stop at the time limit; output is capped; the database never changes."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest

from posttrain.domains.sql.executor import COUNT_CAP, HEAP_LIMIT_BYTES, QueryError, open_readonly, run_query
from posttrain.domains.sql.schema import build_database

DB = build_database(4, 5, 40)
F = DB.table("f")


def content_digest(data: bytes) -> str:
    """Every table's rows, in order: what a successful write would change."""
    conn = sqlite3.connect(":memory:")
    conn.deserialize(data)
    h = hashlib.sha256()
    for (name,) in conn.execute("SELECT name FROM sqlite_master ORDER BY name"):
        h.update(repr((name, conn.execute(f"SELECT * FROM {name} ORDER BY rowid").fetchall())).encode())
    conn.close()
    return h.hexdigest()


BEFORE = content_digest(DB.data)


def refused(sql: str, kind: str = "tool_failed", timeout_s: float = 2.0) -> str:
    with pytest.raises(QueryError) as e:
        run_query(DB.data, sql, timeout_s=timeout_s)
    assert e.value.kind == kind, (sql, str(e.value))
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("sql", [
    f"INSERT INTO {F.name} ({F.col('id').name}) VALUES (999999)",
    f"UPDATE {F.name} SET {F.col('money').name} = 0",
    f"DELETE FROM {F.name}",
    "CREATE TABLE evil (x)",
    "CREATE TEMP TABLE evil AS SELECT 1",
    f"DROP TABLE {F.name}",
    f"ALTER TABLE {F.name} RENAME TO gone",
    "ATTACH DATABASE '/tmp/x.db' AS x",
    "PRAGMA writable_schema = ON",
    "PRAGMA query_only = OFF",
    "VACUUM INTO '/tmp/sql_env_copy.db'",
    "BEGIN",
    f"REPLACE INTO {F.name} ({F.col('id').name}) VALUES (1)",
])
def test_writes_and_schema_changes_are_refused(sql):
    refused(sql)


def test_disguised_writes_are_refused_by_the_authorizer():
    # these start like reads, so only the authorizer (and query_only) stop them
    assert "not authorized" in refused(f"WITH d AS (SELECT 1) DELETE FROM {F.name}")
    assert "load_extension" in refused("SELECT load_extension('/tmp/evil.so')")
    assert "not authorized" in refused("SELECT * FROM pragma_table_info('x')")
    refused("SELECT randomblob(10)")
    refused("SELECT fts3_tokenizer('simple')")
    # chained statements: the second never runs
    assert "one statement" in refused(f"SELECT 1; DROP TABLE {F.name}")
    assert "one statement" in refused(f"SELECT 1; DELETE FROM {F.name}; --")


def test_the_connection_itself_is_locked_down():
    conn = open_readonly(DB.data)
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute(f"DELETE FROM {F.name}")
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute("PRAGMA query_only = OFF")
    assert conn.getlimit(sqlite3.SQLITE_LIMIT_ATTACHED) == 0
    conn.close()
    # the memory bound is process-wide: any connection now reads it back
    other = sqlite3.connect(":memory:")
    assert 0 < other.execute("PRAGMA hard_heap_limit").fetchone()[0] <= HEAP_LIMIT_BYTES
    other.close()


def test_runaway_queries_stop_at_the_time_limit():
    started = time.monotonic()
    message = refused("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r",
                      kind="tool_timeout", timeout_s=0.8)
    assert "0.8 s limit" in message
    assert time.monotonic() - started < 1.8
    started = time.monotonic()
    t = F.name
    with pytest.raises(QueryError) as e:
        run_query(DB.data, f"SELECT COUNT(*) FROM {t} a, {t} b, {t} c, {t} d, {t} e", timeout_s=0.5)
    assert e.value.kind == "tool_timeout" and time.monotonic() - started < 1.5


def test_a_query_past_the_memory_bound_fails_cleanly():
    conn = sqlite3.connect(":memory:")
    limit = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
    conn.execute(f"PRAGMA hard_heap_limit = {64 << 20}")  # process-wide: lowered for this test only
    try:
        hog = ("WITH RECURSIVE r(n, s) AS (SELECT 1, 'x' UNION SELECT n + 1, printf('%.5000c', 'y') || n FROM r) "
               "SELECT MAX(n) FROM r")
        assert "out of memory" in refused(hog, timeout_s=20.0)
    finally:
        conn.execute(f"PRAGMA hard_heap_limit = {limit}")
        conn.close()
    assert run_query(DB.data, "SELECT 1", timeout_s=1.0).rows == ((1,),)


def test_huge_results_are_capped_and_counted():
    t = F.name
    result = run_query(DB.data, f"SELECT * FROM {t} a, {t} b, {t} c", timeout_s=5.0, max_rows=50)
    assert len(result.rows) == 50 and result.more == min(COUNT_CAP, 40 ** 3 - 50)
    assert "too big" in refused(f"SELECT group_concat(printf('%.1000c', 'x')) FROM {t} a, {t} b")


def test_reads_work_and_the_schema_is_discoverable():
    result = run_query(DB.data, "SELECT name, sql FROM sqlite_master WHERE type = 'table'", timeout_s=2.0)
    assert {r[0] for r in result.rows} == {t.name for t in DB.tables} and "REAL" in result.rows[0][1]
    result = run_query(DB.data, f"  -- a comment\n/* another */ SELECT COUNT(*) FROM {F.name};", timeout_s=2.0)
    assert result.rows == ((40,),) and len(result.columns) == 1
    assert run_query(DB.data, "VALUES (1, 'a')", timeout_s=2.0).rows == ((1, "a"),)


def test_a_malformed_query_names_sqlites_error():
    assert "syntax error" in refused("SELECT * FROM WHERE")
    assert "only read queries" in refused("SELEC 1")
    assert "no such column: nope" in refused(f"SELECT nope FROM {F.name}")
    assert "no such table: nope" in refused("SELECT * FROM nope")


def test_the_database_is_unchanged_after_every_attack():
    for sql in (f"DELETE FROM {F.name}", f"SELECT 1; DROP TABLE {F.name}", "PRAGMA writable_schema = ON",
                f"WITH d AS (SELECT 1) UPDATE {F.name} SET {F.col('money').name} = 0"):
        with pytest.raises(QueryError):
            run_query(DB.data, sql, timeout_s=2.0)
    assert content_digest(DB.data) == BEFORE
    assert content_digest(build_database(4, 5, 40).data) == BEFORE
    assert run_query(DB.data, f"SELECT COUNT(*) FROM {F.name}", timeout_s=2.0).rows == ((40,),)
