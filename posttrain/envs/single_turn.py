"""The single-turn environment: a task's chat prompt in, one sampled assistant turn out.

A single-turn task is an episode of one turn (envs/episode.py runs it like any other): `reset`
gives the task's prompt, the first `step` ends the episode. Its verifiers judge the turn's text.
When the task offers tools (`metadata["tools"]`, e.g. BFCL's function-calling tasks), the turn
was parsed with the model's tool-call parser and `state()` holds the calls it made, so a checker
reads the calls exactly as the run parsed them (every decoded call, also those that failed the
loop's schema check: the checker judges them itself):

    {"tool_calls": [{"name": ..., "arguments": {...}}, ...], "parse_errors": ["..."]}

`prompt_ids(tokenizer, task)` is the prompt as every episode renders it (chat template,
add_generation_prompt, tools when the task has them, no added special tokens).
"""

from __future__ import annotations

from typing import Any

from posttrain.envs.env import Action, Resources, StepResult
from posttrain.core.types import Message, Score, Task


def prompt_ids(tokenizer, task: Task, parser=None) -> list[int]:
    from posttrain.envs.template import ChatFormat

    tools = task.metadata.get("tools") if task.metadata else None
    if tools and parser is None:  # the parser rollout picks by default (`rollout.tool_parser: auto`)
        from posttrain.envs.tools.parsers import pick_parser

        parser = pick_parser(tokenizer)
    return ChatFormat.of(tokenizer, parser).prompt(task.prompt, tools)[0]


class SingleTurnEnv:
    def __init__(self, resources: Resources):
        self.tools: list = []
        self._state: Any = None

    async def reset(self, task: Task) -> list[Message]:
        self.tools = list(task.metadata.get("tools") or ()) if task.metadata else []
        return list(task.prompt)

    async def step(self, action: Action) -> StepResult:
        if self.tools:
            self._state = {
                "tool_calls": [{"name": c.name, "arguments": dict(c.arguments)}
                               for c in (action.parsed or action.tool_calls)],
                "parse_errors": [e.message for e in action.errors],
            }
        return StepResult([], True, {})

    def state(self) -> Any:
        return self._state

    def score(self, task: Task, state: Any) -> list[Score]:
        raise NotImplementedError("single-turn tasks are scored by their verifiers (Task.verifiers)")

    async def close(self) -> None:
        pass


def make(resources: Resources) -> SingleTurnEnv:
    return SingleTurnEnv(resources)
