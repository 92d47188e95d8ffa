"""The one eval path with a scripted engine: pass@k, Wilson intervals and overall by hand, the
seeds each sample is drawn with, verifier errors, and the in-loop metrics from the same result."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from posttrain.eval.evaluate import evaluate_in_loop, evaluate_tasks, flat_metrics, wilson_interval
from posttrain.core.types import Task
from posttrain.verifiers import VERIFIERS, register
from tests.unit.eval.scripted import ScriptedEngine

RIGHT, WRONG = "Answer: 5", "Answer: 6"

if "test_raises" not in VERIFIERS:

    @register("test_raises")
    def _raises(task, traj):
        raise RuntimeError("checker crashed")


def qa(domain: str, i: int, verifiers=("exact",)) -> Task:
    return Task(id=f"{domain}/{i}", domain=domain, prompt=({"role": "user", "content": f"{domain} question {i}"},),
                reference="5", verifiers=verifiers)


def scripted(tok, correct: dict[str, list[int]], k: int):
    """Tasks of each domain with correct[domain][i] right answers among k samples (right ones first)."""
    tasks = [qa(d, i) for d, counts in correct.items() for i in range(len(counts))]
    script = {f"{d}/{i}": [RIGHT] * c + [WRONG] * (k - c) for d, counts in correct.items() for i, c in enumerate(counts)}
    return tasks, ScriptedEngine(tok, tasks, script)


def test_wilson_matches_textbook_values():
    # Wilson 95% intervals for x successes of n (e.g. Newcombe 1998, Brown-Cai-DasGupta 2001 tables)
    assert wilson_interval(0.5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    assert wilson_interval(0.0, 10) == pytest.approx([0.0, 0.2775], abs=1e-4)
    assert wilson_interval(1.0, 10) == pytest.approx([0.7225, 1.0], abs=1e-4)
    assert wilson_interval(0.0, 3) == pytest.approx([0.0, 0.5615], abs=1e-4)
    assert wilson_interval(0.3, 100) == pytest.approx([0.2189, 0.3958], abs=1e-4)


def test_pass_at_k_intervals_and_overall_by_hand(tiny_tokenizer):
    # domain a: 4 tasks with 4, 2, 1, 0 right of K=4; domain b: 2 tasks with 0 and 4 right
    tasks, engine = scripted(tiny_tokenizer, {"a": [4, 2, 1, 0], "b": [0, 4]}, k=4)
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, samples=4, temperature=1.0, max_tokens=16, seed=100)
    a, b = res.domains["a"], res.domains["b"]
    assert list(res.domains) == ["a", "b"] and a["n"] == 4 and b["n"] == 2
    assert a["pass@1"] == pytest.approx((1 + 0.5 + 0.25 + 0) / 4)  # 0.4375
    assert a["pass@4"] == pytest.approx(3 / 4)  # any right among all 4
    assert b["pass@1"] == pytest.approx(0.5) and b["pass@4"] == pytest.approx(0.5)
    # Wilson at p = 0.4375, n = 4 by hand: z^2 = 3.8415, centre (p + z^2/8) / (1 + z^2/4) = 0.46812,
    # half-width z / (1 + z^2/4) * sqrt(p(1-p)/4 + z^2/64) = 0.34856
    assert a["pass@1_ci95"] == pytest.approx([0.46812 - 0.34856, 0.46812 + 0.34856], abs=1e-4)
    assert b["pass@4_ci95"] == pytest.approx(wilson_interval(0.5, 2))
    assert a["mean_length"] == pytest.approx(3.0) and a["verifier_errors"] == 0  # "Answer: 5" is 3 tokens
    o = res.overall
    assert o["n"] == 6 and o["pass@1"] == pytest.approx((0.4375 + 0.5) / 2) and o["pass@4"] == pytest.approx(0.625)
    n_eff = 4 / (1 / 4 + 1 / 2)  # D^2 / sum(1/n_d) = 5.333
    assert o["pass@1_ci95"] == pytest.approx(wilson_interval((0.4375 + 0.5) / 2, n_eff))
    assert o["pass@1_ci95"][0] < o["pass@1"] < o["pass@1_ci95"][1]
    # records: task order, then sample order; 24 of them
    assert [(r.task_id, r.sample) for r in res.records[:5]] == [("a/0", 0), ("a/0", 1), ("a/0", 2), ("a/0", 3), ("a/1", 0)]
    r = res.records[5]  # a/1 sample 1: right; a/1 sample 2: wrong
    assert (r.completion, r.score, r.correct, r.finish_reason, r.scores) == (RIGHT, 1.0, True, "stop", {"exact": 1.0})
    assert (res.records[6].score, res.records[6].correct) == (0.0, False)


def test_each_sample_is_seeded_seed_plus_i_times_k_plus_j(tiny_tokenizer):
    tasks, engine = scripted(tiny_tokenizer, {"a": [1, 2, 0]}, k=3)
    evaluate_tasks(engine, tiny_tokenizer, tasks, samples=3, temperature=0.7, top_p=0.9, max_tokens=9,
                   stop_ids=[7], seed=50, tasks_per_call=2)
    seen = {(tid, p.seed) for tid, p in engine.requests}
    assert seen == {(f"a/{i}", 50 + 3 * i + j) for i in range(3) for j in range(3)}
    p = engine.requests[0][1]
    assert (p.temperature, p.top_p, p.max_tokens, p.stop_token_ids) == (0.7, 0.9, 9, (7,))


def test_a_verifier_that_raises_counts_wrong_and_is_reported(tiny_tokenizer):
    tasks = [qa("a", 0), qa("a", 1, verifiers=("exact", "test_raises"))]
    engine = ScriptedEngine(tiny_tokenizer, tasks, {"a/0": [RIGHT], "a/1": [RIGHT]})
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, max_tokens=8)
    good, bad = res.records
    assert good.correct and not good.errors
    assert not bad.correct and bad.score == 1.0  # exact judged it right, but a verifier failed
    assert bad.errors == ("test_raises: RuntimeError: checker crashed",)
    assert res.domains["a"]["verifier_errors"] == 1 and res.domains["a"]["pass@1"] == 0.5
    assert bad.to_json()["errors"] == ["test_raises: RuntimeError: checker crashed"]


def test_task_score_rule_decides_correct(tiny_tokenizer):
    # two verifiers, one says 1 and one 0: the mean (0.5) is not full marks, `any` is
    def two(i, combine):
        return replace(qa("a", i, verifiers=("exact", "numeric")), metadata={"combine": combine})

    tasks = [two(0, "mean"), two(1, "any")]
    engine = ScriptedEngine(tiny_tokenizer, tasks, {"a/0": ["Answer: 5.0"], "a/1": ["Answer: 5.0"]})
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, max_tokens=8)
    assert [r.scores for r in res.records] == [{"exact": 0.0, "numeric": 1.0}] * 2
    assert [r.correct for r in res.records] == [False, True]


def test_in_loop_metrics_are_the_same_result(tiny_tokenizer):
    tasks, engine = scripted(tiny_tokenizer, {"b": [1, 0, 1, 1], "a": [0, 1]}, k=1)
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, samples=1, max_tokens=8)
    flat = flat_metrics(res)
    assert flat == {"pass@1/a": 0.5, "pass@1/b": 0.75, "pass@1": pytest.approx(0.625)}
    sets = {"b": [t for t in tasks if t.domain == "b"], "a": [t for t in tasks if t.domain == "a"]}
    engine2 = ScriptedEngine(tiny_tokenizer, tasks, engine.script)
    assert evaluate_in_loop(engine2, tiny_tokenizer, sets, stop_ids=[3], max_tokens=8) == flat
    assert all(p.temperature == 0.0 and p.stop_token_ids == (3,) for _, p in engine2.requests)
    assert evaluate_in_loop(engine2, tiny_tokenizer, {"a": []}, stop_ids=[], max_tokens=8) == {}


def test_greedy_with_several_samples_is_refused(tiny_tokenizer):
    tasks, engine = scripted(tiny_tokenizer, {"a": [1]}, k=2)
    with pytest.raises(ValueError, match="greedy"):
        evaluate_tasks(engine, tiny_tokenizer, tasks, samples=2, temperature=0.0)


def test_interval_always_contains_the_estimate():
    for n in (1, 2, 7, 50):
        for x in range(n + 1):
            lo, hi = wilson_interval(x / n, n)
            assert 0.0 <= lo <= x / n <= hi <= 1.0 and hi - lo > 0
            assert math.isclose(lo + hi, 2 * (x / n + 1.92073 / n) / (1 + 3.84146 / n), abs_tol=1e-4) or lo == 0 or hi == 1
