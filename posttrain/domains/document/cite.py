"""The reward: the answer must be right AND traceable to the spans it comes from.

    score = score_state(report, reference, {"answer": "1,234.5", "citations": [{"section": "3.2", "quote": "..."}]})

Answer. A numeric answer must hold exactly one number once thousands separators, currency and
unit words and "%" are set aside ("USD 1,234.5 million", "1234.5", "12.5%" and "1,234.5 in
FY2022" all hold one: a number glued to letters is none; "1,234.5 or 1,301.2" holds two and
fails). Units are not converted: the answer is in the unit the question names. Levels 1-3 want
the figure as stated (equal to 1e-9 relative); levels 4-5 pass within half a unit of the last
place the question asks for, measured from the exact result. A name is compared after
lowercasing and dropping punctuation and articles; it may sit in a short sentence ("It is Lena
Hoffmann."), but every word outside the name must be one of FILLER: a hedge that lists candidates
("Graz or Oakridge Advisory", "Oakridge Advisory, maybe Graz") holds words that are no filler and
fails, as a numeric answer holding two numbers does.

Traceability. Each citation is {"section": id, "quote": text}. A quote counts only when it occurs
verbatim (whitespace collapsed, surrounding quote marks and "..." trimmed) in the cited section's
text, is at most MAX_QUOTE_CHARS long and holds at least one word (a bare number identifies
nothing); the good quotes together stay within MAX_QUOTE_CHARS per evidence span (a section
pasted in pieces is refused). A bad quote (not in that section, too long, empty, an unknown
section, over the budget) is reported in `bad_quotes`. Every gold evidence span (the sentence or
table row each figure comes from) must be covered: some good quote in its section whose
occurrence contains the key figure at the span's own position (the figure for another year in
the same row, or the same number elsewhere, does not cover it). At most MAX_CITATIONS citations.

Score: 1.0 when the answer is right and the citations are traceable (no bad quote, every span
covered); PARTIAL (0.25) for a right answer whose citations are honest but do not cover the
evidence (none given, or the wrong spans); 0.0 for a wrong answer, or any fabricated, misplaced
or oversized quote, whatever the answer.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from posttrain.core.types import Score

MAX_QUOTE_CHARS = 400
MAX_CITATIONS = 8
PARTIAL = 0.25
NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d(?:[\d,]*\d)?(?:\.\d+)?(?!\w|\.\d)")
WORD = re.compile(r"[A-Za-z]{2,}")
TRIM = " \t\n\"'`\u201c\u201d\u2018\u2019"
ARTICLES = {"the", "a", "an"}
# the only words a name answer may hold besides the name: a short sentence around ONE name
FILLER = {"it", "is", "was", "its", "answer", "name", "named", "called", "this", "that", "person", "company",
          "firm", "entity", "mr", "ms", "mrs", "dr"}


def squash(text: str) -> str:
    return " ".join(text.split())


def clean_quote(quote: str) -> str:
    text = squash(quote).strip(TRIM)
    for mark in ("...", "\u2026"):
        text = text.removeprefix(mark).removesuffix(mark).strip(TRIM)
    return text


def section_id(value: Any) -> str:
    """'3.2', 'Section 3.2', '§3.2' -> '3.2'."""
    text = str(value).strip().removeprefix("Section").removeprefix("section").strip().lstrip("\u00a7").strip()
    return text.rstrip(".")


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "").replace("\u2212", "-")) for m in NUMBER.findall(text)]


def _words(text: str) -> list[str]:
    return [w for w in re.sub(r"[^\w\s]", " ", text.lower()).split() if w not in ARTICLES]


def check_answer(reference: Mapping[str, Any], answer: str) -> tuple[bool, str]:
    """(right, why not)."""
    gold = reference["value"]
    if isinstance(gold, str):
        want, got = _words(gold), _words(answer)
        if not got:
            return False, "empty answer"
        at = [i for i in range(len(got) - len(want) + 1) if got[i:i + len(want)] == want]
        if not at:
            return False, f"not {gold!r}"
        extra = got[:at[0]] + got[at[0] + len(want):]
        if len(extra) > 4:
            return False, "the name is buried in a long answer"
        other = [w for w in extra if w not in FILLER]
        if other:
            return False, f"the answer holds words besides the name ({' '.join(other)}): one name, not candidates"
        return True, ""
    found = sorted(set(numbers(answer)))
    if len(found) != 1:
        return False, f"the answer holds {len(found)} numbers, not one"
    x, places = found[0], reference.get("decimals")
    tol = 1e-9 * max(1.0, abs(gold)) if places is None else 0.5 * 10 ** -places + 1e-9 * max(1.0, abs(gold))
    if math.isfinite(x) and abs(x - gold) <= tol:
        return True, ""
    return False, f"{x:g} is not {reference['answer']}"


def _occurrences(haystack: str, needle: str) -> list[int]:
    out, at = [], haystack.find(needle)
    while at >= 0:
        out.append(at)
        at = haystack.find(needle, at + 1)
    return out


def check_citations(report, evidence: list[Mapping[str, Any]], citations: Any) -> dict:
    """{"citations_ok", "bad_quotes": [{"section", "why"}], "uncovered": [section of each uncovered span]}."""
    if not isinstance(citations, list):
        citations = []
    bad: list[dict] = []
    good: list[tuple[str, str, list[int]]] = []  # (section, quote, where it occurs in the section)
    texts: dict[str, str] = {}
    for c in citations[:MAX_CITATIONS]:
        if not isinstance(c, Mapping):
            bad.append({"section": "", "why": "a citation is not an object with section and quote"})
            continue
        sid, quote = section_id(c.get("section", "")), clean_quote(str(c.get("quote", "")))
        sec = report.section(sid)
        if sec is None:
            bad.append({"section": sid, "why": f"no section {sid!r}"})
        elif len(quote) > MAX_QUOTE_CHARS:
            bad.append({"section": sid, "why": f"quote longer than {MAX_QUOTE_CHARS} characters ({len(quote)})"})
        elif not WORD.search(quote):
            bad.append({"section": sid, "why": "the quote holds no word"})
        else:
            text = texts.setdefault(sid, squash(sec.text))
            where = _occurrences(text, quote)
            if where:
                good.append((sid, quote, where))
            else:
                elsewhere = [s.id for s in report.sections if quote in squash(s.text)][:3]
                why = f"not in section {sid}" + (f" (it is in {', '.join(elsewhere)})" if elsewhere else "")
                bad.append({"section": sid, "why": why})
    if len(citations) > MAX_CITATIONS:
        bad.append({"section": "", "why": f"more than {MAX_CITATIONS} citations"})
    total, budget = sum(len(q) for _, q, _ in good), MAX_QUOTE_CHARS * len(evidence)
    if total > budget:  # no pasting a whole section in pieces
        bad.append({"section": "", "why": f"the quotes total {total} characters, over {budget} "
                                         f"({MAX_QUOTE_CHARS} per evidence span)"})
    uncovered = []
    for ev in evidence:
        text = texts.setdefault(ev["section"], squash(report.section(ev["section"]).text))
        at = text.find(ev["text"])
        if at < 0:
            raise ValueError(f"document: evidence not in section {ev['section']} (generator bug)")
        lo, hi = at + ev["offset"], at + ev["offset"] + len(ev["figure"])
        if not any(sid == ev["section"] and any(w <= lo and hi <= w + len(q) for w in where)
                   for sid, q, where in good):
            uncovered.append(ev["section"])
    return {"citations_ok": not bad and not uncovered, "bad_quotes": bad, "uncovered": uncovered}


def score_state(report, reference: Mapping[str, Any], state: Any) -> Score:
    answer = state.get("answer") if isinstance(state, Mapping) else None
    if not isinstance(answer, str) or not answer.strip():
        return Score(0.0, "env_score", {"answer_ok": False, "citations_ok": False, "error": "no answer"})
    answer_ok, why = check_answer(reference, answer)
    cites = check_citations(report, list(reference["evidence"]), state.get("citations"))
    if answer_ok and cites["citations_ok"]:
        value = 1.0
    elif answer_ok and not cites["bad_quotes"]:
        value = PARTIAL
    else:
        value = 0.0
    details = {"answer_ok": answer_ok, **cites, "gold": reference["answer"]}
    if why:
        details["answer_error"] = why
    return Score(value, "env_score", details)
