"""The report generator: deterministic, varied, longer by level, evidence where the depth asks."""

from __future__ import annotations

import time

from posttrain.domains.document.report import Table, _Builder, build_report
from posttrain.domains.document.search import tokens


def test_reports_are_deterministic_and_vary_by_seed():
    a, b = _Builder(11, 3, 0.4).build(), _Builder(11, 3, 0.4).build()
    assert a.text() == b.text() and [s.text for s in a.spans] == [s.text for s in b.spans]
    texts = {build_report(seed, 2, 0.5).text() for seed in range(12)}
    kinds = {build_report(seed, 1, 0.5).template.kind for seed in range(30)}
    titles = {build_report(seed, 2, 0.5).title for seed in range(12)}
    assert len(texts) == 12 and len(titles) >= 10 and len(kinds) == 4


def test_length_and_sections_grow_with_level():
    reports = [build_report(5, lv, 0.5) for lv in range(1, 6)]
    sizes = [(len(r.sections), r.chars, len(tokens(r.text()))) for r in reports]
    for (s0, c0, _), (s1, c1, _) in zip(sizes, sizes[1:]):
        assert s1 > 2 * s0 - 2 and c1 > 2 * c0
    assert 3_000 < sizes[0][1] < 9_000  # ~1-2k tokens
    assert sizes[4][0] >= 140 and 240_000 < sizes[4][1] < 420_000  # ~60-100k tokens


def test_level_5_builds_in_well_under_a_second():
    start = time.perf_counter()
    for seed in range(3):
        _Builder(seed, 5, 0.3).build()
    assert (time.perf_counter() - start) / 3 < 0.5


def test_every_span_is_verbatim_in_its_section_with_its_figure_at_its_offset():
    for level in (2, 4, 5):
        r = build_report(8, level, 0.6)
        for s in r.spans:
            assert s.text in r.section(s.section).text
            assert s.text[s.offset: s.offset + len(s.figure)] == s.figure


def test_structure_markers_tables_cross_references_and_restatements():
    r = build_report(3, 4, 0.5)
    sec = r.sections[1]
    assert sec.text.startswith(f"{sec.id} {sec.title}\n[{sec.id} ¶1] ")
    assert any(isinstance(b, Table) for s in r.sections for b in s.blocks)
    pointers = [s for s in r.spans if s.kind == "pointer"]
    assert pointers
    for p in pointers:  # each pointer names a table that is in the section it points to
        assert any(isinstance(b, Table) and f"Table {b.number}" == p.figure for b in r.section(p.value).blocks)
    order = {s.id: i for i, s in enumerate(r.sections)}
    assert len(r.restated) == 3
    for fact, new in r.restated.items():  # a restatement comes after the figure it replaces, with another value
        old = next(s for s in r.spans if s.fact == fact and s.kind in ("sentence", "row"))
        assert order[new.section] > order[old.section] and new.value != old.value
        assert f"originally reported in Section {old.section}" in new.text
    # every (metric, group, entity, column) figure is stated at most once
    stated = [s.fact for s in r.spans if s.kind in ("sentence", "row")]
    assert len(stated) == len(set(stated))
