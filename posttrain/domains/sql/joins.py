"""Question templates over two or more tables: L3 joins, L4 join + group + having + top-k, L5 multi-join,
subqueries / CTEs, shares and reconciliation. Aliases in the reference queries: f (facts), a (d1),
b (d2), x (second facts). See questions.py for the Question fields and the L1-L2 templates."""

from __future__ import annotations

from posttrain.domains.sql.questions import ROUND, Question, cat, join_d2, month, scope, threshold, where


def _attr(n, rng, table: str = "d1") -> str:
    return rng.choice(sorted(set(n.values(table, "attr"))))


def _fa(n) -> str:
    return f"FROM {n.f} f JOIN {n.d1} a ON a.{n.d1_id} = f.{n.f_d1}"


# ---- L3: a join of two tables ---------------------------------------------------------------------------------

def l3_total_per_attr(n, rng):
    fn, word = rng.choice((("SUM", "total"), ("AVG", "average")))
    phrase, cond = scope(n, rng, "f")
    return Question(f"For each {n.w('d1_attr')} of the {n.w('d1')}, what is the {word} {n.w('f_money')} of their "
                    f"{n.w('f')}{phrase}? Return the {n.w('d1_attr')} and the {word}. {ROUND}",
                    f"SELECT a.{n.d1_attr}, ROUND({fn}(f.{n.f_money}), 2) {_fa(n)}{where(cond)} GROUP BY a.{n.d1_attr}",
                    decimals=2, groups=True)


def l3_count_for_attr(n, rng):
    v = _attr(n, rng)
    c = cat(n, rng)
    return Question(f"How many {n.w('f')} with {n.w('f_cat')} '{c}' belong to {n.w('d1')} whose {n.w('d1_attr')} "
                    f"is '{v}'?",
                    f"SELECT COUNT(*) {_fa(n)} WHERE a.{n.d1_attr} = '{v}' AND f.{n.f_cat} = '{c}'")


def l3_names_above(n, rng):
    vals = sorted(n.values("f", "money"))
    t = vals[int(len(vals) * rng.uniform(0.6, 0.9))]
    return Question(f"List the {n.w('d1_name')} of every {n.d1_one} that has at least one {n.f_one} with a "
                    f"{n.w('f_money')} above {int(t)} (each {n.d1_one} once).",
                    f"SELECT DISTINCT a.{n.d1_name} {_fa(n)} WHERE f.{n.f_money} > {int(t)}")


def l3_second_entity(n, rng):
    if n.db.theme.shape == "star":
        phrase, cond = scope(n, rng, "f")
        return Question(f"For each {n.w('d2_attr')} of the {n.w('d2')}, how many {n.w('f')}{phrase} are there and "
                        f"what is their total {n.w('f_money')}? Return the {n.w('d2_attr')}, the count and the total. "
                        f"{ROUND}",
                        f"SELECT b.{n.d2_attr}, COUNT(*), ROUND(SUM(f.{n.f_money}), 2) FROM {n.f} f "
                        f"JOIN {n.d2} b ON b.{n.d2_id} = f.{n.f_d2}{where(cond)} GROUP BY b.{n.d2_attr}", decimals=2,
                        groups=True)
    v = _attr(n, rng)
    return Question(f"For each {n.w('d2_name')} of the {n.w('d2')}, how many {n.w('d1')} with {n.w('d1_attr')} "
                    f"'{v}' belong to it? Return the {n.w('d2_name')} and the count (only {n.w('d2')} with at least "
                    f"one).",
                    f"SELECT b.{n.d2_name}, COUNT(*) FROM {n.d1} a JOIN {n.d2} b ON b.{n.d2_id} = a.{n.d1_d2} "
                    f"WHERE a.{n.d1_attr} = '{v}' GROUP BY b.{n.d2_id}", groups=True)


def l3_argmax(n, rng):
    fn, word = rng.choice((("DESC", "largest"), ("ASC", "smallest")))
    phrase, cond = scope(n, rng, "f")
    body = f"SELECT a.{n.d1_name}, f.{n.f_money} {_fa(n)}{where(cond)} ORDER BY f.{n.f_money} {fn}"
    return Question(f"Among the {n.w('f')}{phrase}, which {n.d1_one} has the one with the {word} "
                    f"{n.w('f_money')}? Return the {n.w('d1_name')} and that {n.w('f_money')}.",
                    f"{body} LIMIT 1", probe=f"{body} LIMIT 2", ordered=True, key=(1,))


def l3_per_name(n, rng):
    v = _attr(n, rng)
    phrase, cond = scope(n, rng, "f")
    return Question(f"For each {n.d1_one} with {n.w('d1_attr')} '{v}' that has {n.w('f')}{phrase}, give the "
                    f"{n.w('d1_name')}, the number of those {n.w('f')} and their average {n.w('f_money')}. {ROUND}",
                    f"SELECT a.{n.d1_name}, COUNT(*), ROUND(AVG(f.{n.f_money}), 2) {_fa(n)}"
                    f"{where(f'a.{n.d1_attr} = {v!r}', cond)} GROUP BY a.{n.d1_id}", decimals=2, groups=True)


# ---- L4: join + GROUP BY + HAVING + ORDER BY / LIMIT ----------------------------------------------------------

def l4_top_k(n, rng):
    k, (order, word) = rng.randint(2, 5), rng.choice((("DESC", "highest"), ("ASC", "lowest")))
    phrase, cond = scope(n, rng, "f")
    body = (f"SELECT a.{n.d1_name}, ROUND(SUM(f.{n.f_money}), 2) AS total {_fa(n)}{where(cond)} GROUP BY a.{n.d1_id} "
            f"ORDER BY total {order}")
    return Question(f"Which {k} {n.w('d1')} have the {word} total {n.w('f_money')} over their {n.w('f')}{phrase} "
                    f"(among the {n.w('d1')} that have any)? Return the "
                    f"{n.w('d1_name')} and the total, {word} first. {ROUND}",
                    f"{body} LIMIT {k}", ordered=True, decimals=2, key=(1,), probe=f"{body} LIMIT {k + 1}")


def l4_having_count(n, rng):
    counts = sorted(n.db.table("f").values("d1").count(i) for i in set(n.db.table("f").values("d1")))
    m = counts[len(counts) // 2]
    return Question(f"List the {n.w('d1')} with at least {m} {n.w('f')}: the {n.w('d1_name')} and the number of "
                    f"{n.w('f')}, ordered by that number from most to fewest, then by {n.w('d1_name')} A to Z.",
                    f"SELECT a.{n.d1_name}, COUNT(*) AS n {_fa(n)} GROUP BY a.{n.d1_id} HAVING COUNT(*) >= {m} "
                    f"ORDER BY n DESC, a.{n.d1_name} ASC", ordered=True, key=(0,))


def l4_attr_avg(n, rng):
    t = threshold(n, rng) // 2
    phrase, cond = scope(n, rng, "f")
    return Question(f"Which {n.w('d1_attr')} values have an average {n.w('f_money')} above {t} over the "
                    f"{n.w('f')}{phrase} of their {n.w('d1')}? Return the {n.w('d1_attr')} and the average, the "
                    f"highest average first. {ROUND}",
                    f"SELECT a.{n.d1_attr}, ROUND(AVG(f.{n.f_money}), 2) AS avg_value {_fa(n)}{where(cond)} "
                    f"GROUP BY a.{n.d1_attr} "
                    f"HAVING AVG(f.{n.f_money}) > {t} ORDER BY avg_value DESC", ordered=True, decimals=2, key=(1,))


def l4_months(n, rng):
    v = _attr(n, rng)
    return Question(f"In which months did the {n.w('d1')} with {n.w('d1_attr')} '{v}' have at least 2 {n.w('f')}? "
                    f"Return the month as 'YYYY-MM' and the count, in calendar order.",
                    f"SELECT strftime('%Y-%m', f.{n.f_date}) AS month, COUNT(*) {_fa(n)} WHERE a.{n.d1_attr} = '{v}' "
                    f"GROUP BY month HAVING COUNT(*) >= 2 ORDER BY month", ordered=True, key=(0,))


def l4_second_top(n, rng):
    if "d2" not in {t.role for t in n.db.tables}:
        return None
    k = rng.randint(2, 3)
    body = (f"SELECT b.{n.d2_name}, ROUND(SUM(f.{n.f_money}), 2) AS total FROM {n.f} f {join_d2(n)} "
            f"GROUP BY b.{n.d2_id} HAVING COUNT(*) >= 2 ORDER BY total DESC")
    return Question(f"Among the {n.w('d2')} with at least 2 {n.w('f')}, which {k} have the highest total "
                    f"{n.w('f_money')}? Return the {n.w('d2_name')} and the total, highest first. {ROUND}",
                    f"{body} LIMIT {k}", ordered=True, decimals=2, key=(1,), probe=f"{body} LIMIT {k + 1}")


# ---- L5: several joins, subqueries / CTEs, ratios, reconciliation --------------------------------------------

def l5_share(n, rng):
    phrase, cond = scope(n, rng)
    inner = cond and f"f.{cond}"
    return Question(f"What share of the total {n.w('f_money')} of all {n.w('f')}{phrase} comes from each "
                    f"{n.w('d1_attr')} of the {n.w('d1')}? Return the {n.w('d1_attr')} and the share as a percentage "
                    f"(0 to 100) rounded to 2 decimals.",
                    f"SELECT a.{n.d1_attr}, ROUND(100.0 * SUM(f.{n.f_money}) / (SELECT SUM({n.f_money}) FROM {n.f}"
                    f"{where(cond)}), 2) {_fa(n)}{where(inner)} GROUP BY a.{n.d1_attr}", decimals=2, groups=True)


def l5_above_average(n, rng):
    return Question(f"Which {n.w('d1')} have a total {n.w('f_money')} above the average total per {n.d1_one} (the "
                    f"average over the {n.w('d1')} that have {n.w('f')})? Return the {n.w('d1_name')} and the total. "
                    f"{ROUND}",
                    f"WITH totals AS (SELECT f.{n.f_d1} AS id, SUM(f.{n.f_money}) AS total FROM {n.f} f "
                    f"GROUP BY f.{n.f_d1}) SELECT a.{n.d1_name}, ROUND(t.total, 2) FROM totals t "
                    f"JOIN {n.d1} a ON a.{n.d1_id} = t.id WHERE t.total > (SELECT AVG(total) FROM totals)", decimals=2)


def l5_three_tables(n, rng):
    c = cat(n, rng)
    star = n.db.theme.shape == "star"
    joins = (f"JOIN {n.d1} a ON a.{n.d1_id} = f.{n.f_d1} JOIN {n.d2} b ON b.{n.d2_id} = f.{n.f_d2}" if star
             else join_d2(n))
    return Question(f"For the {n.w('f')} with {n.w('f_cat')} '{c}', give for each {n.w('d2_attr')} of the "
                    f"{n.w('d2')} and each {n.w('d1_attr')} of the {n.w('d1')} the total {n.w('f_money')}. Return the "
                    f"{n.w('d2_attr')}, the {n.w('d1_attr')} and the total. {ROUND}",
                    f"SELECT b.{n.d2_attr}, a.{n.d1_attr}, ROUND(SUM(f.{n.f_money}), 2) FROM {n.f} f {joins} "
                    f"WHERE f.{n.f_cat} = '{c}' GROUP BY b.{n.d2_attr}, a.{n.d1_attr}", decimals=2, groups=True)


def l5_unmatched(n, rng):
    phrase, cond = scope(n, rng, "f")
    return Question(f"How many {n.w('f')}{phrase} have no matching row in {n.x}, and what is their total "
                    f"{n.w('f_money')}? Return the count and the total. {ROUND}",
                    f"SELECT COUNT(*), ROUND(SUM(f.{n.f_money}), 2) FROM {n.f} f"
                    f"{where(f'NOT EXISTS (SELECT 1 FROM {n.x} x WHERE x.{n.x_f} = f.{n.f_id})', cond)}", decimals=2)


def l5_reconcile(n, rng):
    if n.db.theme.name == "ledger":
        return Question(f"Reconcile {n.f} against {n.x}: list every {n.f_one} whose {n.x_one} amount differs from its "
                        f"own {n.w('f_money')}, with the {n.w('f_id')} and the difference ({n.w('f_money')} minus the "
                        f"{n.x_one}'s {n.w('x_money')}). {ROUND}",
                        f"SELECT f.{n.f_id}, ROUND(f.{n.f_money} - x.{n.x_money}, 2) FROM {n.f} f "
                        f"JOIN {n.x} x ON x.{n.x_f} = f.{n.f_id} WHERE ABS(f.{n.f_money} - x.{n.x_money}) > 0.001",
                        decimals=2)
    return Question(f"For each {n.w('d1_attr')} of the {n.w('d1')}, give the total {n.w('f_money')} of their "
                    f"{n.w('f')} and the total {n.w('x_money')} of the {n.w('x')} recorded against those {n.w('f')} "
                    f"(0 when none). Return the {n.w('d1_attr')}, the first total and the second. {ROUND}",
                    f"WITH xs AS (SELECT {n.x_f} AS id, SUM({n.x_money}) AS total FROM {n.x} GROUP BY {n.x_f}) "
                    f"SELECT a.{n.d1_attr}, ROUND(SUM(f.{n.f_money}), 2), ROUND(COALESCE(SUM(xs.total), 0), 2) "
                    f"{_fa(n)} LEFT JOIN xs ON xs.id = f.{n.f_id} GROUP BY a.{n.d1_attr}", decimals=2, groups=True)


def l5_ratio(n, rng):
    c1 = cat(n, rng)
    return Question(f"For each {n.w('d1_attr')} of the {n.w('d1')}, what fraction of their {n.w('f')} has "
                    f"{n.w('f_cat')} '{c1}', and what is the ratio of their total {n.w('x_money')} in {n.x} to their "
                    f"total {n.w('f_money')}? Return the {n.w('d1_attr')}, the fraction (0 to 1) and the ratio, both "
                    f"rounded to 2 decimals.",
                    f"WITH xs AS (SELECT {n.x_f} AS id, SUM({n.x_money}) AS total FROM {n.x} GROUP BY {n.x_f}) "
                    f"SELECT a.{n.d1_attr}, ROUND(AVG(CASE WHEN f.{n.f_cat} = '{c1}' THEN 1.0 ELSE 0.0 END), 2), "
                    f"ROUND(COALESCE(SUM(xs.total), 0) / SUM(f.{n.f_money}), 2) {_fa(n)} "
                    f"LEFT JOIN xs ON xs.id = f.{n.f_id} GROUP BY a.{n.d1_attr}", decimals=2, groups=True)


def l5_month_share(n, rng):
    a, b, words = month(n, rng)
    return Question(f"In {words}, which {n.w('d1')} account for more than 10% of that month's total "
                    f"{n.w('f_money')}? Return the {n.w('d1_name')} and their share as a percentage (0 to 100), "
                    f"the largest share first. {ROUND}",
                    f"WITH m AS (SELECT * FROM {n.f} WHERE {n.f_date} >= '{a}' AND {n.f_date} < '{b}'), "
                    f"s AS (SELECT f.{n.f_d1} AS id, 100.0 * SUM(f.{n.f_money}) / (SELECT SUM({n.f_money}) FROM m) "
                    f"AS share FROM m f GROUP BY f.{n.f_d1}) SELECT a.{n.d1_name}, ROUND(s.share, 2) AS pct FROM s "
                    f"JOIN {n.d1} a ON a.{n.d1_id} = s.id WHERE s.share > 10 ORDER BY s.share DESC",
                    ordered=True, decimals=2, key=(1,), groups=True)


LEVEL_3 = (l3_total_per_attr, l3_count_for_attr, l3_names_above, l3_second_entity, l3_argmax, l3_per_name)
LEVEL_4 = (l4_top_k, l4_having_count, l4_attr_avg, l4_months, l4_second_top)
LEVEL_5 = (l5_share, l5_above_average, l5_three_tables, l5_unmatched, l5_reconcile, l5_ratio, l5_month_share)
