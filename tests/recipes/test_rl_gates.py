"""Suites and regression gates inside the training loops, on the tiny model and the toy task.

The gated suite is the starting model's own greedy completions (a `regex` fullmatch on each): the
starting model scores 1.0 on it, and training changes its completions (the toy reward moves the
first token), so the suite's pass@1 drops: a real regression, caught by each `on_fail` action.
Baseline first: the step-0 row of metrics.jsonl holds the suite's numbers before any update."""

from __future__ import annotations

import json
import re

import pytest
import torch

from posttrain.checkpoint import latest_checkpoint
from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.config.sft import SFTConfig
from posttrain.config.eval import EvalConfig
from posttrain.core.errors import GateError
from posttrain.eval import run as harness
from posttrain.recipes import rl, sft
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model
from posttrain.verifiers.monitors import read_alerts
from tests.recipes.rl_toy import overrides, write_tasks

PROMPTS = [f"Say something about {i} and {i * 7 % 13}." for i in range(8)]


@pytest.fixture(scope="module")
def own_suite(tmp_path_factory, tiny_model_dir) -> str:
    folder = tmp_path_factory.mktemp("own")
    probe = folder / "probe.jsonl"
    probe.write_text("".join(json.dumps({"prompt": p, "answer": "", "verifier": "regex", "metadata": {
        "verifier_options": {"regex": {"pattern": ".*", "mode": "search"}}}}) + "\n" for p in PROMPTS))
    harness.run(EvalConfig(model=tiny_model_dir, tasks=str(probe), max_new_tokens=6, out=str(folder / "p.json")),
                table=False)
    done = [json.loads(x)["completion"] for x in (folder / "p.completions.jsonl").read_text().splitlines()]
    path = folder / "own.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "answer": "", "verifier": "regex", "metadata": {
        "verifier_options": {"regex": {"pattern": r"\A" + re.escape(c) + r"\Z", "mode": "search"}}}}) + "\n"
        for p, c in zip(PROMPTS, done)))
    return str(path)


def _eval(own: str, on_fail: str) -> dict:
    return {"eval.suites": json.dumps({"own": {"tasks": [own], "max_new_tokens": 6}}),
            "eval.gates": json.dumps([{"suite": "own", "max_drop": 0.1, "on_fail": on_fail}])}


def _rl_cfg(tmp_path, model_dir, own, on_fail) -> RLConfig:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    extra = {"train.steps": 8, "train.eval_every": 2, "train.save_every": 4, "optim.lr": 1e-2,
             "rollout.samples_per_prompt": 8, **_eval(own, on_fail)}
    return load_config(RLConfig, None, overrides(model_dir, tasks, tmp_path / "run", **extra))


def _suite_rows(run_dir):
    return [(r["step"], r["suite/own/pass@1"]) for r in read_metrics(run_dir / "metrics.jsonl") if "suite/own/pass@1" in r]


def test_rl_alert_gate_logs_the_regression_and_the_run_goes_on(tmp_path, tiny_model_dir, own_suite):
    final = rl.run(_rl_cfg(tmp_path, tiny_model_dir, own_suite, "alert"))
    rows = _suite_rows(tmp_path / "run")
    assert rows[0] == (0, 1.0) and [s for s, _ in rows] == [0, 2, 4, 6, 8]  # baseline first, then every eval
    dropped = [s for s, v in rows if v < 1.0 - 0.1]
    assert dropped, rows  # training moved the completions
    alerts = [a for a in read_alerts(tmp_path / "run") if a["kind"] == "gate"]
    assert [a["step"] for a in alerts] == dropped and "gate own/pass@1 max_drop 0.1 failed" in alerts[0]["message"]
    assert final.is_dir()


def test_rl_stop_gate_checkpoints_and_fails_naming_the_gate(tmp_path, tiny_model_dir, own_suite):
    with pytest.raises(GateError, match=r"gate failed: own/pass@1 max_drop 0.1: step \d+ "):
        rl.run(_rl_cfg(tmp_path, tiny_model_dir, own_suite, "stop"))
    first_drop = next(s for s, v in _suite_rows(tmp_path / "run") if v < 0.9)
    state = json.loads((latest_checkpoint(tmp_path / "run") / "state.json").read_text())
    assert state["step"] == first_drop and state["suites"]["baseline"]["suite/own/pass@1"] == 1.0
    assert not (tmp_path / "run" / "final").exists()


def test_rl_rollback_gate_ships_the_best_model_that_passed(tmp_path, tiny_model_dir, own_suite):
    final = rl.run(_rl_cfg(tmp_path, tiny_model_dir, own_suite, "rollback"))
    rows = _suite_rows(tmp_path / "run")
    assert rows[-1][1] < 0.9 and all(v >= 0.9 for _, v in rows[:-1])  # stopped at the first failed gate
    best = max(range(len(rows) - 1), key=lambda i: (rows[i][1], -i))
    state = json.loads((latest_checkpoint(tmp_path / "run") / "state.json").read_text())
    assert state["suites"]["best"] == {"step": rows[best][0], "value": rows[best][1]}
    if rows[best][0] == 0:  # the best is the starting model: the shipped weights are its weights
        start, shipped = load_model(tiny_model_dir).state_dict(), load_model(str(final)).state_dict()
        assert all(torch.equal(start[k], shipped[k]) for k in start)
    assert (tmp_path / "run" / "best" / "config.json").is_file()


def test_sft_evaluates_suites_before_the_first_update(tmp_path, tiny_model_dir, own_suite):
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": p}, {"role": "assistant",
                                                                                     "content": "zz " * 5}]}) + "\n"
                            for p in PROMPTS * 4))
    cfg = load_config(SFTConfig, None, [f"model.path={tiny_model_dir}", f"out_dir={tmp_path / 'sft'}",
                                        f"data.train={data}", "data.eval_fraction=0", "train.max_steps=4",
                                        "train.eval_every=2", "optim.lr=1e-2", "logging.tensorboard=false",
                                        "logging.progress=false", *[f"{k}={v}" for k, v in _eval(own_suite, "alert").items()]])
    sft.run(cfg)
    rows = _suite_rows(tmp_path / "sft")
    assert rows[0] == (0, 1.0) and [s for s, _ in rows] == [0, 2, 4]
    assert rows[-1][1] < 1.0  # learning "zz" moved the completions away from the starting model's
