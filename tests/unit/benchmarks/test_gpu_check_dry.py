"""benchmarks/gpu_check.sh --dry-run (the GPU check on the CPU with tiny shapes) runs every section to a
result line or a skip with its reason, and exits 0; real GPU figures need a lent CUDA machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SECTIONS = ("engine vs HF generate", "RL step vs TRL GRPOTrainer", "FSDP2 on one device", "vLLM engine")
RESULT = re.compile(r"^result: (.+) = (\d+\.\d+) \(target >= [\d.]+\)$")
SKIP = re.compile(r"^skipped: (.+) \((.+)\)$")


@pytest.mark.slow
def test_gpu_check_dry_run_prints_each_section():
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not [line for line in lines if line.startswith("failed:")]
    results = [m.group(1) for m in map(RESULT.match, lines) if m]
    skips = {m.group(1): m.group(2) for m in map(SKIP.match, lines) if m}
    # each section ends in exactly one line: its result, or a skip that says why
    assert len(results) + len(skips) == len(SECTIONS), lines
    for what, why in skips.items():
        assert what in SECTIONS and why.strip(), (what, why)
    try:
        import trl  # noqa: F401
    except ImportError:
        assert "RL step vs TRL GRPOTrainer" in skips
    else:  # TRL installed (the dev extras): the RL section ran, as did the engine and FSDP2 sections
        assert {r.split(" ")[0] for r in results} >= {"engine", "rl", "fsdp2"}
    assert lines[-1] == "gpu check: no section failed"


def test_gpu_check_without_cuda_says_so(monkeypatch, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    import _gpu_check

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out
