"""Utilisation metrics of one step's rollout: engine and sandbox busy shares, queue waits, tails.

    util = Utilisation()
    util.begin(client, resources)             # at the step's start
    util.episode(domain, seconds)             # every finished episode
    util.metrics(items, gate)                 # -> {"sched/engine_busy": ..., ...} at the step's end

- `sched/engine_busy`: the share of the step's rollout wall time the engine was computing;
- `sched/sandbox_busy`: environment work (tools, sandboxes, renders run through
  `Resources.run_blocking`) in worker-seconds over wall time x the executor's workers;
- `sched/slot_occupancy`: time-averaged share of the long lane's fixed slots in use;
- `sched/queue_wait_p50|p95/LANE`: seconds from an item's enqueue to its first episode's start;
- `sched/tail_p95/DOMAIN`: p95 of the domain's episode wall times this step.
"""

from __future__ import annotations

import time

# what is measured on the wall clock (like time/*): a rerun or a resumed run does not repeat it
CLOCK_PREFIXES = ("sched/engine_busy", "sched/sandbox_busy", "sched/slot_occupancy", "sched/queue_wait_",
                  "sched/tail_p95/", "build/seconds/")


def quantile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class Utilisation:
    def __init__(self):
        self.verify_seconds = 0.0
        self._episodes: dict[str, list[float]] = {}

    def begin(self, client, resources) -> None:
        self.client, self.resources = client, resources
        self.t0 = time.perf_counter()
        self.busy0 = client.runner.busy_seconds
        self.env0 = resources.busy_seconds
        self.verify_seconds = 0.0
        self._episodes = {}

    def episode(self, domain: str, seconds: float) -> None:
        self._episodes.setdefault(domain, []).append(seconds)

    def rollout_seconds(self) -> float:
        return time.perf_counter() - self.t0

    def metrics(self, items, gate) -> dict[str, float]:
        wall = max(1e-9, self.rollout_seconds())
        out = {"sched/engine_busy": min(1.0, (self.client.runner.busy_seconds - self.busy0) / wall),
               "sched/sandbox_busy": min(1.0, (self.resources.busy_seconds - self.env0) / (wall * self.resources.workers)),
               "sched/slot_occupancy": gate.occupancy()}
        for lane in ("fast", "long"):
            waits = [i.started - i.enqueued for i in items if i.lane == lane and i.started is not None]
            if waits:
                out[f"sched/queue_wait_p50/{lane}"] = quantile(waits, 0.5)
                out[f"sched/queue_wait_p95/{lane}"] = quantile(waits, 0.95)
        for domain, xs in sorted(self._episodes.items()):
            out[f"sched/tail_p95/{domain}"] = quantile(xs, 0.95)
        return out
