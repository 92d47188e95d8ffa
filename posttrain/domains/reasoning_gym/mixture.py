"""reasoning-gym domains in a training mixture: items drawn from a seed up, the eval items' questions
held out (registered as the `reasoning_gym` group's mixture source by this package's __init__)."""

from __future__ import annotations

import logging

import time
from typing import Any

from posttrain.core.errors import ConfigError
from posttrain.core.types import Task
from posttrain.domains.reasoning_gym import source as rg
from posttrain.tasks.mixture import source_state

BLOCK = 64  # reasoning-gym items built at a time
PROBE_BUDGET_S = 2.0  # seconds of items a domain's supply check builds at most (past its first 16)


def supply_probe(domain: str, seed: int, options: dict[str, Any] | None) -> list[str]:
    """Training questions the supply check looks at: 4 blocks, built 16 at a time and stopped past
    PROBE_BUDGET_S seconds (at least 16), so building hundreds of domains takes bounded time whatever
    a domain's items cost (their cost varies by seed and options)."""
    out: list[str] = []
    started = time.perf_counter()
    while len(out) < 4 * BLOCK and (len(out) < 16 or time.perf_counter() - started < PROBE_BUDGET_S):
        out += [t.reference["question"] for t in rg.make_tasks(domain, 16, seed + len(out), config=options)]
    return out


log = logging.getLogger("posttrain")


class GymSource:
    """reasoning-gym items from `task_seed` up at the current options (`train_options`), skipping the
    questions of the first `holdout` eval items under the default options, the configured ones
    (`options`, which eval uses) and the current ones."""

    def __init__(self, domain: str, options: dict[str, Any], task_seed: int, n_eval: int, holdout: int | None = None):
        rg.check_domain(domain)
        auto = holdout is None  # the default size (smaller for slow domains), never below the eval items asked for
        holdout = max(rg.holdout_size(domain), n_eval) if auto else holdout
        if n_eval > holdout:  # training skips only the first `holdout` eval questions
            raise ConfigError(f"domain {domain!r}: eval_tasks={n_eval} exceeds the {holdout} held-out eval items "
                              f"training is kept away from; use eval_tasks <= {holdout}")
        self.domain, self.options, self.task_seed, self.n_eval = domain, dict(options) or None, task_seed, n_eval
        self.cursor = 0  # raw reasoning-gym items consumed
        self.train_options = self.options
        default = holdout
        while True:
            self._use_holdout(holdout)
            try:
                self._held_out = self._held_out_for(self.options)
                break
            except rg.SmallSpaceError:
                # a small question space: the default holdout fits it (never below the eval items scored);
                # a holdout the user set is never overridden
                smaller = max(n_eval, holdout // 4)
                if not auto or smaller >= holdout:
                    raise
                holdout = smaller
        if holdout != default:
            log.warning("domain %r: holdout lowered from %d to %d held-out eval items (its question space is "
                        "small; set `holdout` to choose)", domain, default, holdout)

    def _use_holdout(self, holdout: int) -> None:
        self.holdout = holdout
        self._base = rg.held_out_questions(self.domain, rg._config_key(self.domain, None), holdout)
        self._held_by_key: dict[str, frozenset[str]] = {}  # config key -> questions training skips under it

    def _held_out_for(self, options: dict[str, Any] | None) -> frozenset[str]:
        """Held-out questions under the default, configured and `options` configs (built once per config,
        with a supply check: a config whose question space the holdout uses up is a ConfigError)."""
        key = rg._config_key(self.domain, options)
        if key not in self._held_by_key:
            configured = rg._config_key(self.domain, self.options)
            held = (self._base | rg.held_out_questions(self.domain, configured, self.holdout)
                    | rg.held_out_questions(self.domain, key, self.holdout))
            probe = supply_probe(self.domain, self.task_seed, options)
            # a small probe (a slow domain) asks for half of it distinct: chance repeats are not a small space
            rg.check_supply(self.domain, [q for q in probe if q not in held], len(probe), self.holdout,
                            len(probe) if len(probe) >= 4 * BLOCK else len(probe) // 2)
            self._held_by_key[key] = held
        return self._held_by_key[key]

    def set_options(self, options: dict[str, Any] | None) -> None:
        """Training draws from the next `take` on use dataset config `options` (eval keeps the configured one)."""
        options = dict(options) if options else None
        self._held_out = self._held_out_for(options)
        self.train_options = options

    def take(self, n: int) -> list[Task]:
        out: list[Task] = []
        while len(out) < n:
            start = self.task_seed + self.cursor
            if start + BLOCK > rg.EVAL_SEED_START:
                raise ConfigError(f"domain {self.domain!r}: training items ran into the eval seeds; lower train.task_seed")
            block = rg.make_tasks(self.domain, BLOCK, start, config=self.train_options)
            for task in block:
                self.cursor = start - self.task_seed + int(task.metadata["index"]) + 1  # skipped items included
                if task.reference["question"] not in self._held_out:
                    out.append(task)
                    if len(out) == n:
                        break
        return out

    def eval_tasks(self) -> list[Task]:
        if self.n_eval == 0:
            return []
        return rg.make_tasks(self.domain, self.n_eval, rg.EVAL_SEED_START, config=self.options)

    def state_dict(self) -> dict[str, Any]:
        return source_state(self.cursor, self.train_options, self.options)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_options(state.get("options", self.options))
        self.cursor = int(state["cursor"])
