"""One question per report, its gold answer and its evidence spans, by level.

    q = make_question(report, random.Random(...))   # Question(kind, text, answer, value, decimals, evidence, ...)

- level 1 `lookup`: a figure stated in a sentence, or `named`: a stated name (1 in 3, when one lies
  near the depth). Evidence: the sentence.
- level 2 `cell`: a table cell, the table named by metric and group. Evidence: the row.
- level 3 `xref`: "Section A points to a table ...": the table is found through A's cross-reference
  (A names its group, the question does not). Evidence: the row (A's pointer is support only).
- level 4 `combine`: difference, sum or ratio (as a percentage) of two figures in different
  sections. Evidence: both spans.
- level 5 `restated`: as level 4, the first figure restated later (the restatement counts); or
  `three`: the sum or average of three figures in three sections. Evidence: all of them.

The first evidence span is the one nearest the report's depth (level 5 `restated`: the
restatement the report placed there). Levels 1-3 want the figure as stated; levels 4-5 say how to
round: the result is exact from the printed figures, and an answer passes within half a unit of
the last asked-for place. Questions never ask for a figure that a later restatement replaced,
except `restated`, which asks for the latest one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.domains.document.report import Report, Span, fact_phrase

PLACES = {0: "rounded to a whole number", 1: "rounded to one decimal place", 2: "rounded to two decimal places",
          3: "rounded to three decimal places"}
LATEST = "Where a later section restates a figure, use the restated figure."


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    answer: str  # the gold answer as the oracle writes it
    value: float | str  # exact value (a name for `named`)
    decimals: int | None  # None: the figure as stated; else the places the question asks for
    unit: str
    evidence: tuple[Span, ...]  # every one must be covered by a citation
    support: tuple[Span, ...] = ()  # useful to cite, not required


def _nearest(spans: list[Span], depth: float) -> Span:
    return min(spans, key=lambda s: abs(s.depth - depth))


def make_question(report: Report, rng: random.Random) -> Question:
    numeric = [s for s in report.spans if s.kind in ("sentence", "row") and s.fact not in report.restated]
    level = report.level
    if level == 1:
        return _lookup(report, rng, [s for s in numeric if s.kind == "sentence"])
    if level == 2:
        return _cell(report, [s for s in numeric if s.kind == "row"])
    if level == 3:
        return _xref(report, numeric)
    if level == 4:
        return _combine(report, rng, numeric)
    if rng.random() < 0.5 and report.restated:
        return _restated(report, rng, numeric)
    return _three(report, rng, numeric)


def _metric(report: Report, span: Span):
    return report.template.metrics[span.fact[1]]


def _lookup(report: Report, rng: random.Random, sentences: list[Span]) -> Question:
    named = [s for s in report.spans if s.kind == "named" and abs(s.depth - report.depth) < 0.15]
    if named and rng.random() < 1 / 3:
        span = _nearest(named, report.depth)
        nm = next(n for n in report.template.named if n.role == span.fact[1])
        return Question("named", nm.question.format(company=report.subject), span.figure, span.figure, None, "",
                        (span,))
    span = _nearest(sentences, report.depth)
    m = _metric(report, span)
    return Question("lookup", f"What was {fact_phrase(report.template, span.fact)}? Answer in {m.unit}.",
                    span.figure, span.value, None, m.unit, (span,))


def _cell(report: Report, rows: list[Span]) -> Question:
    t = report.template
    span = _nearest(rows, report.depth)
    _, mi, g, e, c = span.fact
    m = t.metrics[mi]
    text = (f"According to the table of {m.name} by {t.entity_kind.lower()} for {t.group_phrase.format(g=g)}, "
            f"what was the value {t.entity_phrase.format(e=e)} {t.col_phrase.format(c=c)}? Answer in {m.unit}.")
    return Question("cell", text, span.figure, span.value, None, m.unit, (span,))


def _xref(report: Report, numeric: list[Span]) -> Question:
    t = report.template
    pointers = [s for s in report.spans if s.kind == "pointer"]
    # a pointer the question can name: the only one for its metric in its section
    usable = {p.value: p for p in pointers
              if sum(q.section == p.section and q.fact[1] == p.fact[1] for q in pointers) == 1}
    rows = [s for s in numeric if s.kind == "row" and s.section in usable]
    if not rows:  # no table whose pointer a question can name (rare): a plain table cell
        return _cell(report, [s for s in numeric if s.kind == "row"])
    span = _nearest(rows, report.depth)
    pointer = usable[span.section]
    _, mi, g, e, c = span.fact
    m = t.metrics[mi]
    text = (f"Section {pointer.section} points to a table that breaks {m.name} down by {t.entity_kind.lower()}. "
            f"According to that table, what was the value {t.entity_phrase.format(e=e)} {t.col_phrase.format(c=c)}? "
            f"Answer in {m.unit}.")
    return Question("xref", text, span.figure, span.value, None, m.unit, (span,), (pointer,))


def _others(numeric: list[Span], first: Span, taken: set[str], count: int, rng: random.Random) -> list[Span]:
    """`count` figures of first's metric, each in a section of its own, none in `taken`."""
    pool = [s for s in numeric if s.fact[1] == first.fact[1] and s.section not in taken]
    rng.shuffle(pool)
    out: list[Span] = []
    for s in pool:
        if s.section not in taken:
            out.append(s)
            taken = taken | {s.section}
        if len(out) == count:
            return out
    return out


def _two(report: Report, rng: random.Random, a: Span, b: Span, restated: bool) -> Question:
    m = _metric(report, a)
    t = report.template
    op = rng.choice(("difference", "sum", "ratio"))
    pa, pb = fact_phrase(t, a.fact), fact_phrase(t, b.fact)
    if op == "ratio":
        value, places, unit = 100 * a.value / b.value, 1, "percent"
        ask = f"What is {pa} as a percentage of {pb}?"
    else:
        value = a.value - b.value if op == "difference" else a.value + b.value
        places, unit = m.decimals, m.unit
        ask = f"What is {pa} minus {pb}?" if op == "difference" else f"What is the sum of {pa} and {pb}?"
    text = f"{ask} Answer in {unit}, {PLACES[places]}. {LATEST}"
    return Question("restated" if restated else "combine", text, f"{value:,.{places}f}", value, places, unit, (a, b))


def _combine(report: Report, rng: random.Random, numeric: list[Span]) -> Question:
    first = _nearest(numeric, report.depth)
    while True:
        second = _others(numeric, first, {first.section}, 1, rng)
        if second:
            return _two(report, rng, first, second[0], False)
        first = rng.choice(numeric)  # no other section states this metric: another first figure


def _restated(report: Report, rng: random.Random, numeric: list[Span]) -> Question:
    first = _nearest(list(report.restated.values()), report.depth)
    original = next(s for s in report.spans if s.fact == first.fact and s.kind in ("sentence", "row"))
    second = _others(numeric, first, {first.section, original.section}, 1, rng)
    if not second:
        return _three(report, rng, numeric)
    return _two(report, rng, first, second[0], True)


def _three(report: Report, rng: random.Random, numeric: list[Span]) -> Question:
    first = _nearest(numeric, report.depth)
    while True:
        rest = _others(numeric, first, {first.section}, 2, rng)
        if len(rest) == 2:
            break
        first = rng.choice(numeric)
    spans = (first, *rest)
    m, t = _metric(report, first), report.template
    names = [fact_phrase(t, s.fact) for s in spans]
    total = sum(s.value for s in spans)
    if rng.random() < 0.5:
        value, places, what = total, m.decimals, "the sum"
    else:
        value, places, what = total / 3, m.decimals + 1, "the average"
    text = f"What is {what} of {names[0]}, {names[1]} and {names[2]}? Answer in {m.unit}, {PLACES[places]}. {LATEST}"
    return Question("three", text, f"{value:,.{places}f}", value, places, m.unit, spans)
