"""What the episode-SFT tests share: RL's rollout of the same oracles, and the masked runs of a record."""

from __future__ import annotations

import itertools

from posttrain.engine.protocol import SamplingParams
from posttrain.envs.oracle import OracleEngine
from posttrain.envs.rollout import chat_format, rollout
from posttrain.tasks.episode_sft import episode_oracle


def spans(ids, mask):
    """(masked, [ids]) runs of the sequence, in order."""
    return [(k, [i for i, _ in g]) for k, g in itertools.groupby(zip(ids, mask), key=lambda x: x[1])]


def oracle_rollout(tokenizer, name, tasks):
    """RL's rollout of `name`'s oracles for `tasks`, on its own (other episode seeds, as benchmarks/envs.py
    runs it): (the oracle turns per episode, one group of one trajectory per task, the end-of-turn id, the parser
    that wrote the turns)."""
    fmt = chat_format(tokenizer, tasks, "hermes")
    oracle = episode_oracle(name, "test")
    script = {100 * (i + 1): oracle(t) for i, t in enumerate(tasks)}
    engine = OracleEngine(tokenizer, fmt.parser, script)
    groups = rollout(engine, tokenizer, tasks, [1] * len(tasks), SamplingParams(max_tokens=1 << 20),
                     seeds=sorted(script), version=0, parser="hermes")
    return list(script.values()), groups, tokenizer.convert_tokens_to_ids("<|im_end|>"), fmt.parser
