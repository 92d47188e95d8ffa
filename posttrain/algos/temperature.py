"""Sampling-temperature schedule over training, piecewise constant within an epoch.

    epoch      = step // steps_per_epoch
    num_epochs = ceil(total_steps / steps_per_epoch)
    progress   = min(1, epoch / max(1, num_epochs - 1))   (0 in the first epoch, 1 in the last)
    "linear":   start + (end - start) * progress
    "cosine":   end + (start - end) * (1 + cos(pi * progress)) / 2
    "constant": start
Steps past total_steps keep the end value.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def temperature_at(
    step: int, *, steps_per_epoch: int, total_steps: int, start: float, end: float, schedule: str
) -> float:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown temperature schedule {schedule!r}; known: {list(SCHEDULES)}")
    if steps_per_epoch <= 0 or total_steps <= 0:
        raise ValueError(f"steps_per_epoch and total_steps must be > 0, got {steps_per_epoch} and {total_steps}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if schedule == "constant":
        return float(start)
    num_epochs = math.ceil(total_steps / steps_per_epoch)
    progress = min(1.0, (step // steps_per_epoch) / max(1, num_epochs - 1))
    if schedule == "linear":
        return start + (end - start) * progress
    return end + (start - end) * (1 + math.cos(math.pi * progress)) / 2
