"""Questions over a task's database, by level, each with its reference query.

    LEVEL_1, LEVEL_2: templates, template(names, rng) -> Question | None  (joins.py: LEVEL_3..5)
    q = draw.draw_question(db, seed=7, level=3)    # Question(text, sql, ordered, decimals, ...)

Levels: L1 one table, a filter with COUNT / SUM / AVG / MAX or a list of ids; L2 GROUP BY with
aggregates on one table; L3 a join of two tables (grouped, filtered, distinct names, an argmax);
L4 join + GROUP BY + HAVING + ORDER BY / LIMIT (top-k with a deterministic order); L5 three tables,
subqueries or CTEs, ratios and shares, and the reconciliation of the second fact table against the
first (facts without a match, ledger entries whose bank amount differs).

A template draws its parameters (a category, a threshold, a month, k) from the data, so the same
template gives different questions on different seeds; draw.py checks each on the database and
re-draws the empty, degenerate and ambiguous ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from posttrain.domains.sql.schema import Database

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
ROUND = "Round amounts to 2 decimals."


@dataclass(frozen=True)
class Question:
    text: str
    sql: str
    ordered: bool = False  # the question asks for an order (the reference's ORDER BY is at top level)
    decimals: int | None = None  # the question asks to round to this many decimals
    key: tuple[int, ...] = ()  # ordered: the columns whose values must be distinct in the answer
    probe: str = ""  # ordered with LIMIT k: the same query with LIMIT k + 1 (no tie at the cut)
    groups: bool = False  # a GROUP BY answer: at least two rows


class Names:
    """Names of one database, by role: n.f, n.f_money, n.d1_name ... and their words (n.w('f_money'))."""

    def __init__(self, db: Database) -> None:
        self.db = db
        for t in db.tables:
            setattr(self, t.role, t.name)
            setattr(self, f"{t.role}_one", t.singular.replace("_", " "))
            for c in t.columns:
                setattr(self, f"{t.role}_{c.role}", c.name)

    def w(self, attr: str) -> str:
        return getattr(self, attr).replace("_", " ")

    def values(self, table: str, role: str) -> list:
        return [v for v in self.db.table(table).values(role) if v is not None]


def cat(n: Names, rng) -> str:
    return rng.choice(sorted(set(n.values("f", "cat"))))


def threshold(n: Names, rng) -> int:
    """A whole number between the facts' amounts' 25th and 80th percentiles."""
    vals = sorted(n.values("f", "money"))
    return int(vals[int(len(vals) * rng.uniform(0.25, 0.8))])


def month(n: Names, rng) -> tuple[str, str, str]:
    """(first day, first day of the next month, 'March 2021') of a month with facts."""
    ym = rng.choice(sorted({d[:7] for d in n.values("f", "date")}))
    y, m = int(ym[:4]), int(ym[5:])
    nxt = f"{y + (m == 12)}-{m % 12 + 1:02d}-01"
    return f"{ym}-01", nxt, f"{MONTHS[m - 1]} {y}"


def scope(n: Names, rng, alias: str = "") -> tuple[str, str]:
    """An optional filter on the facts: (words after the facts' name, an SQL condition), or ("", "")."""
    p = f"{alias}." if alias else ""
    kind = rng.choice(("none", "none", "cat", "year", "half", "above"))
    if kind == "cat":
        v = cat(n, rng)
        return f" with {n.w('f_cat')} '{v}'", f"{p}{n.f_cat} = '{v}'"
    if kind == "above":
        t = threshold(n, rng) // 2
        return f" with a {n.w('f_money')} of at least {t}", f"{p}{n.f_money} >= {t}"
    year = rng.choice(sorted({d[:4] for d in n.values("f", "date")}))
    if kind == "year":
        return f" dated (by {n.f_date}) in {year}", f"{p}{n.f_date} LIKE '{year}-%'"
    if kind == "half":
        first = rng.random() < 0.5
        a, b = (f"{year}-01-01", f"{year}-06-30") if first else (f"{year}-07-01", f"{year}-12-31")
        return (f" dated (by {n.f_date}) in the {'first' if first else 'second'} half of {year}",
                f"{p}{n.f_date} BETWEEN '{a}' AND '{b}'")
    return "", ""


def where(*conditions: str) -> str:
    kept = [c for c in conditions if c]
    return f" WHERE {' AND '.join(kept)}" if kept else ""


def join_d2(n: Names) -> str:
    """The join from f (alias f) to d2 (alias b), through d1 (alias a) in a chain theme."""
    if n.db.theme.shape == "star":
        return f"JOIN {n.d2} b ON b.{n.d2_id} = f.{n.f_d2}"
    return f"JOIN {n.d1} a ON a.{n.d1_id} = f.{n.f_d1} JOIN {n.d2} b ON b.{n.d2_id} = a.{n.d1_d2}"


# ---- L1: one table --------------------------------------------------------------------------------------------

def l1_count_cat(n, rng):
    v = cat(n, rng)
    return Question(f"How many {n.w('f')} have {n.w('f_cat')} '{v}'?",
                    f"SELECT COUNT(*) FROM {n.f} WHERE {n.f_cat} = '{v}'")


def l1_sum_cat(n, rng):
    phrase, cond = scope(n, rng)
    if not cond:
        v = cat(n, rng)
        phrase, cond = f" whose {n.w('f_cat')} is '{v}'", f"{n.f_cat} = '{v}'"
    return Question(f"What is the total {n.w('f_money')} of the {n.w('f')}{phrase}? {ROUND}",
                    f"SELECT ROUND(SUM({n.f_money}), 2) FROM {n.f}{where(cond)}", decimals=2)


def l1_count_above(n, rng):
    t, (phrase, cond) = threshold(n, rng), scope(n, rng)
    return Question(f"Among the {n.w('f')}{phrase}, how many have a {n.w('f_money')} greater than {t}?",
                    f"SELECT COUNT(*) FROM {n.f}{where(f'{n.f_money} > {t}', cond)}")


def l1_count_month(n, rng):
    a, b, words = month(n, rng)
    return Question(f"How many {n.w('f')} are dated (by {n.f_date}) in {words}?",
                    f"SELECT COUNT(*) FROM {n.f} WHERE {n.f_date} >= '{a}' AND {n.f_date} < '{b}'")


def l1_avg_range(n, rng):
    days = sorted(n.values("f", "date"))
    if len(days) < 4:
        return None
    i = rng.randrange(len(days) // 2)
    a, b = days[i], days[min(len(days) - 1, i + rng.randint(len(days) // 4, len(days) // 2))]
    return Question(f"What is the average {n.w('f_money')} of the {n.w('f')} dated (by {n.f_date}) from {a} to {b} "
                    f"(both included)? {ROUND}",
                    f"SELECT ROUND(AVG({n.f_money}), 2) FROM {n.f} WHERE {n.f_date} BETWEEN '{a}' AND '{b}'",
                    decimals=2)


def l1_extreme_cat(n, rng):
    (fn, word), (phrase, cond) = rng.choice((("MAX", "largest"), ("MIN", "smallest"))), scope(n, rng)
    return Question(f"What is the {word} {n.w('f_money')} among the {n.w('f')}{phrase}?",
                    f"SELECT {fn}({n.f_money}) FROM {n.f}{where(cond)}")


def l1_nulls(n, rng):
    if rng.random() < 0.5:
        return Question(f"How many {n.w('f')} have no {n.w('f_opt')} recorded (the value is NULL)?",
                        f"SELECT COUNT(*) FROM {n.f} WHERE {n.f_opt} IS NULL")
    return Question(f"What is the average {n.w('f_opt')} over the {n.w('f')} that have one? {ROUND}",
                    f"SELECT ROUND(AVG({n.f_opt}), 2) FROM {n.f} WHERE {n.f_opt} IS NOT NULL", decimals=2)


def l1_entity(n, rng):
    v = rng.choice(sorted(set(n.values("d1", "attr"))))
    if rng.random() < 0.5:
        return Question(f"How many {n.w('d1')} have {n.w('d1_attr')} '{v}'?",
                        f"SELECT COUNT(*) FROM {n.d1} WHERE {n.d1_attr} = '{v}'")
    return Question(f"How many {n.w('d1')} with {n.w('d1_attr')} '{v}' have no {n.w('d1_date')} on record?",
                    f"SELECT COUNT(*) FROM {n.d1} WHERE {n.d1_attr} = '{v}' AND {n.d1_date} IS NULL")


def l1_list_ids(n, rng):
    v, t = cat(n, rng), threshold(n, rng)
    return Question(f"List the {n.w('f_id')} of every {n.f_one} with {n.w('f_cat')} '{v}' and a {n.w('f_money')} "
                    f"above {t}.", f"SELECT {n.f_id} FROM {n.f} WHERE {n.f_cat} = '{v}' AND {n.f_money} > {t}")


def l1_distinct(n, rng):
    v = cat(n, rng)
    return Question(f"How many distinct {n.w('f_d1')} values appear among the {n.w('f')} with {n.w('f_cat')} '{v}'?",
                    f"SELECT COUNT(DISTINCT {n.f_d1}) FROM {n.f} WHERE {n.f_cat} = '{v}'")


# ---- L2: GROUP BY on one table --------------------------------------------------------------------------------

def l2_per_cat(n, rng):
    what = rng.choice(("count", "sum", "avg", "max"))
    agg = {"count": ("the number of " + n.w("f"), "COUNT(*)", None),
           "sum": (f"the total {n.w('f_money')}", f"ROUND(SUM({n.f_money}), 2)", 2),
           "avg": (f"the average {n.w('f_money')}", f"ROUND(AVG({n.f_money}), 2)", 2),
           "max": (f"the number of {n.w('f')} and the largest {n.w('f_money')}", f"COUNT(*), MAX({n.f_money})", None)}
    words, expr, dec = agg[what]
    phrase, cond = scope(n, rng)
    return Question(f"For each {n.w('f_cat')}, give {words}" + (f", counting only the {n.w('f')}{phrase}" if phrase
                    else "") + f". Return the {n.w('f_cat')} first." + (f" {ROUND}" if dec else ""),
                    f"SELECT {n.f_cat}, {expr} FROM {n.f}{where(cond)} GROUP BY {n.f_cat}", decimals=dec, groups=True)


def l2_per_month(n, rng):
    year = rng.choice(sorted({d[:4] for d in n.values("f", "date")}))
    words, expr, dec = rng.choice(((f"the total {n.w('f_money')}", f"ROUND(SUM({n.f_money}), 2)", 2),
                                   (f"the number of {n.w('f')}", "COUNT(*)", None),
                                   (f"the average {n.w('f_money')}", f"ROUND(AVG({n.f_money}), 2)", 2),
                                   (f"the smallest {n.w('f_money')}", f"MIN({n.f_money})", None)))
    return Question(f"For each month of {year} that has {n.w('f')} (by {n.f_date}), give the month as 'YYYY-MM' and "
                    f"{words}." + (f" {ROUND}" if dec else ""),
                    f"SELECT strftime('%Y-%m', {n.f_date}) AS month, {expr} FROM {n.f} "
                    f"WHERE {n.f_date} LIKE '{year}-%' GROUP BY month", decimals=dec, groups=True)


def l2_sorted_totals(n, rng):
    phrase, cond = scope(n, rng)
    order, word = rng.choice((("DESC", "from highest to lowest"), ("ASC", "from lowest to highest")))
    return Question(f"For each {n.w('f_cat')}, give the {n.w('f_cat')} and the total {n.w('f_money')} of the "
                    f"{n.w('f')}{phrase}, sorted by the total {word}. {ROUND}",
                    f"SELECT {n.f_cat}, ROUND(SUM({n.f_money}), 2) AS total FROM {n.f}{where(cond)} GROUP BY {n.f_cat} "
                    f"ORDER BY total {order}", ordered=True, decimals=2, key=(1,), groups=True)


def l2_entity_groups(n, rng):
    dates = sorted(n.values("d1", "date"))
    if dates and rng.random() < 0.6:
        cut = rng.choice(dates)
        return Question(f"For each {n.w('d1_attr')}, how many {n.w('d1')} have a {n.w('d1_date')} before {cut}? "
                        f"Return the {n.w('d1_attr')} and the count (only the {n.w('d1_attr')} values with any).",
                        f"SELECT {n.d1_attr}, COUNT(*) FROM {n.d1} WHERE {n.d1_date} < '{cut}' GROUP BY {n.d1_attr}",
                        groups=True)
    return Question(f"For each {n.w('d1_attr')}, how many {n.w('d1')} are there, and how many of them have a "
                    f"{n.w('d1_date')}? Return the {n.w('d1_attr')}, the count and the count with a date.",
                    f"SELECT {n.d1_attr}, COUNT(*), COUNT({n.d1_date}) FROM {n.d1} GROUP BY {n.d1_attr}", groups=True)


def l2_per_entity(n, rng):
    v = cat(n, rng)
    return Question(f"For each {n.w('f_d1')}, how many {n.w('f')} with {n.w('f_cat')} '{v}' are there? Return the "
                    f"{n.w('f_d1')} and the count.",
                    f"SELECT {n.f_d1}, COUNT(*) FROM {n.f} WHERE {n.f_cat} = '{v}' GROUP BY {n.f_d1}", groups=True)


def l2_qty(n, rng):
    if not n.db.table("f").has("qty"):
        return None
    phrase, cond = scope(n, rng)
    return Question(f"For each {n.w('f_cat')}, give the total {n.w('f_qty')} and the average {n.w('f_qty')} per "
                    f"{n.f_one}, over the {n.w('f')}{phrase}. Return the {n.w('f_cat')}, the total and the average "
                    f"rounded to 2 decimals.",
                    f"SELECT {n.f_cat}, SUM({n.f_qty}), ROUND(AVG({n.f_qty}), 2) FROM {n.f}{where(cond)} "
                    f"GROUP BY {n.f_cat}", decimals=2, groups=True)


LEVEL_1 = (l1_count_cat, l1_sum_cat, l1_count_above, l1_count_month, l1_avg_range, l1_extreme_cat, l1_nulls,
           l1_entity, l1_list_ids, l1_distinct)
LEVEL_2 = (l2_per_cat, l2_per_month, l2_sorted_totals, l2_entity_groups, l2_per_entity, l2_qty)
