"""reasoning-gym preference pairs (`pref:gym_DOMAIN`): the domain's prompt, chosen its correct worked
answer, rejected a plausible wrong one. Registered as the "gym" preference family by this package."""

from __future__ import annotations

import random

from posttrain.core.errors import ConfigError
from posttrain.domains.reasoning_gym.source import ANSWER_TAG, gold_completion, training_tasks
from posttrain.tasks.preferences import EVAL_SEED_OFFSET, pair_record
from posttrain.tasks.worked import wrong_steps


def gym_pairs(domain: str, n: int, seed: int, *, conversational: bool = True,
              options: dict | None = None) -> list[dict]:
    """n reasoning-gym prompts of `domain` with a correct and a wrong worked answer each."""
    if seed >= EVAL_SEED_OFFSET:
        raise ValueError(f"gym_{domain}: reasoning-gym pairs come from training seeds only; hold out with "
                         f"data.eval_fraction instead of a second pref: spec")
    options = dict(options or {})
    holdout = options.pop("holdout", None)  # held-out eval items whose questions are skipped (default: the domain's)
    try:
        tasks = training_tasks(domain, n, seed, config=options or None, holdout=holdout)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    rng = random.Random(f"gym-pref:{domain}:{seed}")
    out = []
    for task in tasks:
        chosen = gold_completion(task)
        if chosen is None:
            raise ValueError(f"gym_{domain}: the domain has no gold answers to prefer")
        steps, wrong = wrong_steps(domain, task.reference, rng)
        rejected = f"{steps}\n{ANSWER_TAG} {wrong}" if steps else f"{ANSWER_TAG} {wrong}"
        if rejected == chosen:
            continue
        question = task.prompt[0]["content"]
        out.append(pair_record(f"gym_{domain}", question, chosen, rejected, str(task.reference.get("answer")), conversational))
    return out
