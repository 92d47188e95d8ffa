"""`posttrain tasks validate --source NAME`: every task must fail untouched and pass by its oracle.
(`posttrain tasks validate DIR`, terminal task folders, is domains/terminal/validate.py.)

    results = asyncio.run(validate_generated("sql", n=5, levels=[1, 2, 3, 4, 5], split="test"))

For a generated domain (tasks/generated.py), `n` tasks per level, each through its env: (a) reset,
then the untouched state must score < 1; (b) a fresh env plays the generator's oracle turns (each
turn's calls as an Action straight to `env.step`, the loop's parser and engine left out) until the
env says done, and the final state must score 1.0.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

from posttrain.envs.env import InfraError
from posttrain.core.types import Task


@dataclass(frozen=True)
class ValidationResult:
    task: str  # the folder's name
    ok: bool
    reason: str  # what failed, or what passed ("initial 0.00, oracle 1.00")
    initial: float | None = None  # reward of the untouched state
    oracle: float | None = None  # reward after solve.sh

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k in ("task", "ok", "reason")}


async def play_oracle(env, task: Task, turns) -> bool:
    """Reset `env` and step it through the oracle `turns` (OracleTurns) until it is done: True when done."""
    from posttrain.envs.env import Action

    await env.reset(task)
    for turn in turns:
        action = Action(text=turn.content, tool_calls=turn.calls, content=turn.content, parsed=turn.calls)
        result = await env.step(action)
        if result.done:
            return True
    return False


async def _scored(task: Task, resources, turns) -> tuple:
    """(score, done) of a fresh env reset and stepped through `turns` (none: the untouched state)."""
    from posttrain.envs.env import make_env

    env = make_env(task.env, resources)
    try:
        done = await play_oracle(env, task, turns)
        return (await resources.run_blocking(env.score, task, env.state()))[0], done
    finally:
        await env.close()


async def _generated_task(task: Task, resources) -> ValidationResult:
    from posttrain.tasks.generated import oracle_turns

    initial, _ = await _scored(task, resources, [])
    if initial.value >= 1.0:
        return ValidationResult(task.id, False, "the untouched initial state already scores 1.0", initial.value)
    oracle, done = await _scored(task, resources, oracle_turns(task))
    if oracle.value < 1.0:
        detail = {k: v for k, v in oracle.details.items() if k in ("error", "checks", "answer_ok", "citations_ok")}
        return ValidationResult(task.id, False, f"the oracle scores {oracle.value:.2f}"
                                f"{'' if done else ' (the env never said done)'}: {detail}", initial.value, oracle.value)
    return ValidationResult(task.id, True, f"initial {initial.value:.2f}, oracle {oracle.value:.2f}",
                            initial.value, oracle.value)


async def validate_generated(name: str, n: int = 5, levels=None, split: str = "test", seed: int = 0,
                             jobs: int = 2) -> list[ValidationResult]:
    """`n` tasks of generated domain `name` per level (all levels by default), `jobs` at a time."""
    from posttrain.envs.env import Resources
    from posttrain.tasks.generated import generator
    from posttrain.tasks.registry import make_source_tasks

    gen = generator(name)
    wanted = list(levels) if levels else list(range(1, gen.levels + 1))
    tasks = [t for level in wanted for t in make_source_tasks(name, n, seed, {"level": level, "split": split})]
    resources, gate = Resources(), asyncio.Semaphore(max(1, jobs))

    async def one(task: Task) -> ValidationResult:
        async with gate:
            try:
                return await _generated_task(task, resources)
            except InfraError as e:
                return ValidationResult(task.id, False, f"sandbox: {e}")

    return list(await asyncio.gather(*(one(t) for t in tasks)))
