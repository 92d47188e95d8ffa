"""The single-turn environment: a task's chat prompt in, one sampled assistant turn out.

    trajs = rollout(engine, tokenizer, tasks, samples=[8, 8, ...], params=..., version=3)

Token-in, token-out: the prompt is rendered with the chat template once, the engine returns
token ids and their sampler logprobs, and the Trajectory holds exactly those ids (never a
re-tokenization of the decoded text); the loss mask is 1 only on sampled tokens. Each
trajectory records the SamplingParams it was sampled with (its seed included) and the policy
version, so a replayed trajectory is later trained under its own temperature, not the current
one; `timings["rollout"]` is the wall time of the engine batch it was part of. `sampler_weights`
is the engine's `weights_precision` ("exact" when its weights are the trainer's fp32 masters, or
when the engine does not say), so the trainer knows which trajectories need the sampler/trainer
gap corrected (train/step.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from posttrain.errors import ModelLoadError
from posttrain.rollout.engine import Engine, SamplingParams
from posttrain.types import Task, Trajectory


def prompt_ids(tokenizer, task: Task) -> list[int]:
    if not getattr(tokenizer, "chat_template", None):
        where = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
        raise ModelLoadError(f"{where}: no chat template (RL renders task prompts as chat; "
                             "add chat_template.jinja to the model directory)")
    text = tokenizer.apply_chat_template(list(task.prompt), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def check_envs(tasks: Sequence[Task]) -> None:
    """Every task here must be a single-turn episode (multi-turn environments are planned)."""
    for task in tasks:
        if task.env != "single_turn":
            raise ValueError(f"task {task.id!r}: environment {task.env!r} is not available "
                             "(only 'single_turn' episodes run today)")


def rollout(
    engine: Engine,
    tokenizer,
    tasks: Sequence[Task],
    samples: Sequence[int],
    params: SamplingParams,
    seeds: Sequence[int],
    version: int,
) -> list[list[Trajectory]]:
    """`samples[i]` trajectories of `tasks[i]`, sample j of task i seeded with `seeds[i] + j`.

    A task's own `limits.max_new_tokens` caps `params.max_tokens` when smaller.
    """
    check_envs(tasks)
    prompts: list[list[int]] = []
    requests: list[SamplingParams] = []
    owner: list[int] = []
    for i, (task, k) in enumerate(zip(tasks, samples)):
        ids = prompt_ids(tokenizer, task)
        max_tokens = min(params.max_tokens, task.limits.max_new_tokens) if task.limits else params.max_tokens
        for j in range(k):
            prompts.append(ids)
            requests.append(replace(params, seed=seeds[i] + j, max_tokens=max_tokens))
            owner.append(i)
    sampler_weights = str(getattr(engine, "weights_precision", "exact"))
    started = time.perf_counter()
    completions = engine.generate(prompts, requests) if prompts else []
    seconds = time.perf_counter() - started
    out: list[list[Trajectory]] = [[] for _ in tasks]
    for ids, c, i, request in zip(prompts, completions, owner, requests):
        n_prompt, n_new = len(ids), len(c.token_ids)
        out[i].append(
            Trajectory(
                task_id=tasks[i].id,
                token_ids=tuple(ids) + tuple(c.token_ids),
                loss_mask=(0,) * n_prompt + (1,) * n_new,
                logprobs=(0.0,) * n_prompt + tuple(c.logprobs),
                prompt_len=n_prompt,
                sampling=request,
                text=tokenizer.decode(list(c.token_ids), skip_special_tokens=True),
                policy_version=version,
                finish_reason=c.finish_reason,
                timings={"rollout": seconds},
                sampler_weights=sampler_weights,
            )
        )
    return out
