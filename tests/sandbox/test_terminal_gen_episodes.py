"""`episodes:terminal_gen:N` (tasks/episode_sft.py): the generated terminal tasks' oracle is solve.sh's steps as
`shell` calls, one a turn, then a final answer; each example is the very trajectory RL's loop produces for
it in the terminal env's sandbox, loss on the policy's turns only, and it scores full marks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.domains.terminal.generate import generate
from posttrain.tasks import episode_sft
from posttrain.tasks.episode_sft import episode_demos, episode_oracle, training_tasks
from posttrain.tasks.generated import HELD_OUT_SEED
from tests.unit.tasks.oracle_play import oracle_rollout, spans


@pytest.fixture
def roomy_turns(monkeypatch):
    """The tiny tokenizer spends about a token per character: a step's call outgrows the 256-token turn
    limit, so the tasks here allow 8k-token turns (the same tasks reach episode_demos and the RL rollout)."""
    made = training_tasks

    def roomy(*args, **kwargs):
        return [replace(t, limits=replace(t.limits, max_new_tokens=8192)) for t in made(*args, **kwargs)]

    monkeypatch.setattr(episode_sft, "training_tasks", roomy)
    return roomy


def test_terminal_gen_oracle_is_one_shell_call_per_step(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    task = training_tasks("terminal_gen", 1, 0, {"level": 2, "family": "traceback"}, "test")[0]
    turns = episode_oracle("terminal_gen", "test")(task)
    steps = generate("traceback", 2, task.metadata["seed"]).steps
    assert len(steps) >= 2 and len(turns) == len(steps) + 1
    assert [t.calls[0].arguments["command"] for t in turns[:-1]] == steps
    assert all(len(t.calls) == 1 and t.calls[0].name == "shell" for t in turns[:-1])
    assert not turns[-1].calls and turns[-1].content


def test_terminal_gen_examples_are_the_rl_trajectories(tmp_path, monkeypatch, roomy_turns, tiny_tokenizer):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    options = {"level": 1, "family": "traceback,build"}
    records, info = episode_demos("terminal_gen:2", seed=3, task_options={"terminal_gen": options},
                                  tokenizer=tiny_tokenizer, parser="hermes")
    assert (info["episodes"], info["kept"], info["dropped"]) == (2, 2, 0)  # both oracles scored full marks
    tasks = roomy_turns("terminal_gen", 2, 3, options, "test")
    assert all(t.metadata["seed"] < HELD_OUT_SEED for t in tasks)
    assert {t.metadata["family"] for t in tasks} == {"traceback", "build"}
    turns_of, groups, end, parser = oracle_rollout(tiny_tokenizer, "terminal_gen", tasks)
    for record, (traj,), turns in zip(records, groups, turns_of):
        assert traj.stop_reason == "done"
        assert record["input_ids"] == list(traj.token_ids)  # shell outputs are deterministic here
        assert record["loss_mask"] == list(traj.loss_mask)
        runs = spans(record["input_ids"], record["loss_mask"])
        masked = [ids for k, ids in runs if k]
        want = [parser.format_calls(t.calls, t.content) if t.calls else t.content for t in turns]
        assert [tiny_tokenizer.decode(ids[:-1], skip_special_tokens=False) for ids in masked] == want
        assert all(ids[-1] == end for ids in masked)
        context = [tiny_tokenizer.decode(ids, skip_special_tokens=False) for k, ids in runs if not k]
        assert len(context) == len(turns)  # the prompt, then one tool result between turns
        assert all("[exit code 0]" in c for c in context[1:])  # every step ran cleanly in the episode's shell
