"""The reasoning-gym task source: domains by name, gold answers score 1.0, answer extraction, seeds."""

from __future__ import annotations

import pytest

from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym import source as rg
from posttrain.domains.reasoning_gym.source import (
    EVAL_SEED_START,
    extract_answer,
    gold_completion,
    list_domains,
    make_tasks,
    score,
    sft_examples,
)

# Checker-scored domains whose datasets give neither an answer nor an example solution.
NO_GOLD = {"boxnet", "rush_hour"}


def test_list_domains_is_every_registered_dataset():
    domains = list_domains()
    assert len(domains) >= 100
    assert domains == sorted(domains)
    assert {"basic_arithmetic", "chain_sum", "leg_counting", "composite"} <= set(domains)


@pytest.mark.parametrize("domain", list_domains())
def test_every_domain_makes_tasks_and_gold_scores_one(domain):
    tasks = make_tasks(domain, 2, seed=11)
    assert [t.id for t in tasks] == [f"{domain}/11", f"{domain}/12"]
    for task in tasks:
        assert task.domain == domain
        assert len(task.prompt) == 1 and task.prompt[0]["role"] == "user"
        assert task.prompt[0]["content"].endswith(rg.INSTRUCTION)
        gold = gold_completion(task)
        if domain in NO_GOLD:
            assert gold is None
            continue
        assert score(task, gold) == 1.0, (domain, gold)
        # a bare "Answer: <gold>" line is enough too
        assert score(task, f"Answer: {rg.gold_answer(task)}") == 1.0


@pytest.mark.parametrize("domain", ["basic_arithmetic", "chain_sum", "leg_counting", "gcd"])
def test_wrong_and_empty_answers_score_below_one(domain):
    task = make_tasks(domain, 1, seed=3)[0]
    assert score(task, "") == 0.0
    assert score(task, "Answer: definitely not it") < 1.0


def test_scoring_does_not_crash_on_garbage():
    task = make_tasks("graph_color", 1, seed=0)[0]
    assert score(task, "Answer: {not json") == 0.0


def test_unknown_domain_lists_close_matches():
    with pytest.raises(ConfigError) as e:
        make_tasks("basic_arithmetc", 3, seed=0)
    msg = str(e.value)
    assert "basic_arithmetc" in msg and "basic_arithmetic" in msg and "posttrain tasks list" in msg
    assert "\n" not in msg


def test_unknown_domain_without_close_match_says_how_to_list():
    with pytest.raises(ConfigError, match="posttrain tasks list"):
        make_tasks("zzzzqqq", 1, seed=0)


def test_bad_dataset_option_is_a_config_error():
    with pytest.raises(ConfigError, match="basic_arithmetic"):
        make_tasks("basic_arithmetic", 1, seed=0, config={"no_such_option": 1})


def test_dataset_options_pass_through():
    tasks = make_tasks("basic_arithmetic", 20, seed=0, config={"max_terms": 2, "max_digits": 1})
    for task in tasks:
        assert task.reference["metadata"]["num_terms"] == 2
        assert score(task, gold_completion(task)) == 1.0


def test_same_seed_same_tasks_other_seed_other_tasks():
    a = [t.prompt[0]["content"] for t in make_tasks("chain_sum", 5, seed=42)]
    b = [t.prompt[0]["content"] for t in make_tasks("chain_sum", 5, seed=42)]
    c = [t.prompt[0]["content"] for t in make_tasks("chain_sum", 5, seed=43)]
    assert a == b
    assert a[1:] == c[:4]  # item i of seed S is reasoning-gym's item S + i


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("x = 3\nAnswer: 42", "42"),
        ("Answer: 1\nthen again...\nAnswer:  7  \n", "7"),
        ("The result is\n\n  13  \n\n", "13"),
        ("Answer:", ""),
        ("", ""),
        ("   \n  ", ""),
        ("Answer: [[1, 2],\n [3, 4]]", "[[1, 2],\n [3, 4]]"),
        ("no tag here", "no tag here"),
    ],
)
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


def test_sft_examples_are_chat_pairs_in_the_eval_format():
    examples = sft_examples(["basic_arithmetic", "chain_sum"], 7, seed=0)
    assert len(examples) == 7
    users = [ex["messages"][0] for ex in examples]
    assert all(u["role"] == "user" and u["content"].endswith(rg.INSTRUCTION) for u in users)
    # interleaved: domains alternate; 4 + 3 examples
    eval_prompts = {t.prompt[0]["content"] for t in make_tasks("basic_arithmetic", 4, 0) + make_tasks("chain_sum", 3, 0)}
    assert {u["content"] for u in users} == eval_prompts
    for ex in examples:
        assert ex["messages"][1]["role"] == "assistant"
        assert ex["messages"][1]["content"].splitlines()[-1].startswith("Answer: ")
    # worked answers are correct
    tasks = make_tasks("basic_arithmetic", 4, 0)
    by_prompt = {t.prompt[0]["content"]: t for t in tasks}
    for ex in examples:
        task = by_prompt.get(ex["messages"][0]["content"])
        if task is not None:
            assert score(task, ex["messages"][1]["content"]) == 1.0
            assert "\n= " in ex["messages"][1]["content"]  # arithmetic has worked steps


def test_sft_examples_never_overlap_eval_questions():
    domains = ("basic_arithmetic", "chain_sum")
    train = {ex["messages"][0]["content"] for ex in sft_examples(list(domains), 4000, 0)}
    held_out = {t.prompt[0]["content"] for d in domains for t in make_tasks(d, rg.HOLDOUT, EVAL_SEED_START)}
    assert len(train) > 3900
    assert not train & held_out
    # disjoint seeds alone would not do: these small problem spaces repeat questions across seeds
    raw = {t.prompt[0]["content"] for d in domains for t in make_tasks(d, 2000, 0)}
    assert raw & held_out


def test_training_tasks_skip_held_out_questions_and_keep_count():
    tasks = rg.training_tasks("basic_arithmetic", 1500, seed=0)
    assert len(tasks) == 1500 and len({t.id for t in tasks}) == 1500
    held_out = rg.held_out_questions("basic_arithmetic", rg._config_key("basic_arithmetic", None))
    assert not {t.reference["question"] for t in tasks} & held_out


def test_sft_examples_reject_eval_seeds_and_gold_less_domains():
    with pytest.raises(ConfigError, match="overlap eval seeds"):
        sft_examples(["chain_sum"], 10, seed=EVAL_SEED_START - 5)
    with pytest.raises(ConfigError, match="no gold"):
        sft_examples(["rush_hour"], 2, seed=0)
    with pytest.raises(ConfigError, match="unknown"):
        sft_examples(["chain_sum", "nope"], 2, seed=0)


def test_sft_examples_with_options_follow_them_and_skip_eval_questions():
    from posttrain.domains.reasoning_gym.source import held_out_questions, _config_key

    import re

    options = {"chain_sum": {"max_terms": 2, "max_digits": 2}}
    examples = sft_examples(["chain_sum"], 300, 0, options=options)
    questions = [ex["messages"][0]["content"].split("\n\n")[0] for ex in examples]
    assert all(len(re.findall(r"\d+", q)) <= 2 for q in questions)  # the options were applied
    # a small problem space: eval questions drawn with the same options repeat across seeds
    held = held_out_questions("chain_sum", _config_key("chain_sum", options["chain_sum"]))
    unfiltered = [t.reference["question"] for t in make_tasks("chain_sum", 300, 0, config=options["chain_sum"])]
    assert any(q in held for q in unfiltered), "the check below would prove nothing"
    assert not any(q in held for q in questions)
