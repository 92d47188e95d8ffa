"""`posttrain eval` end to end on the tiny fixture model (random init, so scores are near 0)."""

from __future__ import annotations

import json

import pytest

from posttrain.config import EvalConfig
from posttrain.errors import ConfigError
from posttrain.eval import harness


def _check(result, path, domains, samples):
    on_disk = json.loads(path.read_text())
    assert on_disk == result
    assert set(on_disk) == {"model", "samples", "seed", "domains", "overall"}
    keys = {"pass@1"} | ({f"pass@{samples}"} if samples > 1 else set())
    assert set(on_disk["overall"]) == keys
    assert set(on_disk["domains"]) == set(domains)
    for name, row in on_disk["domains"].items():
        assert row["n"] == domains[name]
        assert set(row) == keys | {"n", "mean_length"}
        for key in keys:
            assert 0.0 <= row[key] <= 1.0
        assert 0 < row["mean_length"] <= 8
    if samples > 1:
        assert on_disk["overall"][f"pass@{samples}"] >= on_disk["overall"]["pass@1"]


def test_eval_greedy_writes_json_and_completions(tiny_model_dir, tmp_path):
    out = tmp_path / "ev" / "base.json"
    cfg = EvalConfig(model=tiny_model_dir, tasks="basic_arithmetic:3,chain_sum", n_per_domain=2,
                     max_new_tokens=8, out=str(out))
    result = harness.run(cfg)
    _check(result, out, {"basic_arithmetic": 3, "chain_sum": 2}, samples=1)
    assert result["model"] == tiny_model_dir and result["seed"] == 1_000_000 and result["samples"] == 1
    lines = [json.loads(x) for x in (tmp_path / "ev" / "base.completions.jsonl").read_text().splitlines()]
    assert len(lines) == 5
    assert {"id", "domain", "completion", "extracted", "score"} <= set(lines[0])
    assert lines[0]["id"] == "basic_arithmetic/1000000"
    # greedy is deterministic
    again = harness.run(cfg.model_copy(update={"out": str(tmp_path / "again.json")}))
    assert again["domains"] == result["domains"]


def test_eval_k_samples(tiny_model_dir, tmp_path):
    out = tmp_path / "k.json"
    cfg = EvalConfig(model=tiny_model_dir, tasks="chain_sum:3", samples=3, max_new_tokens=6,
                     batch_size=4, out=str(out))
    result = harness.run(cfg)
    _check(result, out, {"chain_sum": 3}, samples=3)
    lines = (tmp_path / "k.completions.jsonl").read_text().splitlines()
    assert len(lines) == 9


def test_eval_unknown_domain_fails_before_loading(tmp_path):
    cfg = EvalConfig(model=str(tmp_path / "nope"), tasks="chain_sum,not_a_domain", out=str(tmp_path / "x.json"))
    with pytest.raises(ConfigError, match="not_a_domain"):
        harness.run(cfg)
    assert not (tmp_path / "x.json").exists()
