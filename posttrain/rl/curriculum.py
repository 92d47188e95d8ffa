"""Per-domain curriculum: a difficulty level (1-based) moved by the domain's recent pass rate.

    curr = make_curriculum("basic_arithmetic", d.curriculum, dict(d.options), where="tasks[0].curriculum")
    curr.level, curr.levels             # current level, number of levels the domain has
    source.set_options(curr.options())  # tasks/mixture.py: training draws at the current level
    moved = curr.observe(0.9)           # once per step, the domain's pass rate: the new level when it moved
    curr.state_dict(); curr.load_state_dict(state)   # {"level": int, "window": [float, ...]} (JSON-able)

Kinds (`make_curriculum` picks by domain; anything else with a curriculum is a ConfigError):
- reasoning-gym: the dataset's own curriculum (`reasoning_gym.factory.create_curriculum`). Level L
  puts every moved attribute (`cfg.attributes`, default all) at its level index min(L-1, last); the
  domain has as many levels as its longest moved attribute. The values become dataset options the
  way reasoning-gym's `generate_configuration` makes them (its default context: a range attribute
  spans its first level up to the current one).
- generated domains (tasks/registry.py `is_generated`: sql, document, cad): option {"level": L}, the
  source's `levels` levels.
- terminal (domains/terminal/source.py): option {"level": L}, L = 1 easy, 2 medium, 3 hard.

`options()` is the current level's options merged over the domain's own (`base_options`; the level
wins for what it moves). Every level in [min_level, max_level] is checked here (a reasoning-gym
dataset built with its options, no item generated; one task of a source), so options that do not
work at some level fail at build time, naming `where`, not mid-run; with max_level unset the top
is the last level that builds (`capped_at`: the first that did not).

`observe` keeps the last `window` pass rates; when the window is full and its mean is >= raise_at
the level goes up one (below max_level), <= lower_at down one (above min_level); a move clears the
window, so the next move waits another `window` steps at the new level.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable
from typing import Any, Callable

from posttrain.config.sched import CurriculumConfig
from posttrain.core.errors import ConfigError

EPS = 1e-9  # a mean this close to a threshold counts as reaching it (0.1, 0.3, 0.2 average to 0.2)
LevelOptions = Callable[[int], dict[str, Any]]  # level (1-based) -> the options it sets


class DomainCurriculum:
    """One domain's level and pass-rate window (see the module docstring)."""

    def __init__(self, domain: str, cfg: CurriculumConfig, levels: int, level_options: LevelOptions,
                 base_options: dict[str, Any], where: str):
        if levels < 1:
            raise ConfigError(f"{where}: domain {domain!r} has no difficulty levels")
        top = levels if cfg.max_level is None else cfg.max_level
        for name, value in (("min_level", cfg.min_level), ("max_level", top), ("start", cfg.start)):
            if value > levels:
                raise ConfigError(f"{where}.{name}={value}: domain {domain!r} has {levels} levels")
        if cfg.start > top:
            raise ConfigError(f"{where}.start={cfg.start} is above max_level={top}")
        self.domain, self.where, self.cfg = domain, where, cfg
        self.levels, self.min_level, self.max_level = levels, cfg.min_level, top
        self.base_options = dict(base_options)
        self._level_options = level_options
        self.level = cfg.start
        self.window: deque[float] = deque(maxlen=cfg.window)
        self.capped_at: int | None = None  # the first level that did not build, when max_level was capped

    def options_at(self, level: int) -> dict[str, Any]:
        """The domain's options at `level` (1..levels): the level's values over the base options."""
        if not 1 <= level <= self.levels:
            raise ValueError(f"{self.where}: level {level} is outside 1..{self.levels}")
        return {**self.base_options, **self._level_options(level)}

    def options(self) -> dict[str, Any]:
        """The options training draws at the current level."""
        return self.options_at(self.level)

    def observe(self, pass_rate: float | None) -> int | None:
        """Record one step's pass rate (None: the domain had no groups this step, nothing happens);
        the new level when this moved it, else None."""
        if pass_rate is None:
            return None
        if not (isinstance(pass_rate, (int, float)) and math.isfinite(pass_rate) and 0.0 <= pass_rate <= 1.0):
            raise ValueError(f"{self.where}: pass rate must be a number in [0, 1], got {pass_rate!r}")
        self.window.append(float(pass_rate))
        if len(self.window) < self.cfg.window:
            return None
        mean = sum(self.window) / len(self.window)
        if mean >= self.cfg.raise_at - EPS and self.level < self.max_level:
            self.level += 1
        elif mean <= self.cfg.lower_at + EPS and self.level > self.min_level:
            self.level -= 1
        else:
            return None
        self.window.clear()
        return self.level

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level, "window": list(self.window)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        level = int(state["level"])
        if not self.min_level <= level <= self.max_level:
            raise ConfigError(f"{self.where}: the saved level {level} of domain {self.domain!r} is outside "
                              f"min_level..max_level = {self.min_level}..{self.max_level}; was the curriculum changed?")
        self.level = level
        self.window = deque((float(r) for r in state.get("window", [])), maxlen=self.cfg.window)


# ---------------------------------------------------------------- the kinds


def _gym_levels(domain: str, attributes: list[str] | None, where: str) -> tuple[int, LevelOptions]:
    """A reasoning-gym domain's level count and level -> dataset options, from its curriculum."""
    from reasoning_gym.coaching.attributes import RangeAttributeDefinition
    from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(domain):
        raise ConfigError(f"{where}: reasoning-gym domain {domain!r} has no curriculum in reasoning-gym; "
                          f"remove its `curriculum` or set its options by hand")
    curriculum = create_curriculum(domain)
    valid = sorted(curriculum.attributes)
    names = valid if attributes is None else list(dict.fromkeys(attributes))
    unknown = [a for a in names if a not in curriculum.attributes]
    if unknown or not names:
        what = f"unknown attribute {unknown[0]!r}" if unknown else "no attribute named"
        raise ConfigError(f"{where}.attributes: {what} for {domain!r} (valid: {', '.join(valid)})")
    moved = [curriculum.attributes[a] for a in names]
    context = DefaultCurriculumContext()  # reasoning-gym's default (inclusive ranges)
    table: list[dict[str, Any]] = []
    for level in range(max(len(a.levels) for a in moved)):
        opts: dict[str, Any] = {}
        for attr in moved:
            curriculum.set_attr_level(attr.name, min(level, len(attr.levels) - 1))
            value = context.get_attr_value(curriculum, attr)
            if isinstance(attr, RangeAttributeDefinition):  # as generate_configuration: lower and upper fields
                span = list(value) if isinstance(value, Iterable) else [value]
                opts[attr.lower_field_name], opts[attr.upper_field_name] = min(span), max(span)
            else:
                opts[attr.field_name] = value
        table.append(json.loads(json.dumps(opts)))  # plain JSON values (lists, not tuples): options keys match
    return len(table), lambda level: dict(table[level - 1])


def _check_gym(domain: str, options: dict[str, Any]) -> None:
    """The dataset built with `options` (its config checks run; no item is generated: some levels take
    seconds per item, e.g. jugs at level 3)."""
    from posttrain.domains.reasoning_gym import source as rg
    rg._dataset(domain, 0, 1, rg._config_key(domain, options))  # bad options raise ConfigError


def _check_source(domain: str, options: dict[str, Any]) -> None:
    from posttrain.tasks.registry import is_generated, make_source_tasks

    extra = {"split": "train"} if is_generated(domain) else {}
    make_source_tasks(domain, 1, 0, {**options, **extra})


def _terminal_levels() -> int:
    from posttrain.domains.terminal.source import LEVELS

    return LEVELS


# domains outside the generated ones whose source takes a `level` option: domain -> its level count
LEVELLED_SOURCES: dict[str, Callable[[], int]] = {"terminal": _terminal_levels}


def make_curriculum(domain: str, cfg: CurriculumConfig, base_options: dict[str, Any], where: str) -> DomainCurriculum:
    """The curriculum of `domain` (config `DomainConfig.curriculum`), every level in [min_level,
    max_level] checked to build. With max_level unset, the top level is the last that builds (some
    reasoning-gym curricula define levels their own datasets refuse: caesar_cipher's rotation 50 at
    level 3, rubiks_cube's cube_size 7 at level 5); `capped_at` then names the first refused level.
    A domain without levels, an unknown attribute, or a level up to max_level (or up to `start`) whose
    options do not build is one ConfigError line naming `where`."""
    from posttrain.domains.reasoning_gym import source as rg
    from posttrain.tasks.registry import SOURCES, is_generated, is_source

    if is_generated(domain) or domain in LEVELLED_SOURCES:
        if cfg.attributes is not None:
            raise ConfigError(f"{where}.attributes: domain {domain!r} moves only its `level` option; "
                              f"attributes are for reasoning-gym curricula")
        levels = SOURCES[domain].levels if is_generated(domain) else LEVELLED_SOURCES[domain]()
        curr = DomainCurriculum(domain, cfg, levels, lambda level: {"level": level}, base_options, where)
        check = _check_source
    elif not is_source(domain) and domain in rg.list_domains():
        levels, table = _gym_levels(domain, cfg.attributes, where)
        curr = DomainCurriculum(domain, cfg, levels, table, base_options, where)
        check = _check_gym
    else:
        raise ConfigError(f"{where}: domain {domain!r} has no difficulty levels (curricula are for reasoning-gym "
                          f"domains with one, generated domains and terminal); remove its `curriculum`")
    for level in range(curr.min_level, curr.max_level + 1):
        try:
            check(domain, curr.options_at(level))
        except ConfigError as e:
            if cfg.max_level is not None or level <= max(cfg.start, curr.min_level):
                hint = "" if cfg.max_level is None else " (lower max_level)"
                raise ConfigError(f"{where}: level {level} does not build{hint}: {e}") from None
            curr.max_level, curr.capped_at = level - 1, level
            break
    return curr
