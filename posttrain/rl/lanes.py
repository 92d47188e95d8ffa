"""Lanes: short work never waits behind long episodes, and long episodes always have slots.

    gate = LaneGate(capacity=256, long_share=0.25)
    async with gate.slot("fast"):  ...   # one episode's slot
    lane = classify(costs.predict(domain), lanes_cfg)          # "fast" | "long" (unknown: "fast")
    gate.occupancy()                                            # time-averaged share of long slots in use

`capacity` episodes run at once (what the engine and the sandbox pool can take: backpressure).
`long_share` of them are fixed slots only long episodes use, so they always progress however much
short work is queued; the rest are shared. Fast episodes take shared slots only; a long episode
takes a fixed slot when one is free, else a shared one, but only while no fast episode is waiting
(fast work is never queued behind long work it could have preceded). Priorities follow: the
engine admits a fast episode's turns first (PRIORITY["fast"]), then long ones in fixed slots, then
long ones borrowing shared slots (the first the paged engine preempts when it runs out of blocks).
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager

from posttrain.config.sched import LaneConfig

PRIORITY = {"fast": 2, "long": 1, "borrowed": 0}


def classify(predicted: dict[str, float] | None, cfg: LaneConfig) -> str:
    """A domain's lane from its cost history: fast when its episodes are short in tokens and env time."""
    if predicted is None:
        return "fast"
    if predicted["tokens"] <= cfg.fast_tokens and predicted["env_seconds"] <= cfg.fast_env_seconds:
        return "fast"
    return "long"


class LaneGate:
    def __init__(self, capacity: int, long_share: float):
        self.capacity = max(1, capacity)
        self.fixed = min(self.capacity - 1, math.ceil(long_share * self.capacity)) if long_share > 0 else 0
        self.shared = self.capacity - self.fixed
        self.used_fixed = 0
        self.used_shared = 0
        self.fast_waiting = 0
        self._cond: asyncio.Condition | None = None
        self._area = 0.0  # integral of used_fixed over time
        self._mark = time.perf_counter()
        self._since = self._mark

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def _tick(self) -> None:
        now = time.perf_counter()
        self._area += self.used_fixed * (now - self._mark)
        self._mark = now

    def occupancy(self, reset: bool = True) -> float:
        """Time-averaged share of the fixed (long) slots in use since the last reset."""
        self._tick()
        span = self._mark - self._since
        share = self._area / (span * self.fixed) if span > 0 and self.fixed else 0.0
        if reset:
            self._area, self._since = 0.0, self._mark
        return share

    @asynccontextmanager
    async def slot(self, lane: str):
        """Hold one episode slot; yields the priority its engine requests get."""
        cond = self._condition()
        async with cond:
            if lane == "fast":
                self.fast_waiting += 1
                try:
                    await cond.wait_for(lambda: self.used_shared < self.shared)
                finally:
                    self.fast_waiting -= 1
                    if not self.fast_waiting:  # longs held back only by waiting fast work re-check now
                        cond.notify_all()
                kind = "shared"
            else:
                await cond.wait_for(lambda: self.used_fixed < self.fixed
                                    or (self.used_shared < self.shared and not self.fast_waiting))
                kind = "fixed" if self.used_fixed < self.fixed else "shared"
            self._tick()
            if kind == "fixed":
                self.used_fixed += 1
            else:
                self.used_shared += 1
        priority = PRIORITY["fast"] if lane == "fast" else PRIORITY["long" if kind == "fixed" else "borrowed"]
        try:
            yield priority
        finally:
            async with cond:
                self._tick()
                if kind == "fixed":
                    self.used_fixed -= 1
                else:
                    self.used_shared -= 1
                cond.notify_all()
