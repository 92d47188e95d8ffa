"""Tasks from a JSONL file: one task per line.

    {"prompt": "What is 2+3?", "answer": "5", "verifier": "numeric"}
    {"id": "q7", "prompt": [{"role": "user", "content": "..."}], "answer": "Paris", "verifiers": ["exact"]}

`prompt` is a user message (string) or a list of chat messages; `answer` is the reference
the verifiers compare against; `verifier` (one name) or `verifiers` (a list) name
registered verifiers (default: `exact`). Optional: `id` (default `DOMAIN/LINE`),
`max_tokens`. A bad line is a DataError naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.fsio import bad_lines, read_jsonl
from posttrain.core.types import Limits, Task

DEFAULT_VERIFIER = "exact"
_KEYS = {"id", "prompt", "answer", "verifier", "verifiers", "max_tokens", "metadata"}


def _messages(prompt, where: str) -> tuple[dict, ...]:
    if isinstance(prompt, str) and prompt.strip():
        return ({"role": "user", "content": prompt},)
    if isinstance(prompt, list) and prompt:
        for i, m in enumerate(prompt):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise DataError(f"{where}: prompt[{i}] must be {{'role': str, 'content': str}}")
        return tuple(dict(m) for m in prompt)
    raise DataError(f"{where}: 'prompt' must be a non-empty string or a list of chat messages")


def parse_task(record, domain: str, where: str, default_id: str) -> Task:
    from posttrain.verifiers import get_verifier

    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - _KEYS)
    if unknown:
        raise DataError(f"{where}: unknown key {unknown[0]!r} (expected some of {sorted(_KEYS)})")
    if "prompt" not in record:
        raise DataError(f"{where}: missing 'prompt'")
    if "answer" not in record:
        raise DataError(f"{where}: missing 'answer' (the reference the verifier checks)")
    names = record.get("verifiers", [record["verifier"]] if "verifier" in record else [DEFAULT_VERIFIER])
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise DataError(f"{where}: 'verifiers' must be a non-empty list of names")
    for name in names:
        try:
            get_verifier(name)
        except ConfigError as e:
            raise DataError(f"{where}: {e}") from None
    limits = Limits()
    if "max_tokens" in record:
        if not isinstance(record["max_tokens"], int) or record["max_tokens"] <= 0:
            raise DataError(f"{where}: 'max_tokens' must be a positive integer")
        limits = Limits(max_new_tokens=record["max_tokens"])
    if not isinstance(record.get("metadata") or {}, dict):
        raise DataError(f"{where}: 'metadata' must be a JSON object")
    task_id = record.get("id", default_id)
    if not isinstance(task_id, str) or not task_id:
        raise DataError(f"{where}: 'id' must be a non-empty string")
    return Task(
        id=task_id if "/" in task_id else f"{domain}/{task_id}",
        domain=domain,
        prompt=_messages(record["prompt"], where),
        reference=record["answer"],
        verifiers=tuple(names),
        limits=limits,
        metadata=dict(record.get("metadata") or {}),
    )


def load_tasks(path: str | Path, domain: str) -> list[Task]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: task file not found")
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    bad: list[str] = []  # every bad line, reported together
    for where, record in read_jsonl(p):
        try:
            task = parse_task(record, domain, where, default_id=f"{domain}/{where.rsplit(':', 1)[1]}")
        except DataError as e:
            bad.append(str(e))
            continue
        if task.id in seen:
            bad.append(f"{where}: duplicate task id {task.id!r} (first on line {seen[task.id].rpartition(':')[2]})")
            continue
        seen[task.id] = where
        tasks.append(task)
    if bad:
        raise bad_lines(bad)
    if not tasks:
        raise DataError(f"{p}: no tasks (the file is empty)")
    return tasks
