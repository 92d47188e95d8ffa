"""Reasoning-gym scoring through the one eval path without a model: gold completions score
pass@1 = 1.0 in every domain, near misses with partial credit count wrong; the harness's helpers."""

from __future__ import annotations

import pytest

from posttrain.eval.run import completions_path, sampling_temperature, stop_ids
from posttrain.eval.evaluate import evaluate_tasks
from posttrain.domains.reasoning_gym.source import gold_completion, make_tasks
from tests.unit.eval.scripted import ScriptedEngine


def test_sampling_temperature():
    assert sampling_temperature(0.0, 1) == 0.0
    assert sampling_temperature(0.0, 4) == 1.0
    assert sampling_temperature(0.7, 4) == 0.7


def test_perfect_model_scores_pass_at_1_of_one(tiny_tokenizer):
    tasks = [t for d in ("basic_arithmetic", "chain_sum", "leg_counting", "graph_color")
             for t in make_tasks(d, 3, 1_000_000)]
    engine = ScriptedEngine(tiny_tokenizer, tasks, {t.id: [gold_completion(t)] * 3 for t in tasks})
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, samples=3, temperature=1.0, max_tokens=64)
    assert list(res.domains) == ["basic_arithmetic", "chain_sum", "leg_counting", "graph_color"]
    for row in res.domains.values():
        assert (row["n"], row["pass@1"], row["pass@3"], row["verifier_errors"]) == (3, 1.0, 1.0, 0)
    assert res.overall["pass@1"] == 1.0 and res.overall["pass@3"] == 1.0
    assert all(r.scores == {"reasoning_gym": 1.0} for r in res.records)


def test_near_miss_with_partial_credit_is_wrong(tiny_tokenizer):
    tasks = make_tasks("chain_sum", 2, 1_000_000)
    gold = [f"Answer: {t.reference['answer']}" for t in tasks]
    # task 0: 2 of 5 right; task 1: 0 of 5 (an extra digit earns partial credit, not full marks)
    script = {tasks[0].id: [gold[0], gold[0], "Answer: 0", "", "Answer: x"], tasks[1].id: [gold[1] + "9"] * 5}
    res = evaluate_tasks(ScriptedEngine(tiny_tokenizer, tasks, script), tiny_tokenizer, tasks, samples=5,
                         temperature=1.0, max_tokens=16)
    assert all(r.score < 1.0 and not r.correct for r in res.records[5:])
    row = res.domains["chain_sum"]
    assert row["pass@1"] == pytest.approx((0.4 + 0.0) / 2) and row["pass@5"] == pytest.approx((1.0 + 0.0) / 2)


def test_completions_path():
    assert completions_path("runs/eval/base.json").as_posix() == "runs/eval/base.completions.jsonl"
    assert completions_path("out").as_posix() == "out.completions.jsonl"


def test_stop_ids_cover_end_of_turn_and_end_of_document(tiny_tokenizer):
    vocab = tiny_tokenizer.get_vocab()
    assert stop_ids(tiny_tokenizer) == sorted({vocab["<|im_end|>"], vocab["<|endoftext|>"]})
