"""The newcomer's path: every name `posttrain tasks list --json` marks usable for rl and available
trains with default options — one RL step over all of them at once on the tiny model (each domain's
own options, holdout and verifiers; only the eval items scored are set, as a user's config would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.recipes import rl
from posttrain.telemetry.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def rl_names() -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "tasks", "list", "--json"], cwd=REPO,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    rows = json.loads(out.stdout)
    assert {"name", "kind", "uses", "available"} <= set(rows[0])
    return [r for r in rows if "rl" in r["uses"] and r["available"]]


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory, tiny_tokenizer):
    """The tiny model with room for the environments' and BFCL's long prompts."""
    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family="qwen2", seed=0, max_position_embeddings=8192)
    return str(save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("tiny_every") / "model"))


def test_one_rl_step_over_every_usable_name_with_defaults(tmp_path, long_model_dir):
    names = rl_names()
    kinds = {r["kind"] for r in names}
    assert "group" not in kinds and len(names) >= 100, (kinds, len(names))
    tasks = [{"name": r["name"], "eval_tasks": 2, "quota": 1} for r in names]  # one group each
    cfg = load_config(RLConfig, None, [
        f"model.path={long_model_dir}", f"out_dir={tmp_path / 'run'}", f"tasks={json.dumps(tasks)}",
        f"rollout.prompts_per_step={len(tasks)}", "rollout.samples_per_prompt=2", "rollout.max_tokens=8",
        "train.steps=1", "train.save_every=1", "logging.tensorboard=false", "logging.progress=false",
    ])
    rl.run(cfg)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    step = next(r for r in rows if r["step"] == 1)
    ran = {k.split("/", 1)[1] for k in step if k.startswith("pass_rate/")}
    missing = {r["name"] for r in names} - ran
    assert not missing, f"{len(missing)} domains drew no group in the step: {sorted(missing)[:10]}"
