"""`posttrain eval --suite NAME --model A --model B` end to end on two tiny real models: one
result per model, compare.json with paired tests, the suite's gate failing the command (exit 2,
the gate named) when the second model drops, and bad input refused before anything is written.

The task file is built from model A's own greedy completions (a `regex` fullmatch on each), so A
scores 1.0 on it and any other model far less: a real drop, through the real engine and verifier."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from posttrain.config.eval import EvalConfig
from posttrain.eval import run as harness
from posttrain.eval.compare_models import load_suites, run_suite

CLI = [sys.executable, "-m", "posttrain.cli"]
PROMPTS = ["What is 2 + 3?", "Name a colour.", "Count to four.", "Say hello.", "What is 9 - 4?", "Spell cat."]


@pytest.fixture(scope="module")
def other_model(tmp_path_factory, tiny_tokenizer):
    """The fixture model with its weights shaken (seeded): its greedy completions differ."""
    import torch

    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family="qwen2", seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.std().clamp_min(0.02) * 2)
    return str(save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("other") / "model"))


@pytest.fixture(scope="module")
def own_tasks(tmp_path_factory, tiny_model_dir):
    """Tasks that model A passes exactly: each prompt's pattern is A's greedy completion."""
    folder = tmp_path_factory.mktemp("suite")
    probe = folder / "probe.jsonl"
    probe.write_text("".join(json.dumps({"prompt": p, "answer": "", "verifier": "regex", "metadata": {
        "verifier_options": {"regex": {"pattern": ".*", "mode": "search", "flags": ["DOTALL"]}}}}) + "\n" for p in PROMPTS))
    harness.run(EvalConfig(model=tiny_model_dir, tasks=str(probe), max_new_tokens=12, out=str(folder / "p.json")),
                table=False)
    done = [json.loads(x) for x in (folder / "p.completions.jsonl").read_text().splitlines()]
    path = folder / "own.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "answer": "", "verifier": "regex", "metadata": {
        "verifier_options": {"regex": {"pattern": r"\A" + re.escape(d["completion"]) + r"\Z", "mode": "search"}}}}) + "\n"
        for p, d in zip(PROMPTS, done)))
    suites = folder / "suites.yaml"
    suites.write_text(yaml.safe_dump({"suites": {"own": {"tasks": [str(path)], "max_new_tokens": 12}},
                                      "gates": [{"suite": "own", "metric": "pass@1", "max_drop": 0.02}]}))
    return suites


def test_side_by_side_with_a_failing_gate_exits_non_zero_naming_it(own_tasks, tiny_model_dir, other_model, tmp_path):
    out = tmp_path / "ev"
    done = subprocess.run([*CLI, "eval", str(own_tasks), "--suite", "own", "--model", tiny_model_dir,
                           "--model", other_model, "--label", "a", "--label", "b", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "gate failed: own/pass@1 max_drop 0.02: b 0.000 vs a 1.000" in done.stderr.replace("\n", " ")
    a, b = (json.loads((out / "own" / f"{x}.json").read_text()) for x in "ab")
    assert (a["label"], a["suite"], a["overall"]["pass@1"], b["overall"]["pass@1"]) == ("a", "own", 1.0, 0.0)
    cmp = json.loads((out / "own" / "compare.json").read_text())
    assert [m["label"] for m in cmp["models"]] == ["a", "b"] and [m["file"] for m in cmp["models"]] == ["a.json", "b.json"]
    row = next(d for d in cmp["deltas"] if d["domain"] == "own")
    # six tasks, all discordant one way: McNemar p = 2 / 2^6
    assert (row["test"], row["delta"], row["n"]) == ("mcnemar", -1.0, 6) and row["p_value"] == pytest.approx(2 / 64)
    [gate] = cmp["gates"]
    assert (gate["baseline"], gate["model"], gate["passed"]) == ("a", "b", False) and gate["drop"] == 1.0


def test_the_same_model_twice_passes_with_no_significant_delta(own_tasks, tiny_model_dir, tmp_path):
    suites, gates = load_suites(own_tasks)
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    cmp = run_suite("own", suites["own"], [("first", tiny_model_dir), ("again", str(copy))], tmp_path / "ev", gates)
    assert all(d["delta"] == 0.0 and d["p_value"] == 1.0 and not d["significant"] for d in cmp["deltas"])
    assert [g["passed"] for g in cmp["gates"]] == [True]


def test_bad_suites_fail_in_one_line_before_writing(own_tasks, tiny_model_dir, tmp_path):
    out = tmp_path / "ev"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"suites": {"s": {"tasks": ["chain_summ"]}}}))
    for args, message in ((["eval", str(bad), "--suite", "s"], "unknown task domain 'chain_summ': did you mean chain_sum"),
                          (["eval", str(own_tasks), "--suite", "nope"], "no suite 'nope'")):
        done = subprocess.run([*CLI, *args, "--model", tiny_model_dir, "--out", str(out)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()
