"""SFT examples from oracle episodes (tasks/episode_sft.py, `data.train: "episodes:NAME:N"`): each example
is the very trajectory RL's loop produces for the task's oracle (envs/oracle.py OracleEngine through
envs/rollout.py), loss only on the policy's turns; token records pass the data checks and the packer
as they are; bad specs are one line."""

from __future__ import annotations

import re

import pytest

from posttrain.core.errors import DataError
from posttrain.recipes.sft import load_sft_source
from posttrain.tasks.episode_sft import episode_demos, training_tasks
from posttrain.tasks.generated import HELD_OUT_SEED
from tests.unit.tasks.oracle_play import oracle_rollout, spans
from posttrain.tasks.registry import is_generated
from posttrain.train.data import TokenRecord, from_records
from posttrain.train.packing import IGNORE, tokenize_examples


def timings_out(text: str) -> str:
    return re.sub(r"in \d+\.\d+s", "in _s", text)


# cad's render result says how long the render took ("Rendered part.stl in 0.41s"): two plays of one
# episode differ in those tokens only, so there the comparison leaves the seconds out
@pytest.mark.parametrize("name, timed", [("sql", False), ("document", False), ("cad", True),
                                         ("bfcl_simple_python", False)])
def test_examples_are_the_rl_trajectories_with_loss_on_policy_turns_only(name, timed, tiny_tokenizer):
    options = {"level": 1} if is_generated(name) else {}
    records, info = episode_demos(f"{name}:3", seed=2, task_options={name: options}, tokenizer=tiny_tokenizer,
                                  parser="hermes")
    assert (info["episodes"], info["kept"], info["dropped"]) == (3, 3, 0)
    tasks = training_tasks(name, 3, 2, options, "test")
    if is_generated(name):
        assert all(t.metadata["seed"] < HELD_OUT_SEED for t in tasks)
    # RL's rollout of the same oracles, on its own (other episode seeds, as benchmarks/envs.py runs it)
    turns_of, groups, end, parser = oracle_rollout(tiny_tokenizer, name, tasks)
    for record, (traj,), turns in zip(records, groups, turns_of):
        runs = spans(record["input_ids"], record["loss_mask"])
        masked = [ids for k, ids in runs if k]
        context = [tiny_tokenizer.decode(ids, skip_special_tokens=False) for k, ids in runs if not k]
        if not timed:
            assert record["input_ids"] == list(traj.token_ids)
            assert record["loss_mask"] == list(traj.loss_mask)
        else:
            rl = spans(traj.token_ids, traj.loss_mask)
            assert [ids for k, ids in rl if k] == masked
            rl_context = [tiny_tokenizer.decode(ids, skip_special_tokens=False) for k, ids in rl if not k]
            assert [timings_out(c) for c in rl_context] == [timings_out(c) for c in context]
            assert any(c != timings_out(c) for c in context)  # the seconds are there to leave out
        # the masked spans are exactly the oracle's turns in the model's format, each with its end token
        want = [parser.format_calls(t.calls, t.content) if t.calls else t.content for t in turns]
        assert [tiny_tokenizer.decode(ids[:-1], skip_special_tokens=False) for ids in masked] == want
        assert all(ids[-1] == end for ids in masked)
        # the prompt and the tool results are context, never trained on
        assert runs[0][0] == 0 and context[0].startswith("<|im_start|>")
        assert context[0].endswith("<|im_start|>assistant\n")
        assert len(context) == len(turns)  # prompt + one bridge (tool results) between turns
        assert all(c.startswith("<|im_end|>\n<|im_start|>tool\n") or c.startswith("\n<|im_start|>tool\n")
                   for c in context[1:])
        assert all("<tool_call>" not in c for c in context[1:])


def test_token_records_pass_the_data_checks_and_pack_as_they_are(tiny_tokenizer):
    records, _ = episode_demos("sql:2", task_options={"sql": {"level": 1}}, tokenizer=tiny_tokenizer)
    data = from_records(records, "episodes:sql:2")
    assert all(isinstance(ex, TokenRecord) for ex in data.examples)
    examples, stats = tokenize_examples(tiny_tokenizer, data.examples, max_seq_len=1 << 20)
    assert stats.truncated == stats.dropped == 0
    for ex, record in zip(examples, records):
        ids, mask = record["input_ids"], record["loss_mask"]
        assert ex.input_ids.tolist() == ids
        want = [ids[t + 1] if mask[t + 1] else IGNORE for t in range(len(ids) - 1)] + [IGNORE]
        assert ex.labels.tolist() == want
    with pytest.raises(DataError, match=r"example 1: 'loss_mask' must be a list as long as 'input_ids'"):
        from_records([{"input_ids": [1, 2, 3], "loss_mask": [0, 1]}], "x")
    with pytest.raises(DataError, match=r"example 1: 'loss_mask' marks no token to train on"):
        from_records([{"input_ids": [1, 2, 3], "loss_mask": [1, 0, 0]}], "x")


@pytest.mark.parametrize("spec, options, match", [
    ("episodes:sqll:4", {}, r"episodes:sqll:4: unknown task source 'sqll' \(did you mean sql"),
    ("episodes:bfcl_irrelevance:4", {}, r"source 'bfcl_irrelevance' has no oracle .*; playable: .*sql"),
    ("episodes:bfcl_multi_turn_base:4", {}, r"source 'bfcl_multi_turn_base' has no oracle"),
    ("episodes:sql:4", {"sql": {"split": "test"}}, r"sql: split 'test' reaches held-out tasks"),
    ("episodes:bfcl_multiple:4", {"bfcl_multiple": {"split": "all"}}, r"split 'all' reaches held-out tasks"),
    ("episodes:sql:4", {"sql": {"level": 9}}, r"episodes:sql:4: sql: option level must be"),
    ("episodes:sql", {}, r"expected episodes:NAME\[,NAME...\]:N"),
])
def test_bad_specs_are_one_line_errors(spec, options, match, tiny_tokenizer):
    with pytest.raises(DataError, match=match) as e:
        load_sft_source(spec, task_options=options, tokenizer=tiny_tokenizer)
    assert "\n" not in str(e.value)
