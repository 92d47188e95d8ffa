"""`posttrain tasks validate DIR`: every terminal task folder must fail untouched and pass by its oracle.

    results = asyncio.run(validate_dir("posttrain/domains/terminal/data", jobs=2))
    [r for r in results if not r.ok]      # ValidationResult(task, ok, reason)

For each folder under DIR (or DIR itself when it is one folder), through the same env code an
episode uses (TerminalEnv: the same work dir, shell, snapshot and fresh-sandbox verification):
(a) the untouched initial state is scored and must FAIL (reward < 1: otherwise the task is free);
(b) a second episode runs `bash /solution/solve.sh` in its shell (solution/ is mounted read-only
at /solution for that episode only) and must PASS (reward 1.0). A folder that does not load is
reported with the loader's one-line error naming its path. Folders run concurrently, at most
`jobs` at a time. A sandbox that cannot start fails the folder with the reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from posttrain.core.errors import PosttrainError
from posttrain.domains.terminal.env import TerminalEnv
from posttrain.domains.terminal.source import task_folders, terminal_task
from posttrain.domains.terminal.task import load_task
from posttrain.envs.env import InfraError
from posttrain.sandbox.isolation import BwrapIsolation
from posttrain.tasks.validate import ValidationResult


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
