"""One RL run mixing a single-turn domain and a multi-turn environment domain on the tiny model:
both train, the multi-turn trajectories carry bridges (mask 0) between sampled turns, and the
step logs the per-domain episode metrics (turns, stop reasons, tool-call error rates, env seconds)."""

from __future__ import annotations

import json

from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.recipes import rl
from posttrain.tasks.registry import SOURCES, register_source
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.types import Limits, Task
from tests.recipes.rl_toy import overrides, write_tasks
import tests.unit.envs.scripted as scripted  # noqa: F401  (registers the test_chat env)


def chat_tasks(n, seed, options):
    return [Task(id=f"chat3/{i}", domain="chat3", prompt=({"role": "user", "content": f"Tell me about {i}."},),
                 reference=None, verifiers=("env_score",), env="test_chat",
                 limits=Limits(max_turns=3, max_new_tokens=6)) for i in range(n or 24)]


if "chat3" not in SOURCES:
    register_source("chat3", size=24, description="three-turn chat (tests)")(chat_tasks)


def test_one_run_mixes_single_and_multi_turn_domains(tmp_path, tiny_model_dir, monkeypatch):
    # the env's score: the last turn's first token even (a random policy: half the time, so groups have signal)
    monkeypatch.setattr(scripted.ChatEnv, "score", lambda self, task, state: [
        scripted.Score(float(state["first"] % 2 == 0), "env_score")])
    monkeypatch.setattr(scripted.ChatEnv, "state", lambda self: {"steps": self.step_no, "first": self.first})
    original_step = scripted.ChatEnv.step

    async def step(self, action):
        self.first = len(action.text)
        return await original_step(self, action)

    monkeypatch.setattr(scripted.ChatEnv, "step", step)
    # the random tiny model rarely samples <|im_end|>: a turn also ends at a quarter of the vocabulary
    eos = rl.stop_ids
    monkeypatch.setattr(rl, "stop_ids", lambda tok, model=None: sorted(set(eos(tok)) | set(range(3, 400, 4))))
    tasks = write_tasks(tmp_path / "toy.jsonl")
    domains = [{"name": "toy", "path": tasks, "eval_tasks": 4}, {"name": "chat3", "eval_tasks": 4}]
    args = [a for a in overrides(tiny_model_dir, tasks, tmp_path / "run", **{"train.steps": 2, "train.eval_every": 2})
            if not a.startswith("tasks=")]
    cfg = load_config(RLConfig, None, args + [f"tasks={json.dumps(domains)}"])
    rl.run(cfg)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert len(rows) == 2
    for key in ("episode/chat3/turns", "episode/chat3/tokens", "episode/chat3/env_seconds",
                "episode/chat3/tool_error_rate/malformed", "episodes/infra_error", "pass_rate/chat3", "pass_rate/toy"):
        assert key in rows[0], key
    assert "episode/toy/turns" not in rows[0]  # single-turn text domains add no episode metrics
    stops = sum(v for k, v in rows[0].items() if k.startswith("episode/chat3/stop/"))
    assert abs(stops - 1.0) < 1e-9 and rows[0]["episode/chat3/turns"] > 1
    logged = [json.loads(line) for line in (tmp_path / "run" / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    chat = [r for r in logged if r["domain"] == "chat3"]
    toy = [r for r in logged if r["domain"] == "toy"]
    assert chat and toy and all(r["turns"] == 1 for r in toy)
    assert any(r["turns"] == 3 and r["stop_reason"] == "done" for r in chat)
