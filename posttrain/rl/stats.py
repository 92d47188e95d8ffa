"""What the scheduler learns from finished groups: pass rates (training value) and costs (lanes).

    rates = PassRates(prior=0.5, decay=0.7, task_memory=4096)
    rates.observe_group("chain_sum", "chain_sum/17", passes=3, trials=8)
    rates.end_step()                      # folds the step's per-domain rates into the estimates
    rates.domain("chain_sum")             # the decayed estimate (prior before any observation)
    value = expected_signal(p, k)         # 1 - p^k - (1-p)^k: the chance a group of k has mixed outcomes

    costs = Costs(decay=0.7)
    costs.observe("sql", tokens=900, turns=6, env_seconds=0.4, seconds=3.1)
    costs.predict("sql")                  # (tokens, turns, env_seconds, seconds) per episode, or None

A GRPO group whose samples all pass or all fail has zero advantage everywhere: it costs its
rollout and teaches nothing. With pass probability p per sample, a group of k has mixed outcomes
with probability 1 - p^k - (1-p)^k, largest at p = 0.5; that is the value the draws weight by
(rl/draw.py). Both tables are JSON-able and go into checkpoints.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def expected_signal(p: float, k: int) -> float:
    """The probability that k independent samples passing with probability p do not all agree."""
    p = min(1.0, max(0.0, p))
    return 1.0 - p**k - (1.0 - p) ** k


def signal_value(p: float, k: int) -> float:
    """expected_signal scaled to [0, 1] by its maximum (at p = 0.5)."""
    top = expected_signal(0.5, k)
    return expected_signal(p, k) / top if top > 0 else 0.0


class PassRates:
    """Per-domain decayed pass-rate estimates and per-task counts (the most recent `task_memory` tasks)."""

    def __init__(self, prior: float = 0.5, decay: float = 0.7, task_memory: int = 4096):
        self.prior, self.decay, self.task_memory = prior, decay, task_memory
        self.domains: dict[str, float] = {}
        self.tasks: OrderedDict[str, list[int]] = OrderedDict()  # task id -> [passes, trials]
        self._step: dict[str, list[int]] = {}  # this step's [passes, trials] per domain

    def observe_group(self, domain: str, task_id: str, passes: int, trials: int) -> None:
        if trials <= 0:
            return
        acc = self._step.setdefault(domain, [0, 0])
        acc[0] += passes
        acc[1] += trials
        if self.task_memory:
            counts = self.tasks.pop(task_id, [0, 0])
            self.tasks[task_id] = [counts[0] + passes, counts[1] + trials]
            while len(self.tasks) > self.task_memory:
                self.tasks.popitem(last=False)

    def end_step(self) -> dict[str, float]:
        """Fold the step's rates into the domain estimates; returns the step's raw rate per domain."""
        rates = {d: p / n for d, (p, n) in self._step.items() if n}
        for d, r in rates.items():
            old = self.domains.get(d)
            self.domains[d] = r if old is None else self.decay * old + (1 - self.decay) * r
        self._step = {}
        return rates

    def domain(self, name: str) -> float:
        return self.domains.get(name, self.prior)

    def task(self, task_id: str) -> tuple[float, int] | None:
        """(pass rate, trials) of a task seen before, else None."""
        counts = self.tasks.get(task_id)
        return (counts[0] / counts[1], counts[1]) if counts and counts[1] else None

    def state_dict(self) -> dict[str, Any]:
        return {"domains": dict(self.domains), "tasks": [[k, *v] for k, v in self.tasks.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.domains = {k: float(v) for k, v in state["domains"].items()}
        self.tasks = OrderedDict((k, [int(p), int(n)]) for k, p, n in state["tasks"])
        self._step = {}


class Costs:
    """Per-domain decayed means of what one episode costs: tokens (sampled + env text), turns,
    environment seconds and wall seconds. What the lanes predict from."""

    FIELDS = ("tokens", "turns", "env_seconds", "seconds")

    def __init__(self, decay: float = 0.7):
        self.decay = decay
        self.means: dict[str, list[float]] = {}

    def observe(self, domain: str, *, tokens: float, turns: float, env_seconds: float, seconds: float) -> None:
        new = [float(tokens), float(turns), float(env_seconds), float(seconds)]
        old = self.means.get(domain)
        self.means[domain] = new if old is None else [self.decay * o + (1 - self.decay) * n for o, n in zip(old, new)]

    def predict(self, domain: str) -> dict[str, float] | None:
        m = self.means.get(domain)
        return dict(zip(self.FIELDS, m)) if m is not None else None

    def state_dict(self) -> dict[str, Any]:
        return {d: list(m) for d, m in self.means.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.means = {d: [float(x) for x in m] for d, m in state.items()}
