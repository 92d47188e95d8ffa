"""configs/smollm2-agents.yaml (`make demo-agents`) end to end on a tiny local model: SFT on oracle episodes of
the five agent domains, one RL step over all of them with curricula, the held-out and regression suites
on start / sft / rl, the report. The overrides only shrink it (tasks, tokens, steps); the stages, domains,
options and suites are the config's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posttrain.config.base import load_config
from posttrain.config.pipeline import PipelineConfig
from posttrain.recipes import pipeline
from posttrain.telemetry.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
DOMAINS = {"bfcl_simple_python", "sql", "document", "cad", "terminal_gen"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_agents_recipe_runs_every_stage_and_compares_every_domain(tmp_path, monkeypatch, tiny_tokenizer):
    from posttrain.train.tiny import make_tiny_model, save_model

    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "cache"))  # terminal_gen writes its task folders here
    # the tiny tokenizer spends about a token per character: episodes and document prompts run to ~5k tokens
    model = make_tiny_model(tiny_tokenizer, family="qwen2", seed=0, max_position_embeddings=8192)
    model_dir = str(save_model(model, tiny_tokenizer, tmp_path / "model"))
    run_dir = tmp_path / "agents"
    overrides = {
        "run_dir": run_dir, "sft.model.path": model_dir,
        "sft.data.train": "episodes:sql,document,cad,terminal_gen,bfcl_simple_python:5",
        "sft.data.eval_fraction": 0.0, "sft.data.max_seq_len": 8192, "sft.train.row_tokens": 8192,
        "sft.train.max_tokens_per_microbatch": 8192, "sft.train.epochs": 1,
        "rl.rollout.prompts_per_step": 5, "rl.rollout.samples_per_prompt": 2, "rl.rollout.max_tokens": 16,
        "rl.train.steps": 1, "rl.train.max_tokens_per_microbatch": 8192,
        "eval.suites.regression.tasks": "[gcd:2, lcm:2, count_bits:2]",
        "eval.suites.regression.max_new_tokens": 8, "eval.suites.agents.max_new_tokens": 16,
    }
    config = yaml.safe_load((ROOT / "configs" / "smollm2-agents.yaml").read_text())
    suite_tasks = [{**t, "n": 2} for t in config["eval"]["suites"]["agents"]["tasks"]]  # the config's, 2 tasks each
    overrides["eval.suites.agents.tasks"] = json.dumps(suite_tasks)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "smollm2-agents.yaml",
                      [f"{k}={v}" for k, v in overrides.items()])
    assert {t.name for t in cfg.rl.tasks} == DOMAINS
    assert all(t.curriculum is not None for t in cfg.rl.tasks if t.name != "bfcl_simple_python")
    pipeline.run(cfg)

    for path in ("config.yaml", "sft/final", "sft/metrics.jsonl", "rl/final", "rl/metrics.jsonl", "report.html",
                 *(f"eval/{s}/{m}.json" for s in ("agents", "regression") for m in ("start", "sft", "rl")),
                 "eval/agents/compare.json", "eval/regression/compare.json"):
        assert (run_dir / path).exists(), path
    sft_rows = read_metrics(run_dir / "sft" / "metrics.jsonl")
    assert sft_rows[0]["train_examples"] >= 3 and any("loss" in r for r in sft_rows)
    rl_rows = read_metrics(run_dir / "rl" / "metrics.jsonl")
    assert any(r.get("step") == 1 for r in rl_rows)

    agents = json.loads((run_dir / "eval" / "agents" / "compare.json").read_text())
    for a, b in (("start", "sft"), ("sft", "rl")):
        compared = {d["domain"] for d in agents["deltas"] if (d["from"], d["to"]) == (a, b)}
        assert DOMAINS <= compared, (a, b, compared)
    held_out = json.loads((run_dir / "eval" / "agents" / "rl.json").read_text())
    assert set(held_out["domains"]) == DOMAINS and all(d["n"] == 2 for d in held_out["domains"].values())
    regression = json.loads((run_dir / "eval" / "regression" / "compare.json").read_text())
    assert {d["domain"] for d in regression["deltas"]} >= {"gcd", "lcm", "count_bits"}
    assert len(regression["gates"]) == 1  # the 2-point regression gate was checked (rl against start)
