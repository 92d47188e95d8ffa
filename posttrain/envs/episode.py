"""One episode of one task: the loop RL, eval and the examples all run (`run_episode`).

    traj = await run_episode(client, fmt, env, task, params, version=3)

    messages = env.reset(task) -> prompt ids (chat template, tools)
    repeat: sample a turn (client.generate: token ids + sampler logprobs, as sampled)
            parse it (fmt.parser) -> Action; calls failing their schema become error observations
            env.step(action) -> observations, done
            bridge ids for the observations (envs/template.py; mask 0)
    state = env.state()   (saved as Trajectory.final_state; the score is re-run from it)

The trajectory is exactly: prompt ids, each sampled turn's ids as sampled, bridge ids. Per token:
`token_sources` (POLICY / ENV / TEMPLATE), sampler logprob (0 where not sampled), policy version
(-1 where not sampled); `loss_mask` is 1 only on POLICY tokens. Model output is never re-tokenized.

Limits (Task.limits) and the stop reason each gives (`Trajectory.stop_reason`):
- a turn without tool calls, or the env says done -> "done"
- `max_turns` sampled turns -> "max_turns"; a turn cut at `max_new_tokens` -> "max_tokens"
- the next turn or bridge would pass `max_total_tokens` -> "truncated"
- `seconds` of environment time (reset and steps: tools, sandboxes) -> "timeout". The model's
  time is bounded by tokens only, never by a clock: an episode's outcome must not depend on how
  loaded the engine is (a batch of 256 episodes queues on a CPU engine for minutes), or runs would
  not replay. (Harbor's agent timeout counts both; ours is the env's share of it.)
- an env exception -> "env_error"; `InfraError` (sandbox down) -> "infra_error"
Each tool call has `tool_timeout` seconds: an env answers a call past it with a "tool_timeout"
error observation (the terminal env kills the command, BFCL's runner the step); a step that does
not come back within its calls' timeouts plus STEP_GRACE_S (an env that hangs) ends the episode
as "timeout". An observation over `max_observation_tokens`
is cut with a marker. env_error and infra_error trajectories carry no score (excluded from group
baselines) and are counted; the caller retries infra_error episodes (envs/rollout.py).

Turn t of an episode samples with seed `seed` (t = 0) or a seed derived from (seed, t), so an
episode is reproducible whatever else runs, and a single-turn episode is the old single request.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from posttrain.envs.env import Action, Env, InfraError, Observation
from posttrain.core.errors import ConfigError
from posttrain.envs.template import POLICY, ChatFormat, TemplateError
from posttrain.engine.protocol import SamplingParams
from posttrain.core.types import Limits, Task, Trajectory

STEP_GRACE_S = 5.0  # an env step may take its calls' tool_timeout plus this before the loop gives up on it
TRUNCATION_MARKER = "\n[... observation truncated: {n} more tokens ...]"


def turn_seed(seed: int | None, turn: int) -> int | None:
    if seed is None or turn == 0:
        return seed
    return (seed * 1_000_003 + turn * 7_919) % (2**63 - 1)


class _Builder:
    """The growing trajectory: ids with their mask, logprobs, versions and sources."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.sources: list[int] = []

    def add_context(self, ids: list[int], sources: list[int]) -> None:
        self.ids += ids
        self.sources += sources
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [-1] * len(ids)

    def add_sampled(self, ids, logprobs, version: int) -> None:
        self.ids += list(ids)
        self.sources += [POLICY] * len(ids)
        self.mask += [1] * len(ids)
        self.logprobs += list(logprobs)
        self.versions += [version] * len(ids)


def _cap_observation(fmt: ChatFormat, obs: Observation, max_tokens: int, stats: Counter) -> Observation:
    if len(obs.content.encode("utf-8")) < max_tokens:  # a token is at least one byte (+1: a leading "▁")
        return obs
    ids = fmt.tokenizer(obs.content, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_tokens:
        return obs
    stats["observations_truncated"] += 1
    kept = fmt.tokenizer.decode(ids[:max_tokens], skip_special_tokens=False)
    return replace(obs, content=kept + TRUNCATION_MARKER.format(n=len(ids) - max_tokens))


def _message(obs: Observation) -> dict:
    msg = {"role": obs.role, "content": obs.content}
    if obs.role == "tool" and obs.name:
        msg["name"] = obs.name
    return msg


def _checked_action(fmt: ChatFormat, text: str, tools) -> tuple[Action, list[Observation]]:
    """The turn parsed; calls that fail their schema (or parse) leave as error observations."""
    from posttrain.envs.env import error_observation

    if not tools or fmt.parser is None:
        return Action(text=text, content=text.strip()), []
    from posttrain.envs.tools.schema import check_call

    action = fmt.parser.parse(text)
    errors = [error_observation(e.kind, e.message) for e in action.errors]
    valid = []
    for call in action.tool_calls:
        problem = check_call(call, tools)
        if problem is None:
            valid.append(call)
        else:
            errors.append(error_observation(problem.kind, problem.message, call.name))
    return replace(action, tool_calls=tuple(valid), parsed=action.tool_calls), errors


async def run_episode(client, fmt: ChatFormat, env: Env, task: Task, params: SamplingParams, *,
                      version: int = 0, sampler_weights: str = "exact") -> Trajectory:
    """One episode of `task` in `env` (already made, reset here, closed by the caller)."""
    limits = task.limits or Limits()
    started = time.perf_counter()
    stats: Counter = Counter()
    b = _Builder()
    notes: dict[str, Any] = {}

    env_time = [0.0]  # seconds spent in the env (reset, steps): what `limits.seconds` bounds

    def left() -> float:
        return limits.seconds - env_time[0]

    t_reset = time.perf_counter()
    try:
        messages = await asyncio.wait_for(env.reset(task), max(left(), 0.001))
    finally:
        env_time[0] += time.perf_counter() - t_reset
    tools = list(getattr(env, "tools", None) or ())
    ids, sources, history, tools_kwargs = fmt.prompt(messages, tools)
    b.add_context(ids, sources)
    prompt_len = len(ids)
    cap = limits.max_total_tokens or 1 << 62  # None: the engine's context bounds it
    turns, stop, finish, last_ids = 0, None, "stop", []
    while stop is None:
        if turns >= limits.max_turns:
            stop = "max_turns"
            break
        budget = cap - len(b.ids)
        if budget <= 0:
            stop = "truncated"
            break
        max_tokens = min(params.max_tokens, limits.max_new_tokens, budget)
        request = replace(params, max_tokens=max_tokens, seed=turn_seed(params.seed, turns))
        if left() <= 0:
            stop = "timeout"
            break
        t0 = time.perf_counter()
        # bounded by tokens, never by a clock; a turn re-sent after a weight sync (rl/collect.py,
        # close: enough) is sampled by the new weights, and its tokens carry that version
        if hasattr(client, "generate_versioned"):
            completion, turn_version = await client.generate_versioned(b.ids, request)
            turn_version = max(version, turn_version)  # engines that keep no version report 0
        else:
            completion, turn_version = await client.generate(b.ids, request), version
        stats["engine_seconds"] += time.perf_counter() - t0
        b.add_sampled(completion.token_ids, completion.logprobs, turn_version)
        turns += 1
        finish = completion.finish_reason
        out = list(completion.token_ids)
        stop_text = None
        if finish == "stop" and out:
            stop_text = fmt.stop_text(out[-1])  # a stop token, not a stop string
            if stop_text is not None:
                out = out[:-1]
        turn_text = fmt.decode(out)
        last_ids = list(completion.token_ids)
        try:
            action, errors = _checked_action(fmt, turn_text, tools)
        except ConfigError as e:  # the task's own tool schema is broken: not the model's fault
            notes["env_error"], stop = str(e), "env_error"
            break
        stats["tool_calls"] += len(action.tool_calls) + len(errors)
        t1 = time.perf_counter()
        try:  # a turn whose every call failed is not an answer: the model gets the errors and goes on
            # an env answers a late call itself (tool_timeout error); this bound only catches one that hangs
            guard = min(left(), limits.tool_timeout * max(1, len(action.tool_calls)) + STEP_GRACE_S)
            obs, done, info = ([], False, {}) if errors and not action.tool_calls and turns < limits.max_turns else \
                await asyncio.wait_for(env.step(action), max(guard, 0.001))
        except asyncio.TimeoutError:
            stop = "timeout"
            break
        except InfraError:
            raise
        except Exception as e:  # noqa: BLE001 - an environment bug: the episode ends, unscored
            stats["env_errors"] += 1
            notes["env_error"] = f"{type(e).__name__}: {e}"
            stop = "env_error"
            break
        finally:
            env_time[0] += time.perf_counter() - t1
        stats["env_seconds"] += float(info.get("env_seconds", time.perf_counter() - t1))
        observations = [*errors, *obs]
        for o in observations:
            if o.error:
                stats[f"tool_errors/{o.error}"] += 1
        if finish == "length":
            stop = "truncated" if len(b.ids) >= cap else "max_tokens"
            break
        if done or not observations:
            stop = "done"
            break
        observations = [_cap_observation(fmt, o, limits.max_observation_tokens, stats) for o in observations]
        msgs = [_message(o) for o in observations]
        try:
            bridge_ids, bridge_sources = fmt.bridge(history, turn_text, stop_text, msgs, tools_kwargs)
        except TemplateError as e:
            notes["env_error"] = str(e)
            stop = "env_error"
            break
        if len(b.ids) + len(bridge_ids) >= cap:
            stop = "truncated"
            break
        b.add_context(bridge_ids, bridge_sources)
        history = [*history, {"role": "assistant", "content": turn_text}, *msgs]
    stats["turns"] = turns
    stats["episode_seconds"] = time.perf_counter() - started
    state = None
    if stop != "env_error":
        try:
            state = env.state()
        except Exception as e:  # noqa: BLE001
            stop, notes["env_error"] = "env_error", f"{type(e).__name__}: {e}"
    events = (f"env_error: {notes['env_error']}",) if "env_error" in notes else ()
    return Trajectory(
        task_id=task.id, token_ids=tuple(b.ids), loss_mask=tuple(b.mask), logprobs=tuple(b.logprobs),
        prompt_len=prompt_len, sampling=params, text=fmt.decode(last_ids, skip_special_tokens=True),
        policy_version=version, turns=turns,
        finish_reason="error" if stop in ("env_error", "infra_error") else finish,
        timings={"episode": stats["episode_seconds"]}, events=events, sampler_weights=sampler_weights,
        token_sources=tuple(b.sources), token_versions=tuple(b.versions), stop_reason=stop, final_state=state,
        stats={k: float(v) for k, v in stats.items()},
    )


def failed_episode(task: Task, params: SamplingParams, version: int, reason: str, why: str) -> Trajectory:
    """What an episode that never ran leaves (its env failed to start, or its infrastructure failed
    after the retries): no tokens, no score, the reason counted."""
    return Trajectory(task_id=task.id, token_ids=(), loss_mask=(), logprobs=(), prompt_len=0, sampling=params,
                      policy_version=version, turns=0, finish_reason="error", stop_reason=reason,
                      events=(f"{reason}: {why}",), stats={f"{reason}s": 1.0})
