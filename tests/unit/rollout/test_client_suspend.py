"""`AsyncEngine.suspend()` / `resume()` around a weight update while generate() calls stay alive:
requests in flight in the paged engine are aborted and resubmitted after resume (full completions
under the new weights, counted in `requeued_turns`); a plain engine's batch in progress finishes
first; requests made while suspended wait; a cancelled call still aborts; busy and wall seconds."""

from __future__ import annotations

import asyncio
import copy
import threading
import time

import pytest
import torch

from posttrain.engine import HFEngine, SamplingParams
from posttrain.engine.client import AsyncEngine
from posttrain.engine.paged import PagedEngine
from tests.unit.engine.engine_checks import same

LONG = 40


def perturbed(model) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v.clone()
            for k, v in model.state_dict().items()}


def params(i: int, max_tokens: int = LONG) -> SamplingParams:
    return SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=10 + i)


@pytest.fixture(scope="module")
def new_weights(sharp_model):
    return perturbed(sharp_model)


def paged(model) -> PagedEngine:
    return PagedEngine.from_hf_model(model, device="cpu", block_size=4)


def test_paged_requests_in_flight_are_requeued_under_the_new_weights(sharp_model, prompts, new_weights):
    reference = paged(sharp_model)
    reference.update_weights(new_weights, version=1)
    old = paged(sharp_model)

    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            short = asyncio.ensure_future(client.generate_versioned(prompts[0], params(0, max_tokens=2)))
            long = [asyncio.ensure_future(client.generate_versioned(p, params(i))) for i, p in enumerate(prompts)]
            await short  # the long ones are mid-way: 2 of their 40 tokens or a few more
            await client.suspend()
            assert client.suspended and not client.engine.has_unfinished()
            late = asyncio.ensure_future(client.generate_versioned(prompts[1], params(7)))
            busy, wall = client.busy_seconds, client.wall_seconds()
            await asyncio.sleep(0.2)
            assert client.busy_seconds == busy and not any(t.done() for t in long + [late])  # nothing runs
            assert client.wall_seconds() - wall >= 0.2
            client.engine.update_weights(new_weights, version=1)  # from the loop's thread: the engine is idle
            client.resume()
            outs = await asyncio.gather(*long, late)
            assert 0 < client.busy_seconds - busy <= client.wall_seconds() - wall
            return (await short), outs, client.requeued_turns, client.requests

    (short, short_version), outs, requeued, requests = asyncio.run(main())
    assert requeued == 4 and requests == 6 and short_version == 0
    assert same(short, old.generate([prompts[0]], [params(0, 2)])[0])
    want = reference.generate(prompts + [prompts[1]], [params(i) for i in range(4)] + [params(7)])
    assert all(v == 1 and len(c.token_ids) == LONG for c, v in outs)
    assert all(same(c, w) for (c, _), w in zip(outs, want))
    before = old.generate(prompts, [params(i) for i in range(4)])
    assert any(c.token_ids != b.token_ids for (c, _), b in zip(outs, before))  # the weights did change


def test_cancelled_while_suspended_and_a_second_suspend(sharp_model, prompts):
    async def main():
        async with AsyncEngine(paged(sharp_model)) as client:
            tasks = [asyncio.ensure_future(client.generate(p, params(i, 10**4))) for i, p in enumerate(prompts[:2])]
            keep = asyncio.ensure_future(client.generate(prompts[2], params(2, 150)))
            await asyncio.sleep(0.05)  # the three run (150 tokens take the engine a second or so)
            await asyncio.gather(client.suspend(), client.suspend())  # one suspension
            await asyncio.sleep(0.01)  # the three are resubmitted: held by the runner
            for t in tasks:
                t.cancel()
            await asyncio.sleep(0.05)
            client.resume()
            client.resume()  # a no-op
            done = await keep
            await asyncio.sleep(0.1)
            idle = client.runner.call(lambda e: e.has_unfinished()).result(timeout=5)
            return done, [t.cancelled() for t in tasks], idle, client.requeued_turns

    done, cancelled, unfinished, requeued = asyncio.run(main())
    assert cancelled == [True, True] and unfinished is False
    assert requeued == 3
    assert same(done, paged(sharp_model).generate([prompts[2]], [params(2, 150)])[0])


class WatchedHF(HFEngine):
    """An HFEngine that says when a batch starts (the test suspends while one is computing)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = threading.Event()
        self.batches: list[int] = []

    def generate(self, prompts, params):
        self.batches.append(len(prompts))
        self.started.set()
        time.sleep(0.1)  # a batch that takes a while: suspend() lands in the middle of it
        return super().generate(prompts, params)


def test_a_plain_engine_finishes_its_batch_then_waits(sharp_model, prompts, tiny_tokenizer, new_weights):
    def hf():
        return WatchedHF(copy.deepcopy(sharp_model), pad_token_id=tiny_tokenizer.pad_token_id)

    eng = hf()

    async def main():
        async with AsyncEngine(eng) as client:
            first = [asyncio.ensure_future(client.generate_versioned(p, params(i, 12))) for i, p in enumerate(prompts)]
            await asyncio.get_running_loop().run_in_executor(None, eng.started.wait)
            queued = asyncio.ensure_future(client.generate_versioned(prompts[3], params(5, 12)))
            await asyncio.sleep(0.01)  # reaches the runner while the first batch computes
            await client.suspend()  # returns after that batch
            assert eng.batches == [4] and not queued.done()
            await asyncio.sleep(0.2)
            assert eng.batches == [4] and not queued.done()  # held, not run
            eng.update_weights(new_weights, version=1)
            client.resume()
            return await asyncio.gather(*first), await queued, client.requeued_turns

    first, (late, late_version), requeued = asyncio.run(main())
    assert requeued == 0 and eng.batches == [4, 1]
    assert all(v == 0 for _, v in first) and late_version == 1
    old = hf().generate(prompts, [params(i, 12) for i in range(4)])
    assert all(same(c, w) for (c, _), w in zip(first, old))
    new = hf()
    new.update_weights(new_weights, version=1)
    assert same(late, new.generate([prompts[3]], [params(5, 12)])[0])
    assert late.token_ids != hf().generate([prompts[3]], [params(5, 12)])[0].token_ids
