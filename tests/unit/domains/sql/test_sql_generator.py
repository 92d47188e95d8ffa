"""The sql task source: deterministic, varied, level-dependent, small tasks; options checked in one line."""

from __future__ import annotations

import json
import random
import re

import pytest

from posttrain.domains.sql.compare import has_top_level_order_by
from posttrain.domains.sql.draw import TEMPLATES, check
from posttrain.domains.sql.executor import run_query
from posttrain.domains.sql.questions import Names
from posttrain.domains.sql.schema import LEVEL_TABLES, MAX_ROWS, build_database
from posttrain.domains.sql.themes import THEMES
from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import HELD_OUT_SEED
from posttrain.tasks.registry import make_source_tasks


def tasks(n, seed=0, **options):
    return make_source_tasks("sql", n, seed, options)


def test_tasks_are_deterministic_and_follow_the_contract():
    a, b = tasks(6, seed=11, level=[1, 3, 5]), tasks(6, seed=11, level=[1, 3, 5])
    assert a == b
    assert [t.metadata["level"] for t in a] == [[1, 3, 5][s % 3] for s in range(11, 17)]
    t = a[1]
    assert t.id == f"sql/L{t.metadata['level']}/12" and t.domain == "sql" and t.env == "sql"
    assert t.verifiers == ("env_score",) and t.metadata["seed"] == 12
    assert {c["function"]["name"] for c in t.metadata["tools"]} == {"run_sql", "submit"}
    assert set(t.reference) == {"seed", "level", "rows", "theme", "sql", "decimals"}
    assert len(json.dumps(t.reference)) + len(t.prompt[0]["content"]) < 2000  # small: the DB is rebuilt, not shipped
    test = tasks(2, split="test", level=2)
    assert [x.metadata["seed"] for x in test] == [HELD_OUT_SEED, HELD_OUT_SEED + 1]


def test_database_rebuilds_identically_and_fast():
    build_database.cache_clear()
    first = build_database(5, 4, 40)
    build_database.cache_clear()
    again = build_database(5, 4, 40)
    assert first.data == again.data and first is not again
    assert build_database(5, 4, 40) is again  # cached
    assert build_database(6, 4, 40).data != first.data


def test_databases_have_types_nulls_cents_and_dates():
    db = build_database(3, 5, 80)
    f = db.table("f")
    assert {r: f.col(r).type for r in ("money", "opt", "date", "cat", "id")} == {
        "money": "REAL", "opt": "REAL", "date": "TEXT", "cat": "TEXT", "id": "INTEGER"}
    ddl = db.schema_text()
    assert "PRIMARY KEY" in ddl and "REFERENCES" in ddl and "80 rows" in ddl
    rows = run_query(db.data, f"SELECT typeof({f.col('money').name}), typeof({f.col('opt').name}), "
                     f"{f.col('date').name} FROM {f.name}", timeout_s=2, max_rows=100).rows
    assert {r[0] for r in rows} == {"real"} and "null" in {r[1] for r in rows}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", r[2]) for r in rows)
    assert any(round(v * 100) % 10 for v in f.values("money"))  # amounts with cents
    assert len(f.csv_text().splitlines()) == 81


def test_every_theme_and_name_variants_appear():
    seen = [build_database(s, 3, 40) for s in range(60)]
    assert {db.theme.name for db in seen} == set(THEMES) and len(THEMES) >= 5
    assert len({db.table("f").name for db in seen}) >= 12
    assert len({db.col("f", "money") for db in seen}) >= 10


def test_l3_questions_are_varied():
    pairs = {(t.prompt[0]["content"], t.reference["sql"]) for t in tasks(2000, level=3)}
    assert len(pairs) >= 1900


def test_levels_differ_in_tables_and_query_shape():
    for level in range(1, 6):
        assert {t.role for t in build_database(1, level, 40).tables} == set(LEVEL_TABLES[level])
    joins = {lv: sum(t.reference["sql"].count(" JOIN ") for t in tasks(60, level=lv)) / 60 for lv in range(1, 6)}
    assert joins[1] == joins[2] == 0 and joins[3] >= 0.9 and joins[5] > joins[3]
    by_level = {lv: [t.reference["sql"] for t in tasks(60, level=lv)] for lv in range(1, 6)}
    assert not any("GROUP BY" in q for q in by_level[1]) and all("GROUP BY" in q for q in by_level[2])
    assert all("HAVING" in q or "LIMIT" in q for q in by_level[4])
    assert sum(("WITH " in q or "(SELECT" in q or q.count(" JOIN ") >= 2) for q in by_level[5]) >= 40


def test_shipped_questions_pass_their_own_checks_and_order_flags_agree():
    for level in range(1, 6):
        for seed in range(40):
            db = build_database(seed, level, 40)
            names = Names(db)
            for template in TEMPLATES[level]:
                q = template(names, random.Random(seed))
                if q is None:
                    continue
                assert q.ordered == has_top_level_order_by(q.sql), q.sql
                if not check(db, q):  # a shippable question: a non-empty, non-degenerate answer
                    rows = run_query(db.data, q.sql, timeout_s=2).rows
                    assert rows and any(v is not None for r in rows for v in r)


def test_degenerate_questions_are_redrawn():
    from posttrain.domains.sql.questions import Question

    db = build_database(2, 1, 40)
    f = db.table("f")
    assert check(db, Question("?", f"SELECT {f.col('id').name} FROM {f.name} WHERE 0")) == "empty"
    assert check(db, Question("?", f"SELECT COUNT(*) FROM {f.name} WHERE {f.col('money').name} < 0")) == "zero"
    assert check(db, Question("?", f"SELECT {f.col('cat').name}, 1 AS k FROM {f.name} GROUP BY 1 ORDER BY k",
                              ordered=True, key=(1,))) == "ties in the order"


def test_bad_options_are_one_line_config_errors():
    for options, word in (({"level": 9}, "level"), ({"rows": 0}, "rows"), ({"rows": 5000}, "rows"),
                          ({"colour": 1}, "colour"), ({"rows": "many"}, "rows")):
        with pytest.raises(ConfigError) as e:
            tasks(1, **options)
        assert word in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no usable question") as e:  # one fact row: some seeds have no GROUP BY
        [tasks(1, seed=s, rows=1, level=2) for s in range(150)]
    assert "\n" not in str(e.value)


def test_tiny_and_large_tables_still_make_tasks():
    for rows in (1, 2, 3, 5):
        for level in range(1, 6):
            if not (rows == 1 and level == 2):
                assert len(tasks(20, rows=rows, level=level)) == 20
    big = [build_database(s, 5, MAX_ROWS) for s in range(30)]  # every theme, its name pools at their largest
    assert {db.theme.name for db in big} == set(THEMES) and {len(db.table("f").rows) for db in big} == {MAX_ROWS}
    assert all(len(set(t.values("name"))) == len(t.rows) for db in big for t in db.tables if t.has("name"))
    assert len(tasks(2, rows=MAX_ROWS, level=5)) == 2
