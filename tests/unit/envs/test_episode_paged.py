"""Multi-turn episodes on the real paged engine: later turns reuse the earlier turns' KV blocks
(prefill only the new tokens) and sample the same tokens as without the prefix cache."""

from __future__ import annotations

from posttrain.envs.rollout import rollout
from posttrain.engine.protocol import SamplingParams
from posttrain.engine.paged.factory import make_engine
from posttrain.core.types import Limits, Task


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"chat/{i}", domain="chat", prompt=({"role": "user", "content": f"Calculate {i} + {2 * i}."},),
                 reference=None, env="test_chat", limits=Limits(max_turns=3, max_new_tokens=12)) for i in range(n)]


def test_later_turns_prefill_only_their_new_tokens(tiny_model_dir, tiny_tokenizer):
    import tests.unit.envs.scripted  # noqa: F401  (registers test_chat)

    # the random tiny model rarely samples <|im_end|>: a turn also ends at any of a quarter of the vocabulary
    params = SamplingParams(temperature=1.0, max_tokens=12, stop_token_ids=tuple(range(3, 400, 4)))
    tasks = _tasks(4)
    runs = {}
    for sharing in (True, False):
        engine = make_engine(tiny_model_dir, tiny_tokenizer, speculative=None, prefix_sharing=sharing, block_size=4)
        trajs = rollout(engine, tiny_tokenizer, tasks, [2] * 4, params, [100 * i for i in range(4)], 0)
        runs[sharing] = ([t for g in trajs for t in g], engine.kv_stats())
    (cached, kv), (plain, kv_off) = runs[True], runs[False]
    assert all(t.turns == 3 and t.stop_reason == "done" for t in cached)
    assert [t.token_ids for t in cached] == [t.token_ids for t in plain]  # exact with or without reuse
    # cached K/V were computed in other chunks than a full recompute: equal up to float rounding
    assert max(abs(a - b) for x, y in zip(cached, plain) for a, b in zip(x.logprobs, y.logprobs)) < 1e-4
    assert kv_off["prefill_tokens_saved"] == 0 and kv["prompt_tokens"] == kv_off["prompt_tokens"]
    # a turn's prompt is the previous turn's prompt + its sampled tokens + a bridge: every full
    # 4-token block of the previous turn's computed context is found cached, so at most the bridge
    # and one block per later turn (its partial last block, the never-fed last sampled token) is new
    first = sum(t.prompt_len for t in cached)
    later = kv["prompt_tokens"] - first
    bridges = sum(1 for t in cached for i, m in enumerate(t.loss_mask) if i >= t.prompt_len and not m)
    later_turns = sum(t.turns - 1 for t in cached)
    assert later > 0 and later - bridges - 4 * later_turns <= kv["prefill_tokens_saved"] <= later
