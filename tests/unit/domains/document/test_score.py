"""The reward: right AND traceable scores 1; correct, wrong and adversarial answers and citations."""

from __future__ import annotations

from posttrain.envs.env import Resources, make_env
from posttrain.domains.document.cite import PARTIAL, check_answer
from tests.unit.domains.document.helpers import gold_citations, report_of, tasks


def score(task, answer, citations):
    return make_env("document", Resources()).score(task, {"answer": answer, "citations": citations})[0]


def by_kind(level: int, kind: str, n: int = 12):
    return next(t for t in tasks(level, n) if t.metadata["kind"] == kind)


def test_gold_answer_with_gold_citations_scores_one():
    for level in range(1, 6):
        t = tasks(level, 1, seed=21)[0]
        s = score(t, t.reference["answer"], gold_citations(t))
        assert s.value == 1.0 and s.details["answer_ok"] and s.details["citations_ok"], s.details


def test_wrong_answer_with_the_right_spans_scores_zero():
    t = tasks(2, 1)[0]
    s = score(t, str(t.reference["value"] + 1), gold_citations(t))
    assert s.value == 0.0 and not s.details["answer_ok"] and s.details["citations_ok"]


def test_right_number_without_citations_gets_only_partial_credit():
    t = tasks(1, 1, seed=3)[0]
    s = score(t, t.reference["answer"], [])
    assert s.value == PARTIAL and s.details["answer_ok"]
    assert s.details["uncovered"] == [t.reference["evidence"][0]["section"]]


def test_a_quote_not_in_the_document_or_from_the_wrong_section_scores_zero():
    t = tasks(2, 1, seed=4)[0]
    ev = t.reference["evidence"][0]
    fake = [{"section": ev["section"], "quote": ev["text"].replace(ev["figure"], ev["figure"] + "9")}]
    s = score(t, t.reference["answer"], fake)
    assert s.value == 0.0 and "not in section" in s.details["bad_quotes"][0]["why"]
    other = next(sec.id for sec in report_of(t).sections if sec.id != ev["section"])
    s = score(t, t.reference["answer"], [{"section": other, "quote": ev["text"]}])
    assert s.value == 0.0 and s.details["bad_quotes"][0]["why"] == f"not in section {other} (it is in {ev['section']})"
    s = score(t, t.reference["answer"], [{"section": "99.9", "quote": ev["text"]}])
    assert s.value == 0.0 and s.details["bad_quotes"][0]["why"] == "no section '99.9'"


def test_a_real_quote_of_a_distractor_does_not_cover_the_gold_span():
    t = tasks(2, 1, seed=5)[0]  # a table cell: another row of the same table is a real, wrong quote
    ev = t.reference["evidence"][0]
    sec = report_of(t).section(ev["section"])
    row = next(line for line in sec.text.split("\n") if line.startswith("| ") and line != ev["text"]
               and not line.startswith(f"| {report_of(t).template.entity_kind} |"))
    s = score(t, t.reference["answer"], [{"section": ev["section"], "quote": row}])
    assert s.value == PARTIAL and s.details["bad_quotes"] == [] and s.details["uncovered"] == [ev["section"]]
    # the gold row up to the cell before the gold one: the same row, the figure for another column
    before = ev["text"][: ev["offset"]].rstrip(" |")
    s = score(t, t.reference["answer"], [{"section": ev["section"], "quote": before}])
    assert s.details["uncovered"] == [ev["section"]] and s.value < 1
    # a distractor sentence: another figure of the same group stated elsewhere, answered with its figure
    t1 = by_kind(1, "lookup")
    gold = t1.reference["evidence"][0]
    report = report_of(t1)
    fact = next(s.fact for s in report.spans if s.text == gold["text"])
    other = next(s for s in report.spans if s.kind == "sentence" and s.fact[2] == fact[2] and s.fact != fact)
    s = score(t1, other.figure, [{"section": other.section, "quote": other.text}])
    assert s.value == 0.0 and not s.details["answer_ok"] and s.details["uncovered"] == [gold["section"]]


def test_pasting_the_whole_document_or_section_or_a_bare_number_is_rejected():
    t = tasks(3, 1, seed=6)[0]
    ev = t.reference["evidence"][0]
    report = report_of(t)
    for quote in (report.text(), report.section(ev["section"]).text):
        s = score(t, t.reference["answer"], [{"section": ev["section"], "quote": quote}])
        assert s.value == 0.0 and "longer than 400" in s.details["bad_quotes"][0]["why"]
    s = score(t, t.reference["answer"], [{"section": ev["section"], "quote": ev["figure"]}])
    assert s.value == 0.0 and s.details["bad_quotes"][0]["why"] == "the quote holds no word"
    s = score(t, t.reference["answer"], [{"section": ev["section"], "quote": ev["text"]}] * 9)
    assert s.value == 0.0 and "more than 8 citations" in s.details["bad_quotes"][0]["why"]
    # the whole section pasted in pieces of at most 400 characters: over the quotes' total budget
    text = " ".join(report.section(ev["section"]).text.split())
    pieces = [{"section": ev["section"], "quote": text[i:i + 380]} for i in range(0, len(text), 380)][:8]
    s = score(t, t.reference["answer"], pieces)
    assert s.value == 0.0 and "the quotes total" in s.details["bad_quotes"][-1]["why"]


def test_quotes_are_matched_after_whitespace_and_quote_mark_trimming_markers_allowed():
    t = tasks(1, 1, seed=2)[0]
    ev = t.reference["evidence"][0]
    sec = report_of(t).section(ev["section"])
    line = next(ln for ln in sec.text.split("\n") if ev["text"] in ln)
    marker = line[: line.index("]") + 1]
    words = ev["text"].split(" ")
    loose = f'"...{"  ".join(words[:3])}\n{" ".join(words[3:])}..."'
    for quote in (loose, f"{marker} {line[len(marker) + 1:]}"[:400]):
        s = score(t, t.reference["answer"], [{"section": f"Section {ev['section']}", "quote": quote}])
        assert s.value == 1.0, (quote, s.details)


def test_two_spans_must_both_be_cited_and_a_restated_figure_replaces_the_original():
    t = tasks(4, 1, seed=8)[0]
    both = gold_citations(t)
    assert score(t, t.reference["answer"], both).value == 1.0
    assert score(t, t.reference["answer"], both[:1]).value == PARTIAL
    r = by_kind(5, "restated")
    report, ref = report_of(r), r.reference
    new = next(s for s in report.restated.values() if s.text == ref["evidence"][0]["text"])
    old = next(s for s in report.spans if s.fact == new.fact and s.kind in ("sentence", "row"))
    assert score(r, ref["answer"], gold_citations(r)).value == 1.0
    stale = [{"section": old.section, "quote": old.text}] + gold_citations(r)[1:]
    s = score(r, ref["answer"], stale)  # the original figure cited instead of its restatement
    assert s.value == PARTIAL and s.details["uncovered"] == [new.section]


def test_answers_are_normalised_numbers_once_names_loosely():
    ref = {"value": 1234.5, "answer": "1,234.5", "decimals": None}
    for text in ("1,234.5", "USD 1,234.5 million", "1234.50", " 1234.5% "):
        assert check_answer(ref, text)[0], text
    for text in ("1,234.6", "1,234.5 or 1,301.2", "", "about one thousand"):
        assert not check_answer(ref, text)[0], text
    rounded = {"value": 12.3456, "answer": "12.3", "decimals": 1}
    assert check_answer(rounded, "12.3")[0] and check_answer(rounded, "12.35")[0]
    assert not check_answer(rounded, "12.4")[0] and not check_answer(rounded, "12.2")[0]
    assert check_answer({"value": -4.5, "answer": "-4.5", "decimals": 1}, "\u22124.5")[0]
    name = {"value": "Lena Hoffmann", "answer": "Lena Hoffmann", "decimals": None}
    assert check_answer(name, "It is Lena Hoffmann.")[0] and check_answer(name, "lena hoffmann")[0]
    assert not check_answer(name, "Mei Tanaka")[0]
    assert not check_answer(name, "Lena Hoffmann " + "and many other words " * 3)[0]


def test_no_answer_scores_zero():
    t = tasks(1, 1)[0]
    env = make_env("document", Resources())
    assert env.score(t, {"answer": None, "citations": []})[0].value == 0.0
    assert env.score(t, "garbage")[0].details["error"] == "no answer"
