"""The toy pipeline (configs/quickstart-tiny.yaml, `make demo-tiny`) end to end: a tiny base built from scratch, SFT, RL, evals, report (slow: ~10-13 min on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the pipeline takes ~13 min on 2 cores (the suite's default is 600 s)
def test_quickstart_pipeline_builds_base_sft_rl_eval_report(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "2"}  # the real demo's setting, not the suite's
    run_dir = tmp_path / "qs"
    cmd = [sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "quickstart-tiny.yaml"),
           f"run_dir={run_dir}", f"base.cache_dir={tmp_path / 'cache'}",
           "rl.train.max_seconds=900"]  # all 300 RL steps however loaded the machine (the demo caps at 360 s)
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]

    # every stage left its outputs where the next one and the report read them
    for path in ("config.yaml", "base/model/config.json", "base/metrics.jsonl", "sft/final/model.safetensors",
                 "sft/metrics.jsonl", "rl/final/model.safetensors", "rl/metrics.jsonl", "rl/checkpoints",
                 "eval/held_out/base.json", "eval/held_out/sft.json", "eval/held_out/rl.json",
                 "eval/held_out/compare.json", "eval/sampled/rl.json", "eval/sampled/compare.json", "report.html"):
        assert (run_dir / path).exists(), path
    base = json.loads((run_dir / "eval" / "held_out" / "base.json").read_text())
    sft = json.loads((run_dir / "eval" / "held_out" / "sft.json").read_text())
    assert set(sft["domains"]) == {"basic_arithmetic", "chain_sum"}
    assert all(d["n"] == 200 for d in sft["domains"].values())
    # SFT unlocks the base's latent skill: held-out pass@1 rises clearly (measured: 0.015 -> 0.145)
    assert sft["overall"]["pass@1"] >= base["overall"]["pass@1"] + 0.05, (base["overall"], sft["overall"])

    losses = [json.loads(line).get("loss") for line in (run_dir / "sft" / "metrics.jsonl").read_text().splitlines()]
    losses = [x for x in losses if x is not None]
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10  # SFT lowered the training loss

    # RL ran, logged its phases and per-domain held-out pass@1 curves, and did not lose the SFT skill
    rl_rows = [json.loads(line) for line in (run_dir / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert {"time/rollout", "time/verify", "time/update", "reward/chain_sum"} <= set(rl_rows[-1])
    assert sum("pass@1/basic_arithmetic" in r for r in rl_rows) >= 3
    rl = json.loads((run_dir / "eval" / "held_out" / "rl.json").read_text())
    # RL keeps the greedy skill (the stage's gate: at most 0.02 lower) and sharpens what it samples:
    # pass@1 at T=1 over 8 x 400 samples rises (greedy gains vary with the base build: measured
    # 0.32 -> 0.41, 0.39 -> 0.45, 0.47 -> 0.50, and 0.3475 -> 0.3525 on CI's machine, docs/LOG.md)
    assert rl["overall"]["pass@1"] >= sft["overall"]["pass@1"] - 0.02, (sft["overall"], rl["overall"])
    sampled = json.loads((run_dir / "eval" / "sampled" / "compare.json").read_text())
    sharper = next(d for d in sampled["deltas"] if (d["from"], d["to"], d["domain"], d["metric"])
                   == ("sft", "rl", "overall", "pass@1"))
    assert sharper["delta"] >= 0.01, sharper

    # baseline first: each trained stage scored the in-loop suite before its first update
    sft_first = json.loads((run_dir / "sft" / "metrics.jsonl").read_text().splitlines()[0])
    assert sft_first["step"] == 0 and sft_first["suite/held_out/pass@1"] == pytest.approx(base["overall"]["pass@1"])
    assert rl_rows[0]["step"] == 0 and "suite/held_out/pass@1" in rl_rows[0]
    cmp = json.loads((run_dir / "eval" / "held_out" / "compare.json").read_text())
    gain = next(d for d in cmp["deltas"] if (d["from"], d["to"], d["domain"]) == ("base", "sft", "overall"))
    assert gain["significant"] and gain["delta"] > 0.05
    assert [g["passed"] for g in cmp["gates"]] == [True]  # rl against base, 0.02 allowed

    html = (run_dir / "report.html").read_text()
    assert "pass@1" in html and html.count('<img src="data:image/png;base64,') >= 4

    # a second run reuses the cached base instead of pretraining again
    again = subprocess.run(cmd[:-3] + [f"run_dir={tmp_path / 'qs2'}", f"base.cache_dir={tmp_path / 'cache'}",
                                       "stages=[base]"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "reusing cached" in again.stderr
