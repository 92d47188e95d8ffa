"""scheduler/lanes.py: classify's thresholds, and LaneGate on a real event loop (capacity 4, long_share 0.5:
2 fixed + 2 shared slots): fast work never takes fixed slots, long work takes fixed ones first and borrows
shared ones only while no fast episode waits, the priorities each slot yields, release on errors, and the
time-averaged fixed-slot occupancy."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.config.sched import LaneConfig
from posttrain.rl.lanes import PRIORITY, LaneGate, classify


def run(coro, limit: float = 2.0):
    return asyncio.run(asyncio.wait_for(coro, limit))


async def settle(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


class Holder:
    """An episode holding a slot of `lane` until released; records when it got in and its priority."""

    def __init__(self, gate: LaneGate, lane: str, log: list):
        self.gate, self.lane, self.log = gate, lane, log
        self.release = asyncio.Event()
        self.priority: int | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self):
        async with self.gate.slot(self.lane) as priority:
            self.priority = priority
            self.log.append(self)
            await self.release.wait()

    @property
    def admitted(self) -> bool:
        return self.priority is not None

    async def done(self):
        self.release.set()
        await self.task


# ---------------------------------------------------------------- classify


def test_classify_thresholds():
    cfg = LaneConfig(fast_tokens=512, fast_env_seconds=2.0)
    assert classify(None, cfg) == "fast"  # no history yet
    base = {"tokens": 512.0, "turns": 1.0, "env_seconds": 2.0, "seconds": 30.0}
    assert classify(base, cfg) == "fast"  # at the thresholds; wall seconds and turns do not matter
    assert classify({**base, "tokens": 513.0}, cfg) == "long"
    assert classify({**base, "env_seconds": 2.01}, cfg) == "long"
    assert classify({**base, "tokens": 10.0, "env_seconds": 0.0, "turns": 40.0}, cfg) == "fast"


def test_slot_split():
    assert (LaneGate(4, 0.5).fixed, LaneGate(4, 0.5).shared) == (2, 2)
    assert LaneGate(256, 0.25).fixed == 64
    assert LaneGate(4, 0.1).fixed == 1  # rounded up
    assert LaneGate(4, 0.0).fixed == 0
    assert LaneGate(1, 0.5).fixed == 0  # always one shared slot for fast work
    assert LaneGate(0, 0.5).capacity == 1


# ---------------------------------------------------------------- the gate


def test_fast_episodes_never_take_fixed_slots():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        fast = [Holder(gate, "fast", log) for _ in range(4)]
        await settle()
        assert [h.admitted for h in fast] == [True, True, False, False]
        assert (gate.used_shared, gate.used_fixed, gate.fast_waiting) == (2, 0, 2)
        assert {h.priority for h in fast[:2]} == {PRIORITY["fast"]} == {2}
        await fast[0].done()
        await settle()
        assert fast[2].admitted and not fast[3].admitted and gate.used_fixed == 0
        await fast[1].done()
        await settle()
        assert fast[3].admitted and gate.used_fixed == 0
        for h in fast[2:]:
            await h.done()
        assert (gate.used_shared, gate.used_fixed, gate.fast_waiting) == (0, 0, 0)

    run(main())


def test_long_takes_fixed_first_then_borrows_shared():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        longs = [Holder(gate, "long", log) for _ in range(5)]
        await settle()
        assert [h.priority for h in longs] == [1, 1, 0, 0, None]  # 2 fixed, 2 borrowed, 1 waits
        assert (gate.used_fixed, gate.used_shared) == (2, 2)
        await longs[0].done()  # a fixed slot frees: the waiting long takes it, at fixed priority
        await settle()
        assert longs[4].priority == PRIORITY["long"] == 1
        assert (gate.used_fixed, gate.used_shared) == (2, 2)
        for h in longs[1:]:
            await h.done()
        assert (gate.used_fixed, gate.used_shared) == (0, 0)

    run(main())


def test_long_borrows_only_while_no_fast_waits():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        fast = [Holder(gate, "fast", log) for _ in range(2)]  # the shared slots
        await settle()
        fixed = [Holder(gate, "long", log) for _ in range(2)]
        await settle()
        assert [h.priority for h in fixed] == [1, 1]
        late_long = Holder(gate, "long", log)  # queued first
        await settle()
        late_fast = Holder(gate, "fast", log)
        await settle()
        assert not late_long.admitted and not late_fast.admitted
        await fast[0].done()  # one shared slot frees
        await settle()
        assert late_fast.admitted and not late_long.admitted
        await late_fast.done()  # no fast waits now: the long may borrow
        await settle()
        assert late_long.priority == PRIORITY["borrowed"] == 0
        for h in [fast[1], *fixed, late_long]:
            await h.done()

    run(main())


def test_fast_queued_behind_borrowing_longs_goes_before_further_longs():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        longs = [Holder(gate, "long", log) for _ in range(4)]  # 2 fixed + 2 borrowed: every slot
        await settle()
        assert [h.priority for h in longs] == [1, 1, 0, 0]
        more_longs = [Holder(gate, "long", log) for _ in range(2)]  # queued before the fast one
        await settle()
        fast = Holder(gate, "fast", log)
        await settle()
        assert not fast.admitted and gate.fast_waiting == 1
        await longs[2].done()  # a borrowed (shared) slot frees
        await settle()
        assert fast.admitted and fast.priority == 2
        assert not any(h.admitted for h in more_longs)
        assert log.index(fast) == 4  # admitted right after the first four, before any further long
        await longs[3].done()  # the other borrowed slot: now a long may borrow it
        await settle()
        assert sum(h.admitted for h in more_longs) == 1
        for h in [fast, longs[0], longs[1]]:
            await h.done()
        await settle()
        assert all(h.admitted for h in more_longs)
        for h in more_longs:
            await h.done()
        assert (gate.used_fixed, gate.used_shared, gate.fast_waiting) == (0, 0, 0)

    run(main())


def test_long_held_back_by_a_fast_waiter_gets_a_slot_freed_at_the_same_time():
    # two shared slots free at once; the long queued first re-checks while the fast one still waits, so
    # it must be woken again once the fast episode is in (else it idles beside a free slot until some
    # later release)
    async def main():
        gate, log = LaneGate(4, 0.5), []
        longs = [Holder(gate, "long", log) for _ in range(4)]
        await settle()
        late_long = Holder(gate, "long", log)
        await settle()
        fast = Holder(gate, "fast", log)
        await settle()
        longs[2].release.set()
        longs[3].release.set()
        await settle(50)
        assert fast.admitted and fast.priority == 2
        assert late_long.admitted and late_long.priority == 0
        assert gate.used_shared == 2
        for h in [*longs, fast, late_long]:
            await h.done()

    run(main())


def test_cancelled_fast_waiter_lets_a_long_borrow():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        longs = [Holder(gate, "long", log) for _ in range(4)]
        await settle()
        late_long = Holder(gate, "long", log)
        fast = Holder(gate, "fast", log)
        await settle()
        longs[3].release.set()  # a shared slot frees: the waiting fast episode is notified first...
        while gate.used_shared == 2:
            await asyncio.sleep(0)
        assert not fast.admitted
        fast.task.cancel()  # ...but is cancelled before it runs (a step closing early)
        await settle(50)
        assert not fast.admitted and gate.fast_waiting == 0
        assert late_long.admitted and late_long.priority == 0
        for h in [*longs[:3], late_long]:
            await h.done()

    run(main())


def test_slot_is_released_when_the_episode_raises():
    async def main():
        gate = LaneGate(2, 0.5)  # 1 fixed, 1 shared
        with pytest.raises(RuntimeError, match="boom"):
            async with gate.slot("long") as priority:
                assert priority == 1 and gate.used_fixed == 1
                raise RuntimeError("boom")
        assert gate.used_fixed == 0
        async with gate.slot("long") as priority:
            assert priority == 1  # the fixed slot is free again
        with pytest.raises(asyncio.CancelledError):
            async with gate.slot("fast"):
                raise asyncio.CancelledError
        assert gate.used_shared == 0

    run(main())


# ---------------------------------------------------------------- occupancy


def test_occupancy_is_the_time_averaged_fixed_slot_share():
    async def main():
        gate, log = LaneGate(4, 0.5), []
        gate.occupancy()  # reset the window
        fast = [Holder(gate, "fast", log) for _ in range(2)]  # shared slots do not count
        one = Holder(gate, "long", log)
        await asyncio.sleep(0.3)
        assert one.priority == 1
        assert gate.occupancy(reset=False) == pytest.approx(0.5, abs=0.06)  # 1 of 2 fixed, ~the whole window
        assert gate.occupancy() == pytest.approx(0.5, abs=0.06)  # not reset by the call before
        two = Holder(gate, "long", log)  # second fixed slot for the second half
        await asyncio.sleep(0.15)
        await one.done()
        await asyncio.sleep(0.15)
        # both fixed slots for the first 0.15 s, one for the next: (2 x 0.15 + 1 x 0.15) / (2 x 0.3) = 0.75
        assert gate.occupancy() == pytest.approx(0.75, abs=0.08)
        await two.done()
        for h in fast:
            await h.done()
        await asyncio.sleep(0.1)
        assert gate.occupancy() == pytest.approx(0.0, abs=0.02)  # nothing held in this window
        assert LaneGate(4, 0.0).occupancy() == 0.0  # no fixed slots: 0, not a division by zero

    run(main())
