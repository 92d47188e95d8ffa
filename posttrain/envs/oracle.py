"""An engine that plays generated domains' oracles: each episode's scripted turns, as token ids.

    engine = OracleEngine(tokenizer, fmt.parser, {seed: oracle_turns(task), ...})
    trajs = rollout(engine, tokenizer, tasks, [1] * len(tasks), params, seeds=list(script), version=0)

Episode seed s (the first request's seed) gets turn t of `script[s]` at its t-th request (turn seeds
map back through `turn_seed`): the turn's calls written in the model's tool-call format by the run's
parser (`format_calls`), tokenized once here, ended with the tokenizer's end-of-turn token. The loop
then parses, checks, steps the env and bridges exactly as it does for a model, so a generated
domain's oracle played through it must score what it scores when its Actions go straight to
`env.step` (tasks/validate.py `play_oracle`): benchmarks/envs.py times the difference, the tests
check the scores. A request for a turn past the script ends with an empty turn. It is a
`SteppingEngine`, as the paged engine is: each request joins at the next `step`, which returns its
whole turn at once (an engine much faster than any environment), so the loop's own work is what
the benchmark sees.
"""

from __future__ import annotations

import threading
from typing import Mapping, Sequence

from posttrain.envs.episode import turn_seed
from posttrain.engine.protocol import Completion, StepOutput


class OracleEngine:
    version = 0
    weights_precision = "exact"

    def __init__(self, tokenizer, parser, script: Mapping[int, Sequence], end_token: str = "<|im_end|>"):
        stop = tokenizer.convert_tokens_to_ids(end_token)
        if stop is None or stop == tokenizer.unk_token_id:
            raise ValueError(f"OracleEngine: the tokenizer has no {end_token!r} token")
        self.turns: dict[int, tuple[int, ...]] = {}
        for seed, turns in script.items():
            for t, turn in enumerate(turns):
                text = parser.format_calls(turn.calls, turn.content) if turn.calls else turn.content
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                self.turns[turn_seed(seed, t)] = tuple(ids) + (stop,)
        self.stop_id = stop
        self.requests = 0
        self._lock = threading.Lock()
        self._queue: list[tuple[int, object]] = []
        self._next_id = 0

    def _turn(self, p) -> tuple[tuple[int, ...], str]:
        self.requests += 1
        ids = self.turns.get(p.seed, (self.stop_id,))
        if len(ids) > p.max_tokens:
            return ids[: p.max_tokens], "length"
        return ids, "stop"

    def generate(self, prompts, params) -> list[Completion]:
        return [Completion(ids, (0.0,) * len(ids), why) for ids, why in (self._turn(p) for p in params)]

    def add_request(self, prompt_ids, params) -> int:
        with self._lock:
            self._next_id += 1
            self._queue.append((self._next_id, params))
            return self._next_id

    def abort(self, request_id: int) -> None:
        with self._lock:
            self._queue = [(i, p) for i, p in self._queue if i != request_id]

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._queue)

    def step(self) -> list[StepOutput]:
        with self._lock:
            batch, self._queue = self._queue, []
        out = []
        for rid, p in batch:
            ids, why = self._turn(p)
            out.append(StepOutput(rid, list(ids), [0.0] * len(ids), True, why))
        return out

    def update_weights(self, state_dict, version: int) -> None:
        self.version = version
