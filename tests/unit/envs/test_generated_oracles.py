"""Every generated environment's oracle played through the whole episode loop (envs/oracle.py's
OracleEngine: the calls as tokens in the model's tool-call format, parsed, schema-checked, stepped,
bridged) scores 1.0 from its saved final state, as it does with its Actions handed straight to
the env; the trajectories carry the per-domain episode counters RL logs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.envs.env import Resources, make_env
from posttrain.envs.stats import episode_metrics
from posttrain.envs.oracle import OracleEngine
from posttrain.envs.rollout import chat_format, rollout
from posttrain.engine.protocol import SamplingParams
from posttrain.tasks.generated import oracle_turns
from posttrain.tasks.registry import make_source_tasks


@pytest.mark.parametrize("domain", ["sql", "document", "cad"])
def test_oracle_through_the_loop_scores_full_marks(domain, tiny_tokenizer):
    levels = [1, 3, 5] if domain == "cad" else [1, 2, 3, 4, 5]
    tasks = make_source_tasks(domain, len(levels), 0, {"level": levels, "split": "test"})
    # the tiny test tokenizer spends ~1 token per character (SmolLM2's ~4): its turns get room
    # (benchmarks/envs.py plays the same oracles within the tasks' own limits on SmolLM2's tokenizer)
    tasks = [replace(t, limits=replace(t.limits, max_new_tokens=4096)) for t in tasks]
    assert sorted(t.metadata["level"] for t in tasks) == levels
    fmt = chat_format(tiny_tokenizer, tasks, "hermes")
    script = {100 * i: oracle_turns(t) for i, t in enumerate(tasks)}
    engine = OracleEngine(tiny_tokenizer, fmt.parser, script)
    params = SamplingParams(max_tokens=4096, temperature=1.0)
    groups = rollout(engine, tiny_tokenizer, tasks, [1] * len(tasks), params, seeds=sorted(script), version=3,
                     parser="hermes", resources=Resources())
    trajs = [g[0] for g in groups]
    for task, traj, turns in zip(tasks, trajs, script.values()):
        assert traj.stop_reason == "done", (task.id, traj.stop_reason, traj.stats)
        assert traj.turns == len(turns), (task.id, traj.turns)
        assert traj.stats.get("tool_calls", 0) == sum(len(t.calls) for t in turns)
        assert not any(k.startswith("tool_errors/") and v for k, v in traj.stats.items()), traj.stats
        score = make_env(task.env, Resources()).score(task, traj.final_state)[0]
        assert score.value == 1.0, (task.id, score.details)
    m = episode_metrics(zip(tasks, trajs))
    assert m[f"episode/{domain}/stop/done"] == 1.0 and m[f"episode/{domain}/tool_calls"] > 1
