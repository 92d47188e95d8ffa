"""Episodes of many tasks at once over one engine: what RL steps and evals call.

    trajs = rollout(engine, tokenizer, tasks, samples=[8, 8, ...], params=..., seeds=[...], version=3)
    trajs[i][j]    sample j of tasks[i], seeded seeds[i] + j

Every sample is one `run_episode` (envs/episode.py) in its task's environment (`Task.env`,
envs/env.py ENVS), all of them asyncio tasks over one `AsyncEngine` (engine/client.py): the
engine batches whatever turns are ready while other episodes wait on tools, at most
`max_concurrent` episodes at a time. A single-turn task is an episode of one turn, sampled
with exactly the request a plain batch would send (seed seeds[i] + j, max_tokens capped by the
task's `limits.max_new_tokens`).

An episode whose infrastructure fails (`InfraError`) is retried `infra_retries` times with a
fresh environment (waiting `retry_backoff_s`, doubled each time, before each retry; a model's
failure is never retried), then kept as an empty trajectory with stop reason "infra_error" (no tokens,
no score: the group leaves it out, the step counts it). An environment that raises anything else
ends its episode as "env_error". Before any multi-turn episode the model's chat template is
checked once (envs/template.py `check_template`).

`timings["rollout"]` is the wall time of the whole call (what a batch cost); `sampler_weights`
is the engine's `weights_precision` ("exact" when it does not say).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Sequence

from posttrain.envs.env import InfraError, Resources, make_env
from posttrain.envs.episode import failed_episode, run_episode
from posttrain.envs.stats import is_episode_domain
from posttrain.envs.template import ChatFormat
from posttrain.core.errors import ConfigError, ModelLoadError
from posttrain.engine.client import AsyncEngine
from posttrain.engine.protocol import Engine, SamplingParams
from posttrain.core.types import Task, Trajectory


def chat_format(tokenizer, tasks: Sequence[Task], parser: str = "auto", template_check: str = "refuse") -> ChatFormat:
    """The model's ChatFormat, its template checked when some task runs more than one turn."""
    tool_parser = None
    if any(is_episode_domain(t) for t in tasks):
        from posttrain.envs.tools.parsers import pick_parser

        tool_parser = pick_parser(tokenizer, parser)
    fmt = ChatFormat.of(tokenizer, tool_parser, template_check)
    multi = [t for t in tasks if t.env != "single_turn" or (t.limits and t.limits.max_turns > 1)]
    if multi:
        fmt.check((multi[0].metadata or {}).get("tools"))
    return fmt


async def run_episodes(client: AsyncEngine, fmt: ChatFormat, jobs: Sequence[tuple[Task, SamplingParams]], *,
                       version: int, resources: Resources, sampler_weights: str = "exact",
                       max_concurrent: int = 256, infra_retries: int = 2,
                       retry_backoff_s: float = 0.0) -> list[Trajectory]:
    gate = asyncio.Semaphore(max(1, max_concurrent))

    async def one(task: Task, request: SamplingParams) -> Trajectory:
        async with gate:
            why = ""
            for attempt in range(infra_retries + 1):
                if attempt and retry_backoff_s:  # an infrastructure fault: wait before trying again
                    await asyncio.sleep(retry_backoff_s * 2 ** (attempt - 1))
                env = make_env(task.env, resources)
                try:
                    return await run_episode(client, fmt, env, task, request, version=version,
                                             sampler_weights=sampler_weights)
                except InfraError as e:
                    why = str(e) or type(e).__name__
                except asyncio.TimeoutError:  # reset ran past the episode's wall time
                    return failed_episode(task, request, version, "timeout", "the environment did not start in time")
                except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
                    raise
                except (ConfigError, ModelLoadError):  # the user's to fix: the run stops, one line
                    raise
                except Exception as e:  # noqa: BLE001 - the env failed to start: this episode only
                    return failed_episode(task, request, version, "env_error", f"{type(e).__name__}: {e}")
                finally:
                    try:
                        await env.close()
                    except Exception:  # noqa: BLE001 - closing never hides the episode's outcome
                        pass
            return failed_episode(task, request, version, "infra_error", why)

    return list(await asyncio.gather(*(one(t, p) for t, p in jobs)))


def rollout(
    engine: Engine,
    tokenizer,
    tasks: Sequence[Task],
    samples: Sequence[int],
    params: SamplingParams,
    seeds: Sequence[int],
    version: int,
    *,
    resources: Resources | None = None,
    parser: str = "auto",
    template_check: str = "refuse",
    max_concurrent: int = 256,
) -> list[list[Trajectory]]:
    """`samples[i]` trajectories of `tasks[i]`, sample j of task i seeded with `seeds[i] + j`."""
    jobs: list[tuple[Task, SamplingParams]] = []
    owner: list[int] = []
    for i, (task, k) in enumerate(zip(tasks, samples)):
        max_tokens = min(params.max_tokens, task.limits.max_new_tokens) if task.limits else params.max_tokens
        for j in range(k):
            jobs.append((task, replace(params, seed=seeds[i] + j, max_tokens=max_tokens)))
            owner.append(i)
    out: list[list[Trajectory]] = [[] for _ in tasks]
    if not jobs:
        return out
    fmt = chat_format(tokenizer, tasks, parser, template_check)
    sampler_weights = str(getattr(engine, "weights_precision", "exact"))
    resources = resources or Resources()

    async def main() -> list[Trajectory]:
        client = AsyncEngine(engine)
        try:
            return await run_episodes(client, fmt, jobs, version=version, resources=resources,
                                      sampler_weights=sampler_weights, max_concurrent=max_concurrent)
        finally:
            client.close()

    started = time.perf_counter()
    trajs = asyncio.run(main())
    seconds = time.perf_counter() - started
    for i, traj in zip(owner, trajs):
        out[i].append(replace(traj, timings={**traj.timings, "rollout": seconds}))
    return out
