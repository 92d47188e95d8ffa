"""Generated environment domains: procedural task families with difficulty levels, held-out seeds and an oracle.

    @register_generated("sql", levels=5, description="...", oracle=sql_oracle,
                        options={"rows": (int, 40)})
    def sql_task(seed: int, level: int, options: Mapping[str, Any]) -> Task: ...   # deterministic

    tasks = make_source_tasks("sql", n=8, seed=500_000, options={"level": 2})           # train seeds
    tasks = make_source_tasks("sql", n=8, seed=0, options={"level": [1, 3], "split": "test"})
    turns = oracle_turns(task)        # [OracleTurn(calls, content)]: a scripted episode that passes

A generated domain is a task source (tasks/registry.py) whose tasks are made one per seed by a
pure function of (seed, level, options): the environment rebuilds everything else (a database, a
report, a part's spec) from the task's `reference` at reset and at scoring, so a task is small and a
trajectory's final state re-scores anywhere.

Seeds. `split: train` (the default) gives seeds `seed, seed + 1, ...`, which must stay below
`HELD_OUT_SEED`; `split: test` gives `HELD_OUT_SEED + seed, ...`: the held-out seeds no training
draw reaches. The RL mixture draws a generated domain's training tasks from its cursor upward and
evaluates on the test split (tasks/mixture.py `GeneratedSource`).

Levels. `level` is an int in 1..levels or a list of them (seed s gets `level[s % len(level)]`);
the scheduler's curriculum moves it. Every task records `metadata["level"]` and `metadata["seed"]`,
and its id is `NAME/L{level}/{seed}` (a generator may add a suffix naming a part of that task, as
cad's `unit: step` sub-units do: `cad/L4/123/s2`).

Oracle. `oracle_turns(task)` is a scripted episode: turns of tool calls, the last one's `content`
the final answer (or a call the env ends the episode on). `posttrain tasks validate --source NAME`
runs it through the env (tasks/validate.py: the untouched state must fail, the oracle must pass),
and benchmarks/envs.py times it with and without the episode loop.

Options. Each generator declares its own (`options={name: (type, default)}`); an unknown option, a
wrong type or a level out of range is one ConfigError line naming the domain and the option. A
generator that cannot meet its options for a seed raises ConfigError too (never a traceback).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from posttrain.envs.env import ToolCall
from posttrain.core.errors import ConfigError
from posttrain.tasks.registry import register_source
from posttrain.core.types import Task

HELD_OUT_SEED = 10_000_000  # test-split seeds start here; training seeds stay below
COMMON_OPTIONS = ("level", "split")


@dataclass(frozen=True)
class OracleTurn:
    calls: tuple[ToolCall, ...] = ()
    content: str = ""  # text outside the calls; the final answer on a turn without calls


MakeTask = Callable[[int, int, Mapping[str, Any]], Task]
Oracle = Callable[[Task], list[OracleTurn]]


@dataclass(frozen=True)
class Generator:
    levels: int
    oracle: Oracle


GENERATORS: dict[str, Generator] = {}


def _type_name(kind) -> str:
    return getattr(kind, "__name__", str(kind))


def check_options(name: str, levels: int, declared: Mapping[str, tuple[type, Any]],
                  options: Mapping[str, Any]) -> tuple[list[int], str, dict[str, Any]]:
    """(levels to cycle, split, the generator's own options with defaults) or a one-line ConfigError."""
    unknown = sorted(set(options) - set(COMMON_OPTIONS) - set(declared))
    if unknown:
        valid = ", ".join(list(COMMON_OPTIONS) + sorted(declared))
        raise ConfigError(f"{name}: unknown option {unknown[0]!r} (valid: {valid})")
    level = options.get("level", 1)
    wanted = level if isinstance(level, (list, tuple)) else [level]
    if not wanted or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= levels for v in wanted):
        raise ConfigError(f"{name}: option level must be an integer in 1..{levels} or a list of them, got {level!r}")
    split = options.get("split", "train")
    if split not in ("train", "test"):
        raise ConfigError(f"{name}: option split must be 'train' or 'test', got {split!r}")
    own: dict[str, Any] = {}
    for key, (kind, default) in declared.items():
        value = options.get(key, default)
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok and value is not None:
            raise ConfigError(f"{name}: option {key} must be {_type_name(kind)}, got {value!r}")
        own[key] = value
    return list(wanted), split, own


def task_seeds(name: str, n: int, seed: int, split: str) -> list[int]:
    if seed < 0:
        raise ConfigError(f"{name}: the seed must be >= 0, got {seed}")
    if split == "test":
        return [HELD_OUT_SEED + seed + i for i in range(n)]
    if seed + n > HELD_OUT_SEED:
        raise ConfigError(f"{name}: training seeds {seed}..{seed + n - 1} reach the held-out seeds "
                          f"(>= {HELD_OUT_SEED}); use a lower seed")
    return [seed + i for i in range(n)]


def register_generated(name: str, *, levels: int, oracle: Oracle, description: str,
                       options: Mapping[str, tuple[type, Any]] | None = None,
                       default_n: int = 100) -> Callable[[MakeTask], MakeTask]:
    """Register `make(seed, level, own_options) -> Task` as generated source `name` (n=None: default_n tasks)."""
    declared = dict(options or {})

    def add(make: MakeTask) -> MakeTask:
        GENERATORS[name] = Generator(levels, oracle)

        def source(n: int | None, seed: int, opts: Mapping[str, Any]) -> list[Task]:
            wanted, split, own = check_options(name, levels, declared, opts)
            count = default_n if n is None else n
            out = []
            for s in task_seeds(name, count, seed, split):
                level = wanted[s % len(wanted)]
                task = make(s, level, own)
                if task.metadata.get("level") != level:  # a bug (make_source_tasks checks the domain)
                    raise ValueError(f"generator {name!r} made a task without its level")
                out.append(task)
            return out

        register_source(name, description=description, levels=levels)(source)
        return make

    return add


def generator(name: str) -> Generator:
    from posttrain.tasks.registry import sources

    sources()  # loads the built-in modules
    if name not in GENERATORS:
        known = ", ".join(sorted(GENERATORS)) or "none"
        raise ConfigError(f"{name!r} is not a generated domain (generated domains: {known})")
    return GENERATORS[name]


def oracle_turns(task: Task) -> list[OracleTurn]:
    return generator(task.domain).oracle(task)


def calls(*pairs: tuple[str, Mapping[str, Any]]) -> tuple[ToolCall, ...]:
    """OracleTurn calls from (name, arguments) pairs, with ids call_0, call_1, ..."""
    return tuple(ToolCall(n, dict(a), f"call_{i}") for i, (n, a) in enumerate(pairs))
