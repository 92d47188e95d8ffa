"""A scripted Engine for exact eval checks: each prompt gets fixed completions, in request order."""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from posttrain.envs.single_turn import prompt_ids
from posttrain.engine.protocol import Completion, SamplingParams
from posttrain.core.types import Task


class ScriptedEngine:
    """The j-th request for a task's prompt returns `script[task.id][j]` (text, tokenized here),
    finishing with "stop"; every request's SamplingParams is kept in `requests`."""

    version = 0

    def __init__(self, tokenizer, tasks: Sequence[Task], script: Mapping[str, Sequence[str]]):
        self.tokenizer = tokenizer
        self.by_prompt = {tuple(prompt_ids(tokenizer, t)): t.id for t in tasks}
        assert len(self.by_prompt) == len(tasks), "scripted tasks need distinct prompts"
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: dict[str, int] = defaultdict(int)
        self.requests: list[tuple[str, SamplingParams]] = []

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, params) -> list[Completion]:
        out = []
        for prompt, p in zip(prompts, params):
            task_id = self.by_prompt[tuple(prompt)]
            j = self.calls[task_id]
            self.calls[task_id] += 1
            self.requests.append((task_id, p))
            ids = self.encode(self.script[task_id][j])
            out.append(Completion(token_ids=ids, logprobs=(0.0,) * len(ids), finish_reason="stop"))
        return out

    def update_weights(self, state_dict, version: int) -> None:
        self.version = version
