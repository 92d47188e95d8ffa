"""`AsyncEngine.sync_weights(..., pause=...)` on the paged engine with requests in flight:
finish -> they end on the old weights (tokens all of the old version, equal to a run without a
sync) and requests made meanwhile run on the new ones; abort -> they are re-queued and equal a
fresh run on the new weights; continue -> one completion holds old-version tokens then new-version
tokens, its prefix is the old run's and the tail's logprobs are the new weights'. Also: a bad
pause mode is one ConfigError line; a failed transfer pauses and swaps nothing."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from posttrain.core.errors import ConfigError, WeightSyncError
from posttrain.engine import SamplingParams
from posttrain.engine.client import AsyncEngine
from posttrain.engine.paged import PagedEngine
from posttrain.engine.weight_sync import InProcessTransport
from tests.unit.engine.engine_checks import same

LONG = 100


def params(i: int, max_tokens: int = LONG) -> SamplingParams:
    return SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=10 + i)


@pytest.fixture(scope="module")
def new_weights(sharp_model):
    gen = torch.Generator().manual_seed(0)
    state = {k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v.clone()
             for k, v in sharp_model.state_dict().items()}
    if "lm_head.weight" in state:  # tied: the paged engine reads the embedding, HF the last key loaded
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def paged(model, weights=None) -> PagedEngine:
    engine = PagedEngine.from_hf_model(model, device="cpu", block_size=4)
    if weights is not None:
        engine.update_weights(weights, version=1)
    return engine


async def sync_mid_run(client, prompts, source, pause, late_prompt=None):
    """Four long requests in flight, then a sync; `late_prompt` is asked for while it waits."""
    short = asyncio.ensure_future(client.generate_tagged(prompts[0], params(0, max_tokens=2)))
    long = [asyncio.ensure_future(client.generate_tagged(p, params(i))) for i, p in enumerate(prompts)]
    await short
    assert not any(t.done() for t in long)  # mid-way through their LONG tokens
    sync = asyncio.ensure_future(client.sync_weights(source, 1, pause=pause))
    late = None
    if late_prompt is not None:
        while not client.suspended:
            await asyncio.sleep(0)
        late = asyncio.ensure_future(client.generate_tagged(late_prompt, params(7)))
    assert await sync == 1
    return await asyncio.gather(*long), (await late if late is not None else None)


def test_finish_lets_in_flight_requests_end_on_the_old_weights(sharp_model, prompts, new_weights):
    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            outs, late = await sync_mid_run(client, prompts, new_weights, "finish", late_prompt=prompts[1])
            return outs, late, client.requeued_turns, client.version

    outs, (late, late_versions), requeued, version = asyncio.run(main())
    assert requeued == 0 and version == 1
    old = paged(sharp_model).generate(prompts, [params(i) for i in range(4)])
    assert all(vs == (0,) * LONG for _, vs in outs)
    assert all(same(c, w) for (c, _), w in zip(outs, old))
    assert late_versions == (1,) * LONG  # held during the drain, run on the new weights
    assert same(late, paged(sharp_model, new_weights).generate([prompts[1]], [params(7)])[0])


def test_abort_requeues_in_flight_requests_onto_the_new_weights(sharp_model, prompts, new_weights):
    transport = InProcessTransport()
    transport.send(new_weights, 1)

    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            outs, _ = await sync_mid_run(client, prompts, transport, "abort")
            return outs, client.requeued_turns

    outs, requeued = asyncio.run(main())
    assert requeued == 4
    fresh = paged(sharp_model, new_weights).generate(prompts, [params(i) for i in range(4)])
    assert all(vs == (1,) * LONG for _, vs in outs)
    assert all(same(c, w) for (c, _), w in zip(outs, fresh))
    old = paged(sharp_model).generate(prompts, [params(i) for i in range(4)])
    assert any(c.token_ids != o.token_ids for (c, _), o in zip(outs, old))  # the weights did change


def tail_logprobs(model, prompt, tokens, temperature=1.0) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt) + list(tokens)])).logits[0].float()
    ref = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return ref.gather(1, torch.tensor(tokens)[:, None]).squeeze(1).tolist()


def test_continue_keeps_tokens_and_goes_on_under_the_new_weights(sharp_model, prompts, new_weights):
    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            outs, _ = await sync_mid_run(client, prompts, new_weights, "continue")
            first = [await client.generate_versioned(p, params(i)) for i, p in enumerate(prompts[:1])]
            return outs, client.requeued_turns, first

    outs, requeued, [(after, after_version)] = asyncio.run(main())
    assert requeued == 0 and after_version == 1
    new_model = copy.deepcopy(sharp_model)
    new_model.load_state_dict(new_weights)
    old = paged(sharp_model).generate(prompts, [params(i) for i in range(4)])
    changed = 0
    for prompt, (c, vs), o in zip(prompts, outs, old):
        k = vs.count(0)
        assert len(vs) == LONG and 0 < k < LONG and vs == (0,) * k + (1,) * (LONG - k)
        assert c.token_ids[:k] == o.token_ids[:k]  # the prefix is the old run's
        assert all(abs(a - b) < 1e-4 for a, b in zip(c.logprobs[:k], o.logprobs[:k]))
        want = tail_logprobs(new_model, prompt, c.token_ids)[k:]  # the tail was sampled by the new weights
        assert max(abs(a - b) for a, b in zip(c.logprobs[k:], want)) < 1e-3
        changed += c.token_ids[k:] != o.token_ids[k:]
    assert changed > 0


def test_a_bad_pause_mode_and_a_failed_transfer_leave_the_engine_serving(sharp_model, prompts):
    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            with pytest.raises(ConfigError, match="cluster.weight_sync.pause"):
                await client.sync_weights({}, 1, pause="later")
            running = asyncio.ensure_future(client.generate_tagged(prompts[1], params(1)))
            with pytest.raises(WeightSyncError, match="v3: not sent"):
                await client.sync_weights(InProcessTransport(), 3, pause="abort")
            assert not client.suspended
            return await running, client.version, client.requeued_turns

    (c, versions), version, requeued = asyncio.run(main())
    assert version == 0 and requeued == 0 and versions == (0,) * LONG
    assert same(c, paged(sharp_model).generate([prompts[1]], [params(1)])[0])


def test_runner_drain_then_a_plain_suspend_aborts_what_is_left(sharp_model, prompts):
    from posttrain.engine.runner import EngineRunner

    runner = EngineRunner(paged(sharp_model))
    events: dict[int, list] = {i: [] for i in range(3)}
    try:
        runner.submit_many([(p, params(i, 10**3 if i else 3), events[i].append) for i, p in enumerate(prompts[:3])])
        while not events[0] or not events[0][-1].finished:
            runner.call(lambda e: None).result(timeout=30)  # a step at a time until request 0 is done
        drain = runner.suspend(drain=True)
        held = runner.submit(prompts[3], params(3, 4), events.setdefault(3, []).append)
        abort = runner.suspend()  # requests 1 and 2 would take 1000 tokens: stop them
        aborted = abort.result(timeout=30)
        assert drain.result(timeout=30) == [] and sorted(r.prompt == prompts[1] for r in aborted) == [False, True]
        assert events[3] == []  # held while suspended
        runner.resume()
        runner.call(lambda e: None).result(timeout=30)
        while not events[3] or not events[3][-1].finished:
            runner.call(lambda e: None).result(timeout=30)
        assert sum(len(ev.token_ids) for ev in events[3]) == 4 and held.engine_id is not None
    finally:
        runner.close()
