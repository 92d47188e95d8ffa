"""The environment seam: the `Env` protocol, what crosses it, and the plain registry of environments.

    env = make_env(task.env, resources)           # ENVS[name](resources), one instance per episode
    messages = await env.reset(task)              # chat messages up to the first assistant turn
    obs, done, info = await env.step(action)      # the parsed turn: text + tool calls (+ parse errors)
    state = env.state()                           # JSON-able final state, saved with the trajectory
    scores = env.score(task, state)               # re-runnable from the saved state alone
    await env.close()                             # always called, also after a failure

An environment never sees token ids: `run_episode` (envs/episode.py) samples turns, parses them
with the model's tool-call parser (envs/tools/parsers.py) and hands the env an `Action`; the env
answers with `Observation`s, which enter the trajectory only as bridge tokens (mask 0).

Failures are typed. `InfraError` (the sandbox is down, a worker died) is the infrastructure's
fault: the episode is retried, then dropped and counted, never scored as a model failure. Any
other exception from an env is `env_error` (an environment bug), also excluded from scoring. A
bad tool call is neither: it becomes an error observation with its kind (ToolError kinds below).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

from posttrain.core.errors import ConfigError
from posttrain.core.registry import Registry
from posttrain.core.types import Message, Score, Task
from posttrain.sandbox.default import get_sandbox

# why an episode ended
STOP_REASONS = ("done", "max_turns", "max_tokens", "truncated", "timeout", "env_error", "infra_error")
# kinds of tool-call errors, counted per domain (`tool_errors/KIND`)
TOOL_ERROR_KINDS = ("malformed", "unknown_tool", "bad_arguments", "tool_failed", "tool_timeout")


class InfraError(RuntimeError):
    """The infrastructure failed (sandbox down, env worker died): retry, then drop and count."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]  # parsed JSON object (or pythonic keyword arguments)
    id: str = ""  # "call_0", ... within one turn


@dataclass(frozen=True)
class ParseError:
    kind: str  # one of TOOL_ERROR_KINDS ("malformed" from a parser)
    message: str  # one line, shown to the model as the error observation
    raw: str = ""  # the offending text


@dataclass(frozen=True)
class Action:
    """One sampled assistant turn as the env sees it."""

    text: str  # the turn's decoded text, special tokens removed
    tool_calls: tuple[ToolCall, ...] = ()
    errors: tuple[ParseError, ...] = ()  # calls the parser could not read (each becomes an error observation)
    content: str = ""  # the text outside tool-call markup (the final answer when there are no calls)
    # every call the parser read, in order, before the loop's schema checks removed the invalid
    # ones from `tool_calls` (a checker that judges decoded calls, as BFCL's does, reads these)
    parsed: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Observation:
    content: str
    role: str = "tool"  # "tool" (a tool's result) | "user" (the env speaks, e.g. a follow-up question)
    name: str = ""  # the tool's name, for role "tool"
    error: str = ""  # a TOOL_ERROR_KINDS kind when this reports a failed call, else ""


class StepResult(NamedTuple):
    observations: list[Observation]
    done: bool
    info: dict  # plain numbers/strings: "env_seconds", per-call details ...


@runtime_checkable
class Env(Protocol):
    tools: Sequence[Mapping[str, Any]]  # OpenAI-style function schemas ({"type": "function", "function": {...}})

    async def reset(self, task: Task) -> list[Message]: ...

    async def step(self, action: Action) -> StepResult: ...

    def state(self) -> Any: ...  # JSON-able; what `score` needs, saved as Trajectory.final_state

    def score(self, task: Task, state: Any) -> list[Score]: ...

    async def close(self) -> None: ...


@dataclass
class Resources:
    """What environments share within a run: the sandbox and the executor for blocking work."""

    sandbox_factory: Callable[[], Any] | None = None  # -> posttrain.sandbox.Sandbox, made once on first use
    options: Mapping[str, Any] = field(default_factory=dict)  # rollout.env_options
    _sandbox: Any = None

    def sandbox(self):
        if self._sandbox is None:
            if self.sandbox_factory is None:
                self._sandbox = get_sandbox()
            else:
                self._sandbox = self.sandbox_factory()
        return self._sandbox

    busy_seconds: float = 0.0  # worker-seconds of blocking env work so far (the scheduler's sandbox_busy)

    @property
    def workers(self) -> int:
        """Threads of the loop's default executor (asyncio's default size)."""
        return min(32, (os.cpu_count() or 1) + 4)

    async def run_blocking(self, fn: Callable, *args):
        """fn(*args) in a worker thread, so episodes waiting on tools never block the loop."""
        def timed():
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.busy_seconds += time.perf_counter() - started

        return await asyncio.get_running_loop().run_in_executor(None, timed)


EnvFactory = Callable[[Resources], Env]
# name -> factory, or "module:factory" (single_turn: envs/__init__.py; the rest: posttrain/domains/<name>/)
ENVS = Registry("environment", error=ConfigError)


def register_env(name: str, factory: EnvFactory | str | None = None):
    """register_env(name)(factory) as a decorator, or register_env(name, factory_or_"module:factory")."""
    return ENVS.register(name, factory)


def make_env(name: str, resources: Resources) -> Env:
    return ENVS.get(name)(resources)


def error_observation(kind: str, message: str, name: str = "") -> Observation:
    """What the model sees for a failed call: one line naming the problem."""
    if kind not in TOOL_ERROR_KINDS:
        raise ValueError(f"unknown tool error kind {kind!r}")
    return Observation(content=f"Error ({kind}): {message}", role="tool", name=name, error=kind)
