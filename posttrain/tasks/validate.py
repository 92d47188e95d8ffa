"""`posttrain tasks validate DIR | --source NAME`: every task must fail untouched and pass by its oracle.

    results = asyncio.run(validate_dir("posttrain/domains/terminal/data", jobs=2))
    [r for r in results if not r.ok]      # ValidationResult(task, ok, reason)

For each folder under DIR (or DIR itself when it is one folder), through the same env code an
episode uses (TerminalEnv: the same work dir, shell, snapshot and fresh-sandbox verification):
(a) the untouched initial state is scored and must FAIL (reward < 1: otherwise the task is free);
(b) a second episode runs `bash /solution/solve.sh` in its shell (solution/ is mounted read-only
at /solution for that episode only) and must PASS (reward 1.0). A folder that does not load is
reported with the loader's one-line error naming its path. Folders run concurrently, at most
`jobs` at a time. A sandbox that cannot start fails the folder with the reason.

    results = asyncio.run(validate_generated("sql", n=5, levels=[1, 2, 3, 4, 5], split="test"))

For a generated domain (tasks/generated.py), `n` tasks per level, each through its env: (a) reset,
then the untouched state must score < 1; (b) a fresh env plays the generator's oracle turns (each
turn's calls as an Action straight to `env.step`, the loop's parser and engine left out) until the
env says done, and the final state must score 1.0.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path

from posttrain.envs.env import InfraError
from posttrain.core.errors import PosttrainError
from posttrain.sandbox.isolation import BwrapIsolation
from posttrain.domains.terminal.source import task_folders, terminal_task
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


def _why(score) -> str:
    d = score.details
    failed = [name for name, ok in (d.get("checks") or {}).items() if not ok]
    parts = [f"failed: {', '.join(failed)}"] if failed else []
    if d.get("error"):
        parts.append(str(d["error"]))
    if d.get("events"):
        parts.append(f"events: {', '.join(d['events'])}")
    return "; ".join(parts) or "no detail"


async def _episode(task, isolation, oracle: bool):
    from posttrain.domains.terminal.env import TerminalEnv

    env = TerminalEnv(isolation=isolation, with_solution=oracle)
    try:
        await env.reset(task)
        out = await env.run_oracle() if oracle else None
        state = env.state()
        score = (await asyncio.to_thread(env.score, task, state))[0]
        return score, out
    finally:
        await env.close()


async def validate_task(path: str | Path, isolation: BwrapIsolation | None = None) -> ValidationResult:
    from posttrain.domains.terminal.task import load_task

    name = Path(path).name
    try:
        task = terminal_task(load_task(path))
    except PosttrainError as e:
        return ValidationResult(name, False, str(e))
    try:
        initial, _ = await _episode(task, isolation, oracle=False)
        if initial.value >= 1.0:
            return ValidationResult(name, False, "the untouched initial state already passes the tests", initial.value)
        oracle, out = await _episode(task, isolation, oracle=True)
    except InfraError as e:
        return ValidationResult(name, False, f"sandbox: {e}")
    except (RuntimeError, OSError) as e:  # setup.sh failed, or the task's own runner did
        return ValidationResult(name, False, str(e))
    if oracle.value < 1.0:
        tail = (out.output.strip().splitlines() or [""])[-1][:200] if out is not None else ""
        ran = "timed out" if out is not None and out.timed_out else f"exit code {out.exit_code if out else None}"
        return ValidationResult(name, False, f"the oracle solve.sh ({ran}: {tail!r}) scores {oracle.value:.2f}: "
                                f"{_why(oracle)}", initial.value, oracle.value)
    return ValidationResult(name, True, f"initial {initial.value:.2f}, oracle {oracle.value:.2f}",
                            initial.value, oracle.value)


async def validate_dir(root: str | Path, jobs: int = 2,
                       isolation: BwrapIsolation | None = None) -> list[ValidationResult]:
    """One result per folder (in name order), `jobs` folders at a time."""
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(path: Path) -> ValidationResult:
        async with gate:
            return await validate_task(path, isolation)

    return list(await asyncio.gather(*(one(p) for p in task_folders(root))))


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
