"""The reward: result-set equality of the submission with the reference (correct, wrong, adversarial)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from posttrain.envs.env import InfraError
from posttrain.domains.sql.compare import has_top_level_order_by, rows_match, values_match
from posttrain.domains.sql.env import score_state
from posttrain.domains.sql.schema import build_database
from posttrain.tasks.registry import make_source_tasks


def task_where(level: int, predicate, n: int = 200):
    return next(t for t in make_source_tasks("sql", n, 0, {"level": level}) if predicate(t))


def score(task, submitted):
    return score_state(task, {"queries": [], "submitted": submitted, "via": "submit"})


def names(task):
    db = build_database(task.reference["seed"], task.reference["level"], task.reference["rows"])
    return db, db.table("f")


def test_order_by_detection_ignores_subqueries_strings_and_comments():
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert has_top_level_order_by("with x as (select 1) select * from x order\n by 1")
    assert not has_top_level_order_by("SELECT * FROM (SELECT a FROM t ORDER BY a)")
    assert not has_top_level_order_by("SELECT 'ORDER BY' FROM t -- ORDER BY a")
    assert not has_top_level_order_by("SELECT a FROM t /* ORDER BY a */")


def test_value_comparison():
    assert values_match(3, 3.0) and values_match(0.1 + 0.2, 0.3) and values_match(None, None)
    assert not values_match(3, "3") and not values_match(None, 0) and not values_match(10.0, 10.01)
    assert values_match(12.3449, 12.34, decimals=2) and not values_match(12.36, 12.34, decimals=2)
    assert not values_match(5, 6) and values_match("a", "a") and not values_match("a", "A")


def test_rows_multisets_and_order():
    assert rows_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], ordered=False)[0]
    assert not rows_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], ordered=True)[0]
    assert not rows_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], ordered=False)[0]  # a multiset, not a set
    ok, why = rows_match([(1, 2)], [(1, 2, 3)], ordered=False)
    assert not ok and "columns" in why
    # near-equal floats that sort apart on rounded keys still match
    assert rows_match([(1.0000004, "b"), (1.0000006, "a")], [(1.0000006, "b"), (1.0000004, "a")], ordered=False)[0]


def test_the_reference_itself_and_a_rewritten_query_score_1():
    t = task_where(1, lambda t: re.match(r"SELECT COUNT\(\*\) FROM \w+ WHERE ", t.reference["sql"]) is not None)
    assert score(t, t.reference["sql"]).value == 1.0
    body = t.reference["sql"].split(" WHERE ", 1)[1]
    table = t.reference["sql"].split(" FROM ")[1].split()[0]
    rewritten = f"select sum(1) as how_many\nfrom {table} AS q where ({body})"
    s = score(t, rewritten)
    assert s.value == 1.0 and s.details["rows"] == 1 and s.details["ordered"] is False


def test_an_unordered_answer_in_another_order_scores_1_and_a_missing_row_0():
    t = task_where(2, lambda t: "ORDER BY" not in t.reference["sql"] and "GROUP BY" in t.reference["sql"])
    sql = t.reference["sql"]
    assert score(t, f"SELECT * FROM ({sql}) ORDER BY 1 DESC").value == 1.0
    missing = score(t, f"SELECT * FROM ({sql}) LIMIT (SELECT COUNT(*) - 1 FROM ({sql}))")
    assert missing.value == 0.0 and "rows, expected" in missing.details["error"]
    extra = score(t, f"SELECT *, 1 FROM ({sql})")
    assert extra.value == 0.0 and "columns" in extra.details["error"]


def test_the_wrong_order_scores_0_when_the_question_orders():
    t = task_where(4, lambda t: "LIMIT" in t.reference["sql"])
    sql = t.reference["sql"]
    assert score(t, sql).details["ordered"] is True
    flipped = score(t, f"SELECT * FROM ({sql}) ORDER BY 2 {'ASC' if ' DESC' in sql else 'DESC'}")
    assert flipped.value == 0.0 and "order" in flipped.details["error"]


def test_a_wrong_float_scores_0_and_an_unrounded_one_1():
    t = task_where(1, lambda t: t.reference["sql"].startswith("SELECT ROUND(SUM("))
    sql = t.reference["sql"]
    assert score(t, sql.replace("ROUND(SUM(", "(SUM(").replace("), 2)", "))")).value == 1.0  # asked to round: either
    assert score(t, sql.replace("ROUND(SUM(", "ROUND(0.01 + SUM(")).value == 0.0


def test_no_submission_a_failing_one_and_a_write_score_0_and_leave_the_db_intact():
    t = task_where(3, lambda t: True)
    db, f = names(t)
    before = db.data
    assert score(t, None).details["error"] == "no query submitted"
    assert score_state(t, {}).value == 0.0 and score_state(t, None).value == 0.0
    bad = score(t, "SELECT nope FROM nowhere")
    assert bad.value == 0.0 and "no such table: nowhere" in bad.details["error"]
    for attack in (f"DELETE FROM {f.name}", f"SELECT 1; DROP TABLE {f.name}",
                   f"WITH d AS (SELECT 1) DELETE FROM {f.name}"):
        assert score(t, attack).value == 0.0
    assert db.data == before and score(t, t.reference["sql"]).value == 1.0
    quick = dataclasses.replace(t, limits=dataclasses.replace(t.limits, tool_timeout=0.5))
    slow = score(quick, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")
    assert slow.value == 0.0 and "tool_timeout" in slow.details["error"]
    endless = score(quick, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
    assert endless.value == 0.0 and "more than 1000 rows" in endless.details["error"]


def test_a_broken_reference_is_an_infrastructure_error():
    t = task_where(1, lambda t: True)
    broken = dataclasses.replace(t, reference={**t.reference, "sql": "SELECT * FROM missing_table"})
    with pytest.raises(InfraError):
        score(broken, "SELECT 1")
