"""The harness's scoring path without a model: spec parsing, gold completions score pass@1 = 1.0,
summaries by hand, output file names."""

from __future__ import annotations

import pytest

from posttrain.errors import ConfigError
from posttrain.eval.harness import (
    completions_path,
    overall,
    parse_spec,
    sampling_temperature,
    score_completions,
    summarize,
)
from posttrain.tasks.reasoning_gym import gold_completion, make_tasks


def test_parse_spec():
    assert parse_spec("basic_arithmetic:10,chain_sum", 7) == [("basic_arithmetic", 10), ("chain_sum", 7)]
    assert parse_spec(" gcd , lcm:3 ,", 2) == [("gcd", 2), ("lcm", 3)]


@pytest.mark.parametrize(
    "spec, match",
    [("basic_arithmetic:x", "integer"), ("gcd:0", "> 0"), ("", "names no domain"), ("gcd,gcd", "twice"),
     ("chain_summ", "chain_sum")],
)
def test_parse_spec_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_spec(spec, 5)


def test_sampling_temperature():
    assert sampling_temperature(0.0, 1) == 0.0
    assert sampling_temperature(0.0, 4) == 1.0
    assert sampling_temperature(0.7, 4) == 0.7


def test_perfect_model_scores_pass_at_1_of_one():
    tasks = [t for d in ("basic_arithmetic", "chain_sum", "leg_counting", "graph_color")
             for t in make_tasks(d, 5, 1_000_000)]
    completions = [[gold_completion(t)] * 3 for t in tasks]
    scores = score_completions(tasks, completions)
    domains = summarize(tasks, scores, [[10, 20, 30]] * len(tasks), samples=3)
    assert set(domains) == {"basic_arithmetic", "chain_sum", "leg_counting", "graph_color"}
    for row in domains.values():
        assert row == {"n": 5, "pass@1": 1.0, "pass@3": 1.0, "mean_length": 20.0}
    assert overall(domains, 3) == {"pass@1": 1.0, "pass@3": 1.0}


def test_summary_by_hand():
    tasks = make_tasks("chain_sum", 2, 1_000_000)
    gold = [f"Answer: {t.reference['answer']}" for t in tasks]
    # task 0: 2 of 5 correct; task 1: 0 of 5 (a near miss with partial credit is still wrong)
    completions = [[gold[0], gold[0], "Answer: 0", "", "Answer: x"], [f"Answer: {tasks[1].reference['answer']}9"] * 5]
    scores = score_completions(tasks, completions)
    assert all(s < 1.0 for s in scores[1])
    domains = summarize(tasks, scores, [[1, 2, 3, 4, 5], [5] * 5], samples=5)
    row = domains["chain_sum"]
    assert row["n"] == 2
    assert row["pass@1"] == pytest.approx((0.4 + 0.0) / 2)
    assert row["pass@5"] == pytest.approx((1.0 + 0.0) / 2)
    assert row["mean_length"] == pytest.approx(4.0)
    k1 = summarize(tasks, [s[:1] for s in scores], [[3], [5]], samples=1)
    assert set(k1["chain_sum"]) == {"n", "pass@1", "mean_length"}
    assert overall(k1, 1) == {"pass@1": 0.5}


def test_completions_path():
    assert completions_path("runs/eval/base.json").as_posix() == "runs/eval/base.completions.jsonl"
    assert completions_path("out").as_posix() == "out.completions.jsonl"


def test_stop_ids_cover_end_of_turn_and_end_of_document(tiny_tokenizer):
    from posttrain.eval.harness import stop_ids

    vocab = tiny_tokenizer.get_vocab()
    assert stop_ids(tiny_tokenizer) == sorted({vocab["<|im_end|>"], vocab["<|endoftext|>"]})
