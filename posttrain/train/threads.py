"""Torch's intra-op thread count, chosen by measured step time (base pretraining, RL).

    tuner = ThreadTuner()
    threads = tuner.start(step); ...one step...; tuner.record(step, threads, seconds)

A different thread count changes float reduction order, so runs that switch are not
bit-identical to runs that do not (exact-resume tests pin one thread).
"""

from __future__ import annotations

import torch


class ThreadTuner:
    """Picks torch's thread count by measured step time: on a shared machine two threads can run
    3-4x slower than one (each parallel region waits for a descheduled thread). Every `every`
    steps it runs `trial` steps with the other count and keeps whichever was faster."""

    def __init__(self, every: int = 50, trial: int = 3):
        self.initial = torch.get_num_threads()
        self.options = sorted({self.initial, 1})
        self.current, self.every, self.trial = self.initial, every, trial
        self.times: dict[int, list[float]] = {n: [] for n in self.options}

    def _other(self) -> int:
        return next(n for n in self.options if n != self.current)

    def _phase(self, step: int) -> int:  # trials run at steps 3.., every+3.., ... (after a first few timed steps)
        return (step - 3) % self.every if step >= 3 else -1

    def start(self, step: int) -> int:
        trying = len(self.options) > 1 and 0 <= self._phase(step) < self.trial
        n = self._other() if trying else self.current
        torch.set_num_threads(n)
        return n

    def record(self, step: int, threads: int, seconds: float) -> None:
        if step > 0:  # the first step pays one-off costs
            self.times[threads] = (self.times[threads] + [seconds])[-self.trial :]
        if len(self.options) > 1 and self._phase(step) == self.trial - 1:
            mean = {n: sum(t) / len(t) for n, t in self.times.items() if t}
            other = self._other()
            if other in mean and self.current in mean and mean[other] < 0.9 * mean[self.current]:
                self.current = other

    def restore(self) -> None:
        torch.set_num_threads(self.initial)
