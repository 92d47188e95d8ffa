"""Eval task sources from one spec string: reasoning-gym domains, JSONL task files, HumanEval files.

    tasks = load_spec("basic_arithmetic:100,chain_sum,data/qa.jsonl,HumanEval.jsonl.gz:20", default_n=50,
                      seed=1_000_000)

Each comma-separated item is `NAME[:N]`:
- a reasoning-gym domain (`chain_sum`): N tasks (default `default_n`) from items `seed`, `seed`+1, ...
  (with `task_options[NAME]` as dataset options), scored by the verifiers they name (`reasoning_gym`);
- a file (an item ending in `.jsonl` / `.jsonl.gz` or naming an existing file): its first N tasks
  (default: all). Its domain is the file name without `.jsonl[.gz]`. The format is read from the
  first record: one with string `task_id`, `prompt`, `test` and `entry_point` is a HumanEval file
  (`posttrain verify code`'s task format), anything else a posttrain JSONL task file
  (posttrain/tasks/jsonl.py: `prompt`, `answer`, `verifier(s)`).

HumanEval tasks become chat tasks verified by `code` (unit tests in the sandbox): the user message
asks for the function in a fenced block, the reference keeps the prompt, entry point and test
(`spec_for` puts the prompt in front of the reply's code, as HumanEval does). A bad line of any
file is a DataError `path:LINE: what is wrong`; an unknown domain a ConfigError naming close ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from posttrain.errors import ConfigError, DataError
from posttrain.fsio import read_jsonl
from posttrain.types import Limits, Task

HUMANEVAL_KEYS = ("task_id", "prompt", "entry_point", "test")
CODE_INSTRUCTION = ("Complete the following Python function. Reply with the whole function, "
                    "imports included, in one ```python code block.")
CODE_MAX_TOKENS = 512  # a HumanEval function body needs more room than the 256-token default limit
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


def parse_spec(spec: str, default_n: int | None) -> list[tuple[str, int | None]]:
    """"a:10,b,x.jsonl" -> [("a", 10), ("b", default_n), ("x.jsonl", None)]: a file without :N is
    read whole. Unknown domains, bad counts and repeated items raise ConfigError."""
    from posttrain.tasks.reasoning_gym import check_domain

    out: list[tuple[str, int | None]] = []
    domains: set[str] = set()
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        if not sep or (not count.strip().lstrip("-").isdigit() and is_file_item(item)):
            name, count, sep = item, "", ""
        name = name.strip()
        n: int | None
        if sep:
            try:
                n = int(count)
            except ValueError:
                raise ConfigError(f"tasks: {item!r}: expected NAME:N with an integer N") from None
            if n <= 0:
                raise ConfigError(f"tasks: {item!r}: N must be > 0")
        else:
            n = None if is_file_item(name) else default_n
        domain = file_domain(name) if is_file_item(name) else name
        if not is_file_item(name):
            check_domain(name)
        if domain in domains:
            raise ConfigError(f"tasks: domain {domain!r} is listed twice")
        domains.add(domain)
        out.append((name, n))
    if not out:
        raise ConfigError(f"tasks: {spec!r} names no domain; expected NAME[:N] or FILE.jsonl[:N], comma-separated")
    return out


def humaneval_task(record: dict, domain: str) -> Task:
    task_id = record["task_id"]
    body = f"{CODE_INSTRUCTION}\n\n```python\n{record['prompt'].rstrip()}\n```"
    return Task(
        id=task_id if "/" in task_id else f"{domain}/{task_id}",
        domain=domain,
        prompt=({"role": "user", "content": body},),
        reference={k: record[k] for k in ("prompt", "entry_point", "test")},
        verifiers=("code",),
        limits=Limits(max_new_tokens=CODE_MAX_TOKENS),
        metadata={"source": "humaneval", "task_id": task_id},
    )


def load_humaneval(path: str | Path, domain: str) -> list[Task]:
    tasks: list[Task] = []
    seen: set[str] = set()
    for where, record in read_jsonl(path, HUMANEVAL_KEYS):
        if record["task_id"] in seen:
            raise DataError(f"{where}: duplicate task_id {record['task_id']!r}")
        seen.add(record["task_id"])
        tasks.append(humaneval_task(record, domain))
    if not tasks:
        raise DataError(f"{path}: no tasks (the file is empty)")
    return tasks


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


def load_spec(spec: str, default_n: int, seed: int,
              task_options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Task]:
    """The tasks of every item of `spec`, in spec order (see the module docstring)."""
    from posttrain.tasks.reasoning_gym import make_tasks

    options = task_options or {}
    tasks: list[Task] = []
    for name, n in parse_spec(spec, default_n):
        if is_file_item(name):
            got = load_file(name)
            if n is not None and n > len(got):
                raise ConfigError(f"tasks: {name}:{n}: the file has only {len(got)} tasks")
            tasks += got[:n] if n is not None else got
        else:
            tasks += make_tasks(name, n or default_n, seed, config=options.get(name))
    return tasks
