"""Named phase timers: `with timer("rollout"):` adds the block's wall seconds to `time/rollout`.

    timer = PhaseTimer()
    with timer("rollout"):
        ...
    timer.metrics()   # {"time/rollout": 1.23, ...}; a phase entered twice adds up
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class PhaseTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - started)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def metrics(self) -> dict[str, float]:
        return {f"time/{phase}": s for phase, s in self.seconds.items()}
