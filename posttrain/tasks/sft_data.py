"""SFT examples built from task sources, as records `{"messages": [...]}` for `train.data.from_records`
(the recipe composes them; train/ only packs what it is given).

    names, n = count_spec("tasks", "bfcl_simple_python,bfcl_multiple:300", "tasks:bfcl_simple_python:300")
    records = task_demos("bfcl_simple_python:300", seed=0, task_options={...}, tokenizer=tok)
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from posttrain.core.errors import DataError
from posttrain.envs.tools.parsers import pick_parser
from posttrain.envs.tools.prompt import with_tools
from posttrain.tasks.registry import make_source_tasks, source_demo


def count_spec(kind: str, spec: str, example: str) -> tuple[list[str], int]:
    """'NAME[,NAME...]:N' -> (names, N > 0); a DataError naming `kind:spec` otherwise."""
    names_part, sep, n_part = spec.rpartition(":")
    names = [x.strip() for x in names_part.split(",") if x.strip()]
    if not sep or not names or not n_part.isdigit() or int(n_part) <= 0:
        upper = "DOMAIN" if kind == "gym" else "NAME"
        raise DataError(f"{kind}:{spec}: expected {kind}:{upper}[,{upper}...]:N with N > 0, e.g. {example}")
    return names, int(n_part)


def task_demos(spec: str, seed: int = 0, task_options: Mapping[str, Mapping[str, Any]] | None = None,
               tokenizer=None) -> list[dict]:
    """'NAME[,NAME...]:N' -> N gold demonstrations of registered task sources (tasks/registry.py
    `demo`, e.g. BFCL's first possible answer as tool calls), drawn by `seed` across the sources,
    each source built with `task_options[NAME]` (e.g. {split: train}). A task with tools is shown
    them as episodes show them (envs/tools/prompt.py `with_tools`, the model's parser writing the calls)."""
    names, n = count_spec("tasks", spec, "tasks:bfcl_simple_python:300")
    pool = []
    for name in names:
        demo = source_demo(name)
        if demo is None:
            raise DataError(f"tasks:{spec}: source {name!r} has no gold demonstrations")
        pool += [(t, demo) for t in make_source_tasks(name, None, seed, (task_options or {}).get(name, {}))]
    random.Random(f"demos:{seed}").shuffle(pool)
    parser = None
    records = []
    for task, demo in pool[:n]:
        gold = demo(task)
        if gold is None:
            continue
        messages = [dict(m) for m in task.prompt]
        tools = (task.metadata or {}).get("tools")
        if tools or not isinstance(gold, str):
            if tokenizer is None:
                raise DataError(f"tasks:{spec}: tool-calling demonstrations need the model's tokenizer")
            parser = parser or pick_parser(tokenizer)
            messages, kwargs = with_tools(messages, tools or [], parser, tokenizer)
            if kwargs:
                raise DataError(f"tasks:{spec}: this model's chat template renders tools= itself; demonstrations "
                                "of tool tasks are written for templates that take them in the system prompt")
            gold = gold if isinstance(gold, str) else parser.format_calls(gold)
        records.append({"messages": [*messages, {"role": "assistant", "content": gold}]})
    return records
