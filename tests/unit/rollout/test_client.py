"""The in-process async engine client: the requests of one event-loop tick reach the engine
together (a rollout's first batch does not depend on thread timing); cancelling aborts."""

from __future__ import annotations

import asyncio
import time

from posttrain.engine.client import AsyncEngine
from posttrain.engine.protocol import SamplingParams, StepOutput


class SlowStepping:
    """A stepping engine whose add_request is slow (as a real one's prompt checks are): without a
    batched hand-over the runner would step with only the first few requests."""

    version = 0

    def __init__(self):
        self.queued, self.first_step_size, self.live = [], None, {}

    def add_request(self, prompt, params):
        time.sleep(0.002)
        rid = len(self.queued)
        self.queued.append(rid)
        self.live[rid] = params.max_tokens
        return rid

    def abort(self, rid):
        self.live.pop(rid, None)

    def has_unfinished(self):
        return bool(self.live)

    def step(self):
        if self.first_step_size is None:
            self.first_step_size = len(self.live)
        out = []
        for rid in list(self.live):
            self.live[rid] -= 1
            done = self.live[rid] == 0
            if done:
                del self.live[rid]
            out.append(StepOutput(rid, [rid % 7], [-0.1], done, "length" if done else None))
        return out

    def generate(self, prompts, params):
        raise NotImplementedError

    def update_weights(self, state_dict, version):
        pass


def test_requests_of_one_tick_share_the_first_step():
    engine = SlowStepping()

    async def one(client, i):
        busy = time.perf_counter() + 0.002  # building a prompt takes the loop a while: the engine
        while time.perf_counter() < busy:   # thread gets the GIL between two episodes' requests
            pass
        return await client.generate([1, 2, i], SamplingParams(max_tokens=3))

    async def main():
        async with AsyncEngine(engine) as client:
            return await asyncio.gather(*(one(client, i) for i in range(40)))

    outs = asyncio.run(main())
    assert engine.first_step_size == 40
    assert [len(c.token_ids) for c in outs] == [3] * 40 and outs[5].token_ids == (5, 5, 5)


def test_a_cancelled_request_is_aborted():
    engine = SlowStepping()

    async def main():
        async with AsyncEngine(engine) as client:
            task = asyncio.ensure_future(client.generate([1], SamplingParams(max_tokens=10**9)))
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.sleep(0.2)
            return client.runner.call(lambda e: e.has_unfinished()).result(timeout=5)

    assert asyncio.run(main()) is False
