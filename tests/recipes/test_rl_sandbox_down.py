"""A remote sandbox that cannot be reached: the code verifier retries, then the run degrades (its samples
are left unscored, nothing is trained on them) and reports it, every step, and finishes."""

from __future__ import annotations

import json
import socket

from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.recipes import rl
from posttrain.telemetry.metrics import read_metrics
from posttrain.sandbox.default import set_sandbox
from tests.recipes.rl_toy import overrides


def test_unreachable_remote_sandbox_is_retried_then_reported_and_the_run_goes_on(tmp_path, tiny_model_dir, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tasks = tmp_path / "code.jsonl"
    with tasks.open("w") as f:
        for i in range(16):
            f.write(json.dumps({"prompt": f"Write f(x) returning x + {i}.", "verifier": "code",
                                "answer": {"tests": [f"assert f(1) == {1 + i}"], "entry_point": "f"}}) + "\n")
    args = overrides(tiny_model_dir, str(tasks), tmp_path / "run", **{
        "train.steps": 2, "train.eval_every": 100, "rollout.prompts_per_step": 2, "rollout.samples_per_prompt": 2,
        "reward.sandbox_url": f"http://127.0.0.1:{port}", "reward.sandbox_retries": 2, "reward.sandbox_backoff_s": 0.01,
        "dynamic_sampling.enabled": "false", "buffer.replay_ratio": 0.0})
    args = [a.replace('"name": "toy"', '"name": "code"').replace('"eval_tasks": 8', '"eval_tasks": 2') for a in args]
    try:
        rl.run(load_config(RLConfig, None, args))
    finally:
        set_sandbox(None)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["verifier_errors"] == 4 and r["unscored_samples"] == 4 and r["samples"] == 0 for r in rows)
    err = capsys.readouterr().err
    assert "verifier errors" in err and "3 attempts" in err, err[-2000:]
