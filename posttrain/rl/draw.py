"""Which domains and tasks the next work items come from: weights x expected signal, quotas, breakers.

    weights = domain_weights(domains, base, rates, k, value_cfg, allowed)    # {domain: effective weight}
    picks = draw_domains(n, weights, quotas, taken, rng)                      # [domain, ...] (n or fewer)
    tasks = steer(source, m, rates, k, value_cfg, rng)                        # m tasks from one source

A domain's effective weight is its configured weight x (floor + (1 - floor) x value), value =
expected_signal(p, k) scaled to [0, 1] (stats.py) at its pass-rate estimate p: a domain the policy
always or never solves gets `floor` of its weight (it is still explored: its estimate can move), one
near p = 0.5 all of it. Quotas cap a domain's groups in one step; a domain whose breaker is open gets
none. Within a domain whose tasks recur (a JSONL or registered list), a task whose own estimate is
settled (seen >= k times, all passing or all failing) is skipped with probability 1 - its value (at
most `m` extra candidates are looked at): the draw leans toward tasks that still teach.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

from posttrain.config.sched import ValueConfig
from posttrain.core.errors import ConfigError
from posttrain.rl.stats import PassRates, signal_value
from posttrain.core.types import Task


def domain_weights(domains: Sequence[str], base: Mapping[str, float], rates: PassRates, k: int,
                   value: ValueConfig, allowed: Mapping[str, bool]) -> dict[str, float]:
    out = {}
    for d in domains:
        w = base[d]
        if w <= 0 or not allowed.get(d, True):
            continue
        if value.enabled:
            w *= value.floor + (1 - value.floor) * signal_value(rates.domain(d), k)
        out[d] = w
    return out


def draw_domains(n: int, weights: Mapping[str, float], quotas: Mapping[str, int | None], taken: Mapping[str, int],
                 rng: random.Random) -> list[str]:
    """n domains drawn by weight, each at most its quota (counting `taken`, the step's items so far);
    fewer when the quotas run out."""
    left = {d: (None if quotas.get(d) is None else quotas[d] - taken.get(d, 0)) for d in weights}
    names = sorted(d for d in weights if weights[d] > 0 and (left[d] is None or left[d] > 0))
    picks: list[str] = []
    while len(picks) < n and names:
        d = rng.choices(names, weights=[weights[x] for x in names], k=1)[0]
        picks.append(d)
        if left[d] is not None:
            left[d] -= 1
            if left[d] <= 0:
                names.remove(d)
    return picks


def steer(source, m: int, rates: PassRates, k: int, value: ValueConfig, rng: random.Random) -> list[Task]:
    """m tasks from `source`, settled ones skipped with probability 1 - their value (<= m extra looked at)."""
    if m <= 0:
        return []
    out: list[Task] = []
    extra = m
    while len(out) < m:
        candidates = source.take(m - len(out))
        if not candidates:
            raise ConfigError(f"domain {source.domain!r}: its source gave no tasks")
        for task in candidates:
            seen = rates.task(task.id) if value.enabled else None
            settled = seen is not None and seen[1] >= k and seen[0] in (0.0, 1.0)
            if settled and extra > 0 and rng.random() >= max(value.floor, signal_value(seen[0], k)):
                extra -= 1
                continue
            out.append(task)
    return out
