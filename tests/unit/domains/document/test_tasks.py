"""The document task source: levels, kinds, depth, small tasks, held-out seeds, bad options."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import HELD_OUT_SEED
from tests.unit.domains.document.helpers import report_of, tasks

KINDS = {1: {"lookup", "named"}, 2: {"cell"}, 3: {"xref"}, 4: {"combine"}, 5: {"restated", "three"}}


def test_tasks_follow_the_contract_and_stay_small():
    for level in range(1, 6):
        for t in tasks(level, 2) + tasks(level, 2, split="test"):
            assert t.id == f"document/L{level}/{t.metadata['seed']}" and t.domain == t.env == "document"
            assert t.verifiers == ("env_score",) and t.metadata["level"] == level
            assert t.metadata["kind"] in KINDS[level]
            assert len(json.dumps(t.reference)) < 2_000 and len(t.prompt[0]["content"]) < 1_000
            assert [x["function"]["name"] for x in t.metadata["tools"]] == ["toc", "search", "read_section", "answer"]
    assert tasks(3, 1, split="test")[0].metadata["seed"] == HELD_OUT_SEED


def test_generation_is_deterministic_and_questions_vary():
    a, b = tasks(4, 3, seed=40), tasks(4, 3, seed=40)
    assert a == b
    questions = {t.prompt[0]["content"] for level in range(1, 6) for t in tasks(level, 8, seed=100)}
    assert len(questions) == 40
    kinds = Counter(t.metadata["kind"] for t in tasks(5, 16) + tasks(1, 24))
    assert set(kinds) == {"lookup", "named", "restated", "three"}


def test_evidence_count_grows_with_level():
    counts = {level: {len(t.reference["evidence"]) for t in tasks(level, 6)} for level in range(1, 6)}
    assert counts[1] == counts[2] == counts[3] == {1} and counts[4] == {2} and counts[5] <= {2, 3}
    assert all(t.reference["support"] for t in tasks(3, 4))  # the pointer sentence


def test_depth_places_the_first_evidence_span():
    tolerance = {1: 0.2, 2: 0.15, 3: 0.15, 4: 0.05, 5: 0.05}
    for level in range(1, 6):
        for depth in (0.0, 0.3, 0.7, 1.0):
            for t in tasks(level, 2, seed=7, depth=depth):
                assert t.metadata["depth"] == depth
                assert abs(t.metadata["span_depth"] - depth) <= tolerance[level], (t.id, depth)
    drawn = {t.metadata["depth"] for t in tasks(4, 6)}
    assert len(drawn) == 6 and all(0 <= d <= 1 for d in drawn)


def test_level_5_restated_questions_want_the_restated_figure():
    found = 0
    for t in tasks(5, 12):
        if t.metadata["kind"] != "restated":
            continue
        found += 1
        report = report_of(t)
        first = t.reference["evidence"][0]
        assert first["text"].startswith("Restatement:")
        new = next(s for s in report.restated.values() if s.text == first["text"])
        old = next(s for s in report.spans if s.fact == new.fact and s.kind in ("sentence", "row"))
        assert old.figure != new.figure and first["figure"] == new.figure
    assert found >= 2


@pytest.mark.parametrize("options, words", [
    ({"level": 6}, "level must be an integer in 1..5"), ({"depth": 1.5}, "depth must be in [0, 1]"),
    ({"depth": "deep"}, "depth must be float"), ({"rows": 3}, "unknown option 'rows'"),
    ({"level": 0}, "level must be")])
def test_bad_options_are_one_line_config_errors(options, words):
    with pytest.raises(ConfigError) as e:
        tasks(options.pop("level", 1), 1, **options)
    assert words in str(e.value) and "\n" not in str(e.value)
