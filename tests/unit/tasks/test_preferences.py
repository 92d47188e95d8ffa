"""Synthetic preference pairs (tasks/preferences.py): deterministic, true ground truth, held-out
questions disjoint from training ones, loadable through `pref:` specs."""

from __future__ import annotations

import re

import pytest

from posttrain.core.errors import DataError
from posttrain.tasks.preferences import (
    EVAL_SEED_OFFSET,
    KINDS,
    concise_vs_rambling,
    correct_vs_wrong,
    make_preferences,
    polite_vs_curt,
    preference_records,
    unpaired,
    write_jsonl,
)
from posttrain.train.pairs import load_pairs


def text(value) -> str:
    return value if isinstance(value, str) else value[-1]["content"]


def question(record) -> str:
    return text(record["prompt"])


def test_deterministic_by_seed():
    kinds = list(KINDS)
    assert make_preferences(kinds, 60, seed=3) == make_preferences(kinds, 60, seed=3)
    assert make_preferences(kinds, 60, seed=3) != make_preferences(kinds, 60, seed=4)
    counts = {k: sum(r["kind"] == k for r in make_preferences(kinds, 61, seed=0)) for k in kinds}
    assert counts == {"correct_vs_wrong": 21, "concise_vs_rambling": 20, "polite_vs_curt": 20}


@pytest.mark.parametrize("conversational", [True, False])
def test_correct_vs_wrong_ground_truth(conversational):
    for r in correct_vs_wrong(200, seed=1, conversational=conversational):
        a, b = map(int, re.fullmatch(r"What is (\d+) \+ (\d+)\?", question(r)).groups())
        chosen, rejected = text(r["chosen"]), text(r["rejected"])
        assert int(chosen.rsplit("Answer: ", 1)[1]) == a + b == r["answer"]
        assert int(rejected.rsplit("Answer: ", 1)[1]) != a + b
        assert chosen.startswith(f"{a} + {b} = ") and rejected.startswith(f"{a} + {b} = ")


def test_concise_and_polite_ground_truth():
    for r in concise_vs_rambling(100, seed=2):
        a, b = map(int, re.fullmatch(r"What is (\d+) times (\d+)\?", question(r)).groups())
        chosen, rejected = text(r["chosen"]), text(r["rejected"])
        assert chosen == f"{a} times {b} is {a * b}. Answer: {a * b}"
        assert f"{a} times {b} is {a * b}." in rejected and len(rejected) > 3 * len(chosen)
    for r in polite_vs_curt(100, seed=2):
        a, b = map(int, re.fullmatch(r"What is (\d+) minus (\d+)\?", question(r)).groups())
        chosen, rejected = text(r["chosen"]), text(r["rejected"])
        assert f"{a} minus {b} is {a - b}." in chosen and rejected.startswith(f"{a} minus {b} is {a - b}.")
        polite = r"of course|help|sure|great|thanks|let me know"
        assert re.search(polite, chosen) and not re.search(polite, rejected)


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_train_eval_overlap_and_no_repeats(kind):
    train = [question(r) for r in make_preferences([kind], 1500, seed=0)]
    held = [question(r) for r in make_preferences([kind], 1500, seed=EVAL_SEED_OFFSET)]
    other_train = [question(r) for r in make_preferences([kind], 1500, seed=7)]
    assert len(set(train)) == len(train) and len(set(held)) == len(held)
    assert not set(train) & set(held) and not set(other_train) & set(held)
    assert set(train) & set(other_train)  # the split, not luck, keeps them apart (train seeds do overlap)


@pytest.mark.parametrize("conversational", [True, False])
def test_chosen_never_equals_rejected(conversational):
    for r in make_preferences(list(KINDS), 300, seed=5, conversational=conversational):
        assert text(r["chosen"]).strip() and text(r["rejected"]).strip()
        assert r["chosen"] != r["rejected"]


def _pref_pairs(spec, tok, seed=0):
    return load_pairs(spec, tok, records=preference_records(spec, seed))


def test_pref_spec_through_load_pairs(tiny_tokenizer):
    data = _pref_pairs("pref:correct_vs_wrong,polite_vs_curt:20", tiny_tokenizer)
    assert len(data.pairs) == 20 and not data.bad_lines and not data.template_issues
    wheres = [p.where for p in data.pairs]
    assert sum(w.startswith("pref:correct_vs_wrong#") for w in wheres) == 10
    assert "pref:polite_vs_curt#1" in wheres and len(set(wheres)) == 20
    first = data.pairs[0]
    assert first.prompt_ids and first.chosen_ids != first.rejected_ids
    again = _pref_pairs("pref:correct_vs_wrong,polite_vs_curt:20", tiny_tokenizer)
    other = _pref_pairs("pref:correct_vs_wrong,polite_vs_curt:20", tiny_tokenizer, seed=1)
    assert again.pairs == data.pairs and other.pairs != data.pairs
    for bad in ("pref:nope:5", "pref:correct_vs_wrong:0", "pref:correct_vs_wrong"):
        with pytest.raises(DataError, match=rf"^{bad}: "):
            _pref_pairs(bad, tiny_tokenizer)


def test_unpaired_records_load_as_kto_examples(tmp_path, tiny_tokenizer):
    pairs = make_preferences(["correct_vs_wrong"], 5, seed=0)
    kto = unpaired(pairs)
    assert [r["label"] for r in kto] == [True, False] * 5
    assert kto[0]["completion"] == pairs[0]["chosen"] and kto[1]["completion"] == pairs[0]["rejected"]
    data = load_pairs(str(write_jsonl(kto, tmp_path / "kto.jsonl")), tiny_tokenizer)
    assert data.pairs == [] and [e.desirable for e in data.examples] == [True, False] * 5
    assert data.examples[0].prompt_ids == data.examples[1].prompt_ids
