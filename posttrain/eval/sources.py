"""Eval task sources from a spec: reasoning-gym domains, registered sources, JSONL and HumanEval files.

    tasks = load_spec("basic_arithmetic:100,chain_sum,humaneval:20,data/qa.jsonl", default_n=50, seed=1_000_000)
    tasks = load_spec(["reasoning_gym:10", {"name": "needle", "n": 40, "options": {"lengths": [512]}}], 50, 0)

A spec is a comma-separated string or a list (a suite's `tasks:`) of items; an item is a string
`NAME[:N]` or a mapping `{name: NAME, n: N, options: {...}}`. NAME is, in this order:
- a registered task source (posttrain/tasks/registry.py: `humaneval`, the long-context probes, the
  red-team categories, ...): N tasks from it (default: all of a fixed dataset such as HumanEval's
  164, `default_n` of a generated one), with `options` as the source's settings; a generated
  environment domain (`sql`, `document`, `cad`: tasks/generated.py) gives its held-out test seeds
  from the first, the tasks the RL in-loop eval scores;
- a group (`reasoning_gym`: every reasoning-gym domain; `redteam`: every red-team category): one
  item per member, each with the same N and options;
- a reasoning-gym domain (`chain_sum`): N tasks (default `default_n`) from items `seed`, `seed`+1, ...
  (with the item's options, else `task_options[NAME]`, as dataset options), scored by `reasoning_gym`;
- a file (an item ending in `.jsonl` / `.jsonl.gz` or naming an existing file): its first N tasks
  (default: all). Its domain is the file name without `.jsonl[.gz]`. The format is read from the
  first record: one with string `task_id`, `prompt`, `test` and `entry_point` is a HumanEval file
  (tasks/humaneval.py), anything else a posttrain JSONL task file (tasks/jsonl.py: `prompt`,
  `answer`, `verifier(s)`).

Every check runs before any task is built: an unknown name is a ConfigError naming close ones, a
domain listed twice or a bad N a ConfigError naming the item; a bad line of a file is a DataError
`path:LINE: what is wrong`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.fsio import read_jsonl
from posttrain.domains.humaneval.source import HUMANEVAL_KEYS, load_humaneval
from posttrain.core.types import Task

_SUFFIXES = (".jsonl.gz", ".jsonl")


def is_file_item(name: str) -> bool:
    return name.endswith(_SUFFIXES) or Path(name).is_file()


def file_domain(path: str) -> str:
    """`data/HumanEval.jsonl.gz` -> `HumanEval`; `qa.jsonl` -> `qa`."""
    name = Path(path).name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return Path(name).stem or name


@dataclass(frozen=True)
class SpecItem:
    name: str  # a source, a reasoning-gym domain or a file path (groups are expanded)
    n: int | None  # None: all of a file or fixed dataset
    options: Mapping[str, Any] | None = None  # None: task_options[name] (reasoning-gym) or none

    @property
    def domain(self) -> str:
        return file_domain(self.name) if is_file_item(self.name) else self.name


def _count(item: str, count: str) -> int:
    try:
        n = int(count)
    except ValueError:
        raise ConfigError(f"tasks: {item!r}: expected NAME:N with an integer N") from None
    if n <= 0:
        raise ConfigError(f"tasks: {item!r}: N must be > 0")
    return n


def _string_item(item: str) -> tuple[str, int | None]:
    name, sep, count = item.rpartition(":")
    if not sep or (not count.strip().lstrip("-").isdigit() and is_file_item(item)):
        return item, None
    return name.strip(), _count(item, count)


def _mapping_item(item: Mapping[str, Any]) -> tuple[str, int | None, Mapping[str, Any] | None]:
    unknown = sorted(set(item) - {"name", "n", "options"})
    if unknown or not isinstance(item.get("name"), str) or not item["name"].strip():
        why = f"unknown key {unknown[0]!r}" if unknown else "needs a string 'name'"
        raise ConfigError(f"tasks: item {dict(item)!r}: {why} (keys: name, n, options)")
    n = item.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n <= 0):
        raise ConfigError(f"tasks: item {item['name']!r}: n must be an integer > 0 (got {n!r})")
    options = item.get("options")
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"tasks: item {item['name']!r}: options must be a mapping (got {type(options).__name__})")
    return item["name"].strip(), n, options


def _raw_items(spec: str | Sequence[str | Mapping[str, Any]]) -> list[str | Mapping[str, Any]]:
    if isinstance(spec, str):
        return [part.strip() for part in spec.split(",") if part.strip()]
    out: list[str | Mapping[str, Any]] = []
    for item in spec:
        if isinstance(item, str):
            out += [part.strip() for part in item.split(",") if part.strip()]
        elif isinstance(item, Mapping):
            out.append(item)
        else:
            raise ConfigError(f"tasks: item {item!r}: expected NAME[:N] or a mapping {{name, n, options}}")
    return out


def parse_items(spec: str | Sequence[str | Mapping[str, Any]], default_n: int | None) -> list[SpecItem]:
    """The spec's items with groups expanded and every name checked (module docstring)."""
    from posttrain.tasks import registry

    out: list[SpecItem] = []
    for raw in _raw_items(spec):
        name, n, options = _mapping_item(raw) if isinstance(raw, Mapping) else (*_string_item(raw), None)
        if is_file_item(name):
            out.append(SpecItem(name, n, options))
            continue
        registry.check_name(name)
        names = registry.expand_group(name) if registry.is_group(name) and not registry.is_source(name) else [name]
        for member in names:
            fixed = registry.is_source(member) and registry.sources()[member].size is not None
            out.append(SpecItem(member, n if n is not None else (None if fixed else default_n), options))
    if not out:
        raise ConfigError(f"tasks: {spec!r} names no domain; expected NAME[:N] or FILE.jsonl[:N], comma-separated")
    seen: set[str] = set()
    for item in out:
        if item.domain in seen:
            raise ConfigError(f"tasks: domain {item.domain!r} is listed twice")
        seen.add(item.domain)
    return out


def parse_spec(spec: str | Sequence[str | Mapping[str, Any]], default_n: int | None) -> list[tuple[str, int | None]]:
    """"a:10,b,x.jsonl" -> [("a", 10), ("b", default_n), ("x.jsonl", None)]: a file without :N is
    read whole. Unknown domains, bad counts and repeated items raise ConfigError."""
    return [(item.name, item.n) for item in parse_items(spec, default_n)]


def file_format(path: str | Path) -> str:
    """"humaneval" or "jsonl", from the file's first record (a broken first line raises its DataError)."""
    for _, record in read_jsonl(path):
        return "humaneval" if all(isinstance(record.get(k), str) for k in HUMANEVAL_KEYS) else "jsonl"
    raise DataError(f"{path}: no tasks (the file is empty)")


def load_file(path: str | Path, domain: str | None = None) -> list[Task]:
    """Every task of a JSONL or HumanEval file (format detected from its first record)."""
    from posttrain.tasks.jsonl import load_tasks

    domain = domain or file_domain(str(path))
    if not Path(path).is_file():
        raise DataError(f"{path}: task file not found")
    return load_humaneval(path, domain) if file_format(path) == "humaneval" else load_tasks(path, domain)


def load_spec(spec: str | Sequence[str | Mapping[str, Any]], default_n: int, seed: int,
              task_options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Task]:
    """The tasks of every item of `spec`, in spec order (see the module docstring)."""
    from posttrain.tasks import registry
    from posttrain.domains.reasoning_gym.source import make_tasks

    defaults = task_options or {}
    tasks: list[Task] = []
    for item in parse_items(spec, default_n):
        if is_file_item(item.name):
            got = load_file(item.name)
            if item.n is not None and item.n > len(got):
                raise ConfigError(f"tasks: {item.name}:{item.n}: the file has only {len(got)} tasks")
            tasks += got[: item.n] if item.n is not None else got
        elif registry.is_generated(item.name):
            # a generated domain: its held-out test seeds from the first, as the RL in-loop eval takes them
            tasks += registry.make_source_tasks(item.name, item.n, 0, {"split": "test", **(item.options or {})})
        elif registry.is_source(item.name):
            tasks += registry.make_source_tasks(item.name, item.n, seed, item.options or {})
        else:
            options = item.options if item.options is not None else defaults.get(item.name)
            tasks += make_tasks(item.name, item.n or default_n, seed, config=options)
    return tasks
