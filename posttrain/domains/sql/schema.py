"""A task's database: drawn from (seed, level, rows), written as CSV text, loaded into SQLite, serialized.

    db = build_database(seed=7, level=3, rows=40)     # cached (LRU): the same object for the same key
    db.data                                           # the SQLite file's bytes (executor.run_query runs on a copy)
    db.table("f").name, db.col("f", "money")          # "orders", "order_total": role -> drawn name
    db.schema_text()                                  # CREATE TABLE statements + row counts, for the prompt

Tables by level (themes.py has the roles): L1-L2 the facts and one entity (f, d1), L3 adds the
second entity (d2), L4-L5 the second fact table (x). `rows` is the fact table's row count; d1 has
rows/4 (at least 4), d2 rows/8 (at least 3; both fewer when a name pool is smaller), x about
`theme.x_share` of rows. Values: integer ids from a drawn offset, names unique within their table,
amounts with cents, ISO dates within a drawn year (or two), about a fifth of the optional amounts
and a tenth of d1's dates NULL.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import random
import sqlite3
from dataclasses import dataclass
from functools import lru_cache

from posttrain.domains.sql.themes import (
    CITIES, COMPANY, PEOPLE_FIRST, PEOPLE_LAST, THEMES, WORDS_A, WORDS_B, Theme,
)

MAX_ROWS = 1000
LEVEL_TABLES = {1: ("f", "d1"), 2: ("f", "d1"), 3: ("f", "d1", "d2"), 4: ("f", "d1", "d2", "x"),
                5: ("f", "d1", "d2", "x")}
SQL_TYPES = {"id": "INTEGER", "fk": "INTEGER", "qty": "INTEGER", "money": "REAL", "opt": "REAL"}


@dataclass(frozen=True)
class Column:
    role: str  # id, name, attr, date, money, qty, cat, opt, or the role of the table it refers to (d1, d2, f)
    name: str
    type: str  # INTEGER, REAL, TEXT


@dataclass(frozen=True)
class Table:
    role: str
    name: str
    singular: str
    columns: tuple[Column, ...]
    rows: tuple[tuple, ...]

    def col(self, role: str) -> Column:
        for c in self.columns:
            if c.role == role:
                return c
        raise KeyError(f"{self.name} has no {role} column")

    def has(self, role: str) -> bool:
        return any(c.role == role for c in self.columns)

    def values(self, role: str) -> list:
        i = [c.role for c in self.columns].index(role)
        return [r[i] for r in self.rows]

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.name for c in self.columns])
        writer.writerows(["" if v is None else v for v in row] for row in self.rows)
        return out.getvalue()


@dataclass(frozen=True)
class Database:
    theme: Theme
    tables: tuple[Table, ...]
    data: bytes  # the serialized SQLite database

    def table(self, role: str) -> Table:
        return next(t for t in self.tables if t.role == role)

    def col(self, table_role: str, role: str) -> str:
        return self.table(table_role).col(role).name

    def schema_text(self) -> str:
        with sqlite3.connect(":memory:") as conn:
            conn.deserialize(self.data)
            ddl = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        counts = ", ".join(f"{t.name}: {len(t.rows)} rows" for t in self.tables)
        return ";\n".join(ddl) + ";\n-- " + counts


def _names(rng: random.Random, kind: tuple[str, ...], n: int) -> list[str]:
    """n distinct names: from the pool itself, or made up for a generated kind (person, product, ...)."""
    if len(kind) > 1:
        return rng.sample(kind, min(n, len(kind)))
    districts = ("North", "South", "Central", "Harbour", "Old Town")
    capacity = {"person": len(PEOPLE_FIRST) * len(PEOPLE_LAST), "product": len(WORDS_A) * len(WORDS_B),
                "company": len(WORDS_A) * len(WORDS_B) * len(COMPANY), "city": len(CITIES) * len(districts),
                "handle": len(WORDS_A) * len(WORDS_B) * 99}[kind[0]]
    n = min(n, capacity // 2)  # drawing stays quick: at least half the names are still free
    make = {"person": lambda: f"{rng.choice(PEOPLE_FIRST)} {rng.choice(PEOPLE_LAST)}",
            "product": lambda: f"{rng.choice(WORDS_A)} {rng.choice(WORDS_B)}",
            "company": lambda: f"{rng.choice(WORDS_A)} {rng.choice(WORDS_B)}s {rng.choice(COMPANY)}",
            "city": lambda: f"{rng.choice(CITIES)} {rng.choice(districts)}",
            "handle": lambda: f"{rng.choice(WORDS_A).lower()}_{rng.choice(WORDS_B).lower()}{rng.randint(1, 99)}",
            }[kind[0]]
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        name = make()
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _money(rng: random.Random, lo: float, hi: float) -> float:
    return round(rng.uniform(lo, hi), 2)


def _date(start: dt.date, days: int) -> str:
    return (start + dt.timedelta(days=days)).isoformat()


def _pick(rng: random.Random, theme: Theme, table: str, role: str) -> str:
    return rng.choice(theme.columns[table][role])


def _entity(rng, theme: Theme, role: str, n: int, start: dt.date) -> Table:
    plural, singular = rng.choice(theme.tables[role])
    first = rng.choice((1, 1, 10, 100, 1000))
    cols = [Column("id", rng.choice(("id", f"{singular}_id")), "INTEGER"),
            Column("name", _pick(rng, theme, role, "name"), "TEXT"),
            Column("attr", _pick(rng, theme, role, "attr"), "TEXT")]
    names = _names(rng, theme.pools[f"{role}.name"], n)
    pool = rng.sample(theme.pools[f"{role}.attr"], rng.randint(3, len(theme.pools[f"{role}.attr"])))
    rows = [[first + i, names[i], rng.choice(pool)] for i in range(len(names))]
    if role == "d1":
        cols.append(Column("date", _pick(rng, theme, role, "date"), "TEXT"))
        for r in rows:
            r.append(None if rng.random() < 0.1 else _date(start, -rng.randint(30, 900)))
    return Table(role, plural, singular, tuple(cols), tuple(tuple(r) for r in rows))


def _with_key(table: Table, ref: Table, column_name: str, rng: random.Random) -> Table:
    """`table` with a key column into `ref` (every row refers to one of ref's rows)."""
    ids = ref.values("id")
    cols = table.columns[:3] + (Column(ref.role, column_name, "INTEGER"),) + table.columns[3:]
    rows = tuple(r[:3] + (rng.choice(ids),) + r[3:] for r in table.rows)
    return Table(table.role, table.name, table.singular, cols, rows)


def _facts(rng, theme: Theme, n: int, start: dt.date, span: int, d1: Table, d2: Table | None) -> Table:
    plural, singular = rng.choice(theme.tables["f"])
    first = rng.choice((1, 1, 500, 5000, 10001))
    cols = [Column("id", rng.choice(("id", f"{singular}_id")), "INTEGER"),
            Column("d1", f"{d1.singular}_id", "INTEGER")]
    if d2 is not None:
        cols.append(Column("d2", f"{d2.singular}_id", "INTEGER"))
    cols += [Column("date", _pick(rng, theme, "f", "date"), "TEXT"),
             Column("money", _pick(rng, theme, "f", "money"), "REAL")]
    if "qty" in theme.columns["f"]:
        cols.append(Column("qty", _pick(rng, theme, "f", "qty"), "INTEGER"))
    cols += [Column("cat", _pick(rng, theme, "f", "cat"), "TEXT"), Column("opt", _pick(rng, theme, "f", "opt"), "REAL")]
    cats = rng.sample(theme.pools["f.cat"], rng.randint(min(3, len(theme.pools["f.cat"])), len(theme.pools["f.cat"])))
    weights = [rng.uniform(0.5, 3.0) for _ in cats]
    d1_ids = d1.values("id")
    busy = rng.sample(d1_ids, max(1, len(d1_ids) // 3))  # a third of the entities get most of the facts
    rows = []
    for i in range(n):
        row = [first + i, rng.choice(busy if rng.random() < 0.5 else d1_ids)]
        if d2 is not None:
            row.append(rng.choice(d2.values("id")))
        row += [_date(start, rng.randint(0, span)), _money(rng, *theme.money)]
        if "qty" in theme.columns["f"]:
            row.append(rng.randint(1, 20))
        row += [rng.choices(cats, weights)[0], None if rng.random() < 0.2 else _money(rng, *theme.opt)]
        rows.append(tuple(row))
    return Table("f", plural, singular, tuple(cols), tuple(rows))


def _second_facts(rng, theme: Theme, f: Table) -> Table:
    plural, singular = rng.choice(theme.tables["x"])
    cols = (Column("id", rng.choice(("id", f"{singular}_id")), "INTEGER"), Column("f", f"{f.singular}_id", "INTEGER"),
            Column("date", _pick(rng, theme, "x", "date"), "TEXT"),
            Column("money", _pick(rng, theme, "x", "money"), "REAL"))
    rows, next_id = [], rng.choice((1, 1, 900, 70001))
    ledger = theme.name == "ledger"
    for fid, day, amount in zip(f.values("id"), f.values("date"), f.values("money")):
        if rng.random() >= theme.x_share:
            continue
        for _ in range(1 if ledger or rng.random() < 0.75 else 2):
            if ledger:  # the bank's copy: mostly the same amount, sometimes off by a fee or a typo
                value = amount if rng.random() < 0.8 else round(amount + rng.choice((-1, 1)) * rng.uniform(0.01, 40), 2)
            else:
                value = round(amount * rng.uniform(0.05, 0.9), 2)
            rows.append((next_id, fid, _date(dt.date.fromisoformat(day), rng.randint(0, 20)), value))
            next_id += 1
    return Table("x", plural, singular, cols, tuple(rows))


def _load(tables: tuple[Table, ...]) -> bytes:
    """CREATE TABLE with declared types and keys, the CSV text parsed back with those types, serialized."""
    conn = sqlite3.connect(":memory:")
    by_role = {t.role: t for t in tables}
    for t in tables:
        defs = []
        for c in t.columns:
            kind = "INTEGER" if c.role in ("d1", "d2", "f") else c.type
            ref = by_role.get(c.role) if c.role in ("d1", "d2", "f") else None
            key = f" REFERENCES {ref.name}({ref.col('id').name})" if ref else ""
            extra = " PRIMARY KEY" if c.role == "id" else key
            defs.append(f"{c.name} {kind}{extra}")
        conn.execute(f"CREATE TABLE {t.name} (\n  " + ",\n  ".join(defs) + "\n)")
        reader = csv.reader(io.StringIO(t.csv_text()))
        next(reader)
        parse = [int if c.type == "INTEGER" else float if c.type == "REAL" else str for c in t.columns]
        rows = [[None if v == "" else p(v) for p, v in zip(parse, row)] for row in reader]
        conn.executemany(f"INSERT INTO {t.name} VALUES ({', '.join('?' * len(t.columns))})", rows)
    conn.commit()
    data = conn.serialize()
    conn.close()
    return data


@lru_cache(maxsize=64)
def build_database(seed: int, level: int, rows: int) -> Database:
    rng = random.Random(f"sql-db/{seed}/{level}/{rows}")
    theme = THEMES[rng.choice(sorted(THEMES))]
    year = rng.randint(2018, 2024)
    start, span = dt.date(year, 1, 1), rng.choice((364, 364, 545, 729))  # one year, or up to two
    n_d1, n_d2 = max(4, rows // 4), max(3, rows // 8)
    d2 = _entity(rng, theme, "d2", n_d2, start)
    d1 = _entity(rng, theme, "d1", n_d1, start)
    roles = LEVEL_TABLES[level]
    chain = theme.shape == "chain" and "d2" in roles
    if chain:
        d1 = _with_key(d1, d2, f"{d2.singular}_id", rng)
    f = _facts(rng, theme, rows, start, span, d1, d2 if theme.shape == "star" and "d2" in roles else None)
    tables = (f, d1) + ((d2,) if "d2" in roles else ()) + ((_second_facts(rng, theme, f),) if "x" in roles else ())
    return Database(theme, tables, _load(tables))
