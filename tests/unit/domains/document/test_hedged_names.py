"""Adversarial (issue 31): a name answer that lists candidates must not score, as its attacker would
write it; one name in a short sentence still does."""

from __future__ import annotations

from posttrain.domains.document.cite import check_answer
from posttrain.envs.env import Resources, make_env
from tests.unit.domains.document.helpers import gold_citations, tasks

GOLD = {"value": "Oakridge Advisory", "answer": "Oakridge Advisory", "decimals": None}


def test_hedged_name_answers_fail():
    for hedge in ("Graz or Oakridge Advisory", "Oakridge Advisory or Graz", "Oakridge Advisory, maybe Graz",
                  "either Graz or Oakridge Advisory", "Oakridge Advisory / Lena Hoffmann",
                  "Oakridge Advisory and Graz", "Oakridge Advisory Partners", "not Oakridge Advisory"):
        ok, why = check_answer(GOLD, hedge)
        assert not ok, hedge
        assert "besides the name" in why


def test_one_name_in_a_short_sentence_still_passes():
    for answer in ("Oakridge Advisory", "It is Oakridge Advisory.", "The answer is Oakridge Advisory",
                   "oakridge advisory", "It was the firm Oakridge Advisory."):
        assert check_answer(GOLD, answer) == (True, ""), answer


def test_a_hedged_named_task_scores_zero_even_with_real_citations():
    named = next(t for level in (1, 2) for t in tasks(level, 30, seed=5) if t.metadata["kind"] == "named")
    gold = named.reference["answer"]
    env = make_env("document", Resources())
    honest = env.score(named, {"answer": gold, "citations": gold_citations(named)})[0]
    assert honest.value == 1.0
    hedged = env.score(named, {"answer": f"Graz or {gold}", "citations": gold_citations(named)})[0]
    assert hedged.value == 0.0 and not hedged.details["answer_ok"]
    assert "besides the name" in hedged.details["answer_error"]
