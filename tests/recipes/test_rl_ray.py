"""`posttrain rl ... cluster.backend=ray`: the same recipe with its rollout and sandbox workers as Ray actors
on a loopback-only local cluster; a rollout worker killed with SIGKILL mid-run is replaced, its requests
re-queued, and the run completes every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.recipes.rl_toy import overrides, write_tasks

pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
SCRIPT = str(REPO / "tests" / "recipes" / "rl_toy.py")


def _steps(run_dir: Path) -> list[int]:
    f = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in f.read_text().splitlines() if line] if f.exists() else []


def _workers(parent: int, name: str) -> list[psutil.Process]:
    """Ray worker processes of the run `parent` started whose title names `name` (ray sets `ray::CLASS`)."""
    out = []
    for p in psutil.Process(parent).children(recursive=True):
        try:
            if any(name in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_ray_backend_runs_the_recipe_and_survives_a_killed_rollout_worker(tmp_path, tiny_model_dir):
    steps = 6
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    common = {"train.steps": steps, "train.eval_every": 100, "train.save_every": 100, "rollout.max_tokens": 24,
              "buffer.replay_ratio": 0.0}
    local = subprocess.run([sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "local", **common)],
                           cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    args = [sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "ray", **common,
                                               **{"cluster.backend": "ray", "cluster.rollout_workers": 2})]
    proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and killed is None:
        if _steps(tmp_path / "ray")[-1:] >= [2]:  # steps 1-2 done: kill a rollout worker in the next ones
            workers = _workers(proc.pid, "RolloutWorker")
            if workers:
                killed = workers[0].pid
                os.kill(killed, 9)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert killed is not None, "no rollout worker process was found to kill"
    assert [s for s in _steps(tmp_path / "ray") if s > 0] == list(range(1, steps + 1))
    assert "rollout worker" in err and "died" in err and "re-queued" in err, err[-2000:]
    # the same rollouts as in one process (same seeds and weights: the same tokens, so the same scores)
    rows = {json.loads(line)["step"]: json.loads(line) for line in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()}
    want = {json.loads(line)["step"]: json.loads(line) for line in (tmp_path / "local" / "metrics.jsonl").read_text().splitlines()}
    assert [rows[s]["score"] for s in range(1, steps + 1)] == [want[s]["score"] for s in range(1, steps + 1)]
