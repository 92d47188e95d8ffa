"""Reasoning-gym as a task source: every registered dataset, usable by name.

    tasks = make_tasks("basic_arithmetic", n=50, seed=1_000_000)
    score(tasks[0], "...\\nAnswer: 42")          # the dataset's own score_answer, in [0, 1]

One prompt format everywhere (SFT data, eval, RL): a single user message holding the
question and `INSTRUCTION`, asking for a last line `Answer: <answer>`. `extract_answer`
reads that line back. `Task.reference` holds the reasoning-gym entry (question, answer,
metadata) — all that `score_answer` needs; the dataset object itself is rebuilt per
(domain, seed, config) and cached.

Seeds: a task made with seed S at index i is reasoning-gym's item `S + i`. Training data
(`sft_examples`, the base corpus) must stay below `EVAL_SEED_START`; eval starts there.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from typing import Any, Mapping

from posttrain.errors import ConfigError
from posttrain.tasks.worked import worked_steps
from posttrain.types import Task

EVAL_SEED_START = 1_000_000
INSTRUCTION = "End your response with a final line of the form `Answer: <answer>`."
ANSWER_TAG = "Answer:"
VERIFIER = "reasoning_gym"


def _registry() -> dict[str, Any]:
    import reasoning_gym  # noqa: F401  (importing registers every dataset)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def list_domains() -> list[str]:
    """Names of every reasoning-gym dataset, sorted."""
    return sorted(_registry())


def check_domain(domain: str) -> None:
    """Raise ConfigError naming the closest valid domains when `domain` is unknown."""
    names = list_domains()
    if domain in names:
        return
    close = difflib.get_close_matches(domain, names, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(
        f"unknown reasoning-gym domain {domain!r}: {hint}"
        f"run `posttrain tasks list` to see all {len(names)} (e.g. {', '.join(names[:4])}, ...)"
    )


def _config_key(config: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(config or {}), sort_keys=True, default=str)


@lru_cache(maxsize=512)
def _dataset(domain: str, seed: int, size: int, config_key: str):
    import reasoning_gym

    check_domain(domain)
    kwargs = json.loads(config_key)
    try:
        return reasoning_gym.create_dataset(domain, size=size, seed=seed, **kwargs)
    except (TypeError, AssertionError, ValueError) as e:
        raise ConfigError(f"reasoning-gym domain {domain!r}: bad dataset config {kwargs}: {e}") from None


def format_prompt(question: str) -> str:
    return f"{question.rstrip()}\n\n{INSTRUCTION}"


def make_tasks(domain: str, n: int, seed: int, *, config: Mapping[str, Any] | None = None) -> list[Task]:
    """`n` tasks of `domain` from reasoning-gym items seed .. seed+n-1.

    `config` passes dataset options through (e.g. {"max_terms": 3}); unknown domain or
    options raise ConfigError.
    """
    if n <= 0:
        raise ConfigError(f"reasoning-gym domain {domain!r}: number of tasks must be > 0 (got {n})")
    key = _config_key(config)
    ds = _dataset(domain, seed, n, key)
    tasks = []
    for i in range(n):
        entry = ds[i]
        tasks.append(
            Task(
                id=f"{domain}/{seed + i}",
                domain=domain,
                prompt=({"role": "user", "content": format_prompt(entry["question"])},),
                reference=entry,
                verifiers=(VERIFIER,),
                metadata={"source": "reasoning_gym", "seed": seed, "index": i, "size": n, "config": key},
            )
        )
    return tasks


def extract_answer(completion: str) -> str:
    """Text after the last `Answer:` (stripped), else the last non-empty line, else ''."""
    head, tag, tail = completion.rpartition(ANSWER_TAG)
    if tag:
        return tail.strip()
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def score(task: Task, completion: str) -> float:
    """The dataset's own `score_answer` on the extracted answer, clipped to [0, 1]."""
    meta = task.metadata
    ds = _dataset(task.domain, int(meta.get("seed", 0)), int(meta.get("size", 1)), meta.get("config", "{}"))
    try:
        value = float(ds.score_answer(extract_answer(completion), task.reference))
    except Exception:  # a scorer that chokes on malformed model output scores 0, never crashes a run
        return 0.0
    return min(1.0, max(0.0, value))


def gold_answer(task: Task) -> str:
    return str(task.reference["answer"])


def gold_completion(task: Task) -> str:
    """A correct worked solution in the format the prompt asks for."""
    steps = worked_steps(task.domain, task.reference)
    answer_line = f"{ANSWER_TAG} {gold_answer(task)}"
    return f"{steps}\n{answer_line}" if steps else answer_line


def split_count(n: int, parts: int) -> list[int]:
    """n split as evenly as possible into `parts` counts (earlier parts get the remainder)."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def sft_examples(domains: list[str], n: int, seed: int) -> list[dict]:
    """`n` chat examples `{"messages": [user, assistant]}` with correct worked answers.

    Split evenly over `domains` and interleaved (round-robin). Items come from seeds
    `seed .. seed + n_domain - 1`, which must stay below EVAL_SEED_START.
    """
    if not domains:
        raise ConfigError("sft_examples: give at least one reasoning-gym domain")
    for domain in domains:
        check_domain(domain)
    counts = split_count(n, len(domains))
    if seed < 0 or seed + max(counts) > EVAL_SEED_START:
        raise ConfigError(
            f"sft_examples: seeds {seed}..{seed + max(counts) - 1} overlap eval seeds (>= {EVAL_SEED_START})"
        )
    per_domain = [make_tasks(d, c, seed) if c else [] for d, c in zip(domains, counts)]
    out = []
    for i in range(max(counts, default=0)):
        for tasks in per_domain:
            if i < len(tasks):
                task = tasks[i]
                out.append(
                    {
                        "messages": [
                            dict(task.prompt[0]),
                            {"role": "assistant", "content": gold_completion(task)},
                        ]
                    }
                )
    return out
