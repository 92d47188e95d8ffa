"""A scripted engine for exact token-level episode checks, and a small tool env to run it against.

`TurnScript` replays fixed turns: the episode whose first request had seed s gets `script[s][t]`
at turn t (seeds are mapped through `turn_seed`), tokenized here and ended with the stop token,
cut at the request's max_tokens ("length"). Every request's prompt ids are kept, so a test can
check that turn t + 1 was prompted with exactly the ids of turn t plus its bridge.

`CalcEnv` ("test_calc"): tools add(a, b) and sleep(seconds); answers each call, done on a turn
without calls. Options (set on the class for a test) make it raise or fail its infrastructure.
"""

from __future__ import annotations

import asyncio

from posttrain.envs.env import InfraError, Observation, StepResult, register_env
from posttrain.envs.episode import turn_seed
from posttrain.engine.protocol import Completion
from posttrain.core.types import Score

TOOLS = [
    {"type": "function", "function": {"name": "add", "description": "add two integers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "sleep", "description": "wait", "parameters": {
        "type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}}},
    {"type": "function", "function": {"name": "echo", "description": "say it back", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
]


class TurnScript:
    version = 0

    def __init__(self, tokenizer, script: dict[int, list[str]], logprob: float = -0.5):
        self.tokenizer, self.script, self.logprob = tokenizer, script, logprob
        self.stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.by_seed = {turn_seed(s, t): (s, t) for s, turns in script.items() for t in range(len(turns))}
        self.prompts: list[tuple[int, int, list[int]]] = []  # (episode seed, turn, prompt ids)

    def turn_ids(self, seed: int, turn: int) -> list[int]:
        text = self.script[seed][turn]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.stop_id]

    def generate(self, prompts, params):
        out = []
        for prompt, p in zip(prompts, params):
            s, t = self.by_seed[p.seed]
            self.prompts.append((s, t, list(prompt)))
            ids = self.turn_ids(s, t)
            finish = "stop"
            if len(ids) > p.max_tokens:
                ids, finish = ids[: p.max_tokens], "length"
            out.append(Completion(tuple(ids), (self.logprob,) * len(ids), finish))
        return out

    def update_weights(self, state_dict, version: int) -> None:
        self.version = version


class CalcEnv:
    raise_on_step: BaseException | None = None
    infra_on_reset = False
    made = 0

    def __init__(self, resources):
        type(self).made += 1
        self.tools = TOOLS
        self.calls: list[dict] = []
        self.closed = False

    async def reset(self, task):
        if type(self).infra_on_reset:
            raise InfraError("sandbox down")
        return list(task.prompt)

    async def step(self, action):
        if type(self).raise_on_step is not None:
            raise type(self).raise_on_step
        obs = []
        for call in action.tool_calls:
            self.calls.append({"name": call.name, "arguments": dict(call.arguments)})
            if call.name == "add":
                obs.append(Observation(str(call.arguments["a"] + call.arguments["b"]), name="add"))
            elif call.name == "sleep":
                await asyncio.sleep(float(call.arguments["seconds"]))
                obs.append(Observation("slept", name="sleep"))
            else:
                obs.append(Observation(str(call.arguments["text"]), name="echo"))
        return StepResult(obs, not action.tool_calls, {"env_seconds": 0.0})

    def state(self):
        return {"calls": self.calls}

    def score(self, task, state):
        return [Score(float(any(c["name"] == "add" for c in state["calls"])), "env_score")]

    async def close(self):
        self.closed = True


@register_env("test_calc")
def make(resources):
    return CalcEnv(resources)


class ChatEnv:
    """("test_chat") the env speaks as the user for `turns` turns, whatever the model says."""

    turns = 3

    def __init__(self, resources):
        self.tools, self.step_no = [], 0

    async def reset(self, task):
        return list(task.prompt)

    async def step(self, action):
        self.step_no += 1
        done = self.step_no >= type(self).turns
        return StepResult([] if done else [Observation(f"go on ({self.step_no})", role="user")], done, {})

    def state(self):
        return {"steps": self.step_no}

    def score(self, task, state):
        return [Score(1.0, "env_score")]

    async def close(self):
        pass


@register_env("test_chat")
def make_chat(resources):
    return ChatEnv(resources)
