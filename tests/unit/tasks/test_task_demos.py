"""SFT data built from task sources (tasks/sft_data.py, composed by recipes/sft.py `load_sft_source`):
gold demonstrations (`data.train: "tasks:NAME:N"`), BFCL's first possible answers written by the
model's tool-call parser, shown the tools the way episodes are; reasoning-gym worked examples (`gym:`)."""

from __future__ import annotations

import pytest

from posttrain.core.errors import DataError
from posttrain.envs.tools.parsers import get_parser
from posttrain.tasks.registry import make_source_tasks
from posttrain.recipes.sft import load_sft_source
from posttrain.domains.bfcl.ast_check import judge

TRAIN = {"bfcl_simple_python": {"split": "train"}, "bfcl_multiple": {"split": "train"}}


def test_demos_are_checker_correct_calls_of_the_train_split_only(tiny_tokenizer):
    data = load_sft_source("tasks:bfcl_simple_python,bfcl_multiple:40", seed=3, task_options=TRAIN,
                           tokenizer=tiny_tokenizer)
    assert len(data.examples) == 40
    tasks = {t.prompt[-1]["content"]: t for name in TRAIN for t in make_source_tasks(name, None, 3, TRAIN[name])}
    held_out = {t.prompt[-1]["content"] for name in TRAIN
                for t in make_source_tasks(name, None, 3, {"split": "test"})}
    hermes = get_parser("hermes")
    passed = 0
    for messages in data.examples:
        system, user, assistant = messages[0], messages[-2], messages[-1]
        assert system["role"] == "system" and "<tools>" in system["content"] and assistant["role"] == "assistant"
        assert user["content"] in tasks and user["content"] not in held_out
        action = hermes.parse(assistant["content"])
        assert not action.errors and action.tool_calls
        passed += judge(tasks[user["content"]].reference, [(c.name, c.arguments) for c in action.tool_calls], []).valid
    assert passed >= 38  # a few BFCL answers contradict their own schema (docs/bfcl.md)


def test_bad_specs_are_one_line_errors(tiny_tokenizer):
    with pytest.raises(DataError, match="expected tasks:NAME"):
        load_sft_source("tasks:bfcl_simple_python", tokenizer=tiny_tokenizer)
    with pytest.raises(DataError, match="no gold demonstrations"):
        load_sft_source("tasks:bfcl_irrelevance:5", tokenizer=tiny_tokenizer)
    with pytest.raises(DataError, match="tokenizer"):
        load_sft_source("tasks:bfcl_simple_python:5")


def test_gym_source_gives_valid_chats():
    data = load_sft_source("gym:basic_arithmetic,chain_sum:6", seed=0)
    assert len(data.examples) == 6
    assert all(ex[-1]["role"] == "assistant" and ex[-1]["content"] for ex in data.examples)
    with pytest.raises(DataError, match="expected gym:DOMAIN"):
        load_sft_source("gym:basic_arithmetic")
