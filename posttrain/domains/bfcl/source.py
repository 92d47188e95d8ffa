"""BFCL v4 function calling as task sources: single-turn categories (AST-checked) and multi-turn base.

    tasks = make_source_tasks("bfcl_simple_python", n=100, seed=0, options={"split": "train"})
    tasks = make_source_tasks("bfcl_multi_turn_base", n=None, seed=0, options={"split": "test"})
    # in a suite: tasks: [{name: bfcl_parallel, options: {split: test}}]

Single-turn sources (`bfcl_simple_python`, `bfcl_multiple`, `bfcl_parallel`, `bfcl_parallel_multiple`,
`bfcl_irrelevance`, and the live_* ones): one Task per BFCL entry, id "<source>/<bfcl id>", env
"single_turn", the question's first-turn messages as prompt, verified by `bfcl_ast`
(domains/bfcl/ast_check.py) from reference {"category", "functions" (BFCL's docs), "answer" (the
possible answers; None for irrelevance/relevance), "dots"}. `metadata["tools"]` holds the docs as
OpenAI-style tool schemas (domains/bfcl/data.py); the episode loop renders them into the prompt.

`bfcl_multi_turn_base`: env "bfcl" (domains/bfcl/env.py runs BFCL's API classes in the sandbox), prompt the
first user turn, reference {"id", "involved_classes", "initial_config", "ground_truth" (call strings
per user turn), "questions" (every user turn)}, verified by `env_score` (the env's state check).

Options: `split` "train" | "test" | "all" (default "all"; a fixed 25% of ids is "test", by a hash
of the BFCL id, bfcl_data.split_of); `dots` (default false: "." in function names becomes "_",
as BFCL's function-calling handlers do; true keeps BFCL's names, e.g. for prompt-style models).
`n` draws that many from the split by `seed` (file order kept); None takes the whole split.
"""

from __future__ import annotations

from typing import Any, Mapping

from posttrain.core.errors import ConfigError
from posttrain.envs.env import ToolCall
from posttrain.domains.bfcl.data import load_category, multi_turn_docs, pick, tool_name, tool_schema
from posttrain.tasks.registry import register_source
from posttrain.core.types import Limits, Task

# category -> number of entries in BFCL v4 (the registry checks n against it)
SINGLE_TURN = {
    "simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "irrelevance": 240,
    "live_simple": 258, "live_multiple": 1053, "live_parallel": 16, "live_parallel_multiple": 24,
    "live_irrelevance": 884, "live_relevance": 16,
}
MULTI_TURN_SIZE = 200
REQUIRES = "posttrain.domains.bfcl.data:missing"  # BFCL's data: `posttrain tasks fetch bfcl`
SINGLE_TURN_LIMITS = Limits(max_new_tokens=512, max_total_tokens=16384)
MULTI_TURN_STEPS_PER_QUESTION = 8  # assistant turns per user question (BFCL allows 20 steps per turn)


def _options(name: str, options: Mapping[str, Any]) -> tuple[str, bool]:
    unknown = sorted(set(options) - {"split", "dots"})
    if unknown:
        raise ConfigError(f"{name}: unknown option {unknown[0]!r} (known: split, dots)")
    split, dots = options.get("split", "all"), options.get("dots", False)
    if not isinstance(dots, bool):
        raise ConfigError(f"{name}: option dots must be true or false, got {dots!r}")
    return split, dots


def single_turn_task(source: str, category: str, entry: dict, dots: bool) -> Task:
    return Task(
        id=f"{source}/{entry['id']}",
        domain=source,
        prompt=tuple(entry["question"][0]),
        reference={"category": category, "functions": entry["function"], "answer": entry["answer"], "dots": dots},
        verifiers=("bfcl_ast",),
        env="single_turn",
        limits=SINGLE_TURN_LIMITS,
        metadata={"tools": [tool_schema(f, dots) for f in entry["function"]], "bfcl_id": entry["id"]},
    )


def single_turn_tasks(category: str, n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    source = f"bfcl_{category}"
    split, dots = _options(source, options)
    return [single_turn_task(source, category, e, dots) for e in pick(load_category(category), n, seed, split, source)]


def gold_calls(task: Task) -> list[ToolCall] | None:
    """The first possible answer of every parameter, as calls (the SFT demonstration of an AST
    category); None for the categories whose right answer is no call."""
    answer = task.reference.get("answer") if isinstance(task.reference, dict) else None
    if not answer:
        return None
    calls = []
    for i, entry in enumerate(answer):
        (name, params), = entry.items()
        args = {k: v[0] for k, v in params.items() if v and v[0] != ""}  # "" first: the parameter is optional
        calls.append(ToolCall(tool_name(name, task.reference.get("dots", False)), args, f"call_{i}"))
    return calls


def _register_single_turn(category: str, size: int) -> None:
    what = {"irrelevance": "no function fits: passed when the model calls none",
            "live_irrelevance": "user-contributed, no function fits: passed when the model calls none",
            "live_relevance": "user-contributed: passed when the model makes a call"}.get(category, "AST-checked calls")

    def make(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
        return single_turn_tasks(category, n, seed, options)

    register_source(f"bfcl_{category}", size=size, description=f"BFCL v4 {category}: {what}", requires=REQUIRES,
                    demo=None if "relevance" in category else gold_calls)(make)


for _category, _size in SINGLE_TURN.items():
    _register_single_turn(_category, _size)


def multi_turn_task(source: str, entry: dict) -> Task:
    questions = entry["question"]
    classes = list(entry["involved_classes"])
    return Task(
        id=f"{source}/{entry['id']}",
        domain=source,
        prompt=tuple(questions[0]),
        reference={"id": entry["id"], "involved_classes": classes, "initial_config": entry["initial_config"],
                   "ground_truth": entry["answer"], "questions": questions},
        verifiers=("env_score",),
        env="bfcl",
        limits=Limits(max_turns=MULTI_TURN_STEPS_PER_QUESTION * len(questions), max_new_tokens=512,
                      seconds=600.0, max_total_tokens=32768, tool_timeout=30.0),
        metadata={"tools": [tool_schema(f) for f in multi_turn_docs(classes)], "bfcl_id": entry["id"]},
    )


@register_source("bfcl_multi_turn_base", size=MULTI_TURN_SIZE, requires=REQUIRES,
                 description="BFCL v4 multi_turn_base: API classes in the sandbox, scored by their final state")
def bfcl_multi_turn_base(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    split, dots = _options("bfcl_multi_turn_base", options)
    if dots:
        raise ConfigError("bfcl_multi_turn_base: option dots does not apply (its function names have no dots)")
    return [multi_turn_task("bfcl_multi_turn_base", e)
            for e in pick(load_category("multi_turn_base"), n, seed, split, "bfcl_multi_turn_base")]
