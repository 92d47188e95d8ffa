"""A toy RL problem a random tiny model can learn, for recipe tests (importable and runnable).

The verifier `first_token_even` scores 1 when the first sampled token id is even: a random
policy passes half the time, so groups carry signal from step 1 and learning shows within a
few steps. `python tests/recipes/rl_toy.py CONFIG [KEY=VALUE ...] [--resume]` runs the RL
recipe with the verifier registered (subprocess tests use it for kill -9 + resume).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from posttrain.core.types import Score
from posttrain.verifiers import VERIFIERS, register


def first_token_even(task, traj):
    return Score(float(traj.token_ids[traj.prompt_len] % 2 == 0), "first_token_even") if len(
        traj.token_ids) > traj.prompt_len else Score(0.0, "first_token_even")


if "first_token_even" not in VERIFIERS:
    register("first_token_even")(first_token_even)


def write_tasks(path: Path, n: int = 40, verifier: str = "first_token_even") -> str:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"Say something about {i} and {i * 7 % 13}.", "answer": "x",
                                "verifier": verifier}) + "\n")
    return str(path)


def overrides(model_dir: str, tasks: str, out: Path, **extra) -> list[str]:
    base = {
        "model.path": model_dir, "out_dir": str(out), "tasks": json.dumps([{"name": "toy", "path": tasks, "eval_tasks": 8}]),
        "rollout.prompts_per_step": 4, "rollout.samples_per_prompt": 4, "rollout.max_tokens": 6,
        "optim.lr": 3e-3, "train.steps": 6, "train.eval_every": 3, "train.save_every": 2,
        "logging.tensorboard": "false", "logging.progress": "false",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def without_clock(rows: list[dict]) -> list[dict]:
    """Metrics rows without wall-clock entries (`time/`, environments' `episode/DOMAIN/env_seconds`)
    and performance counters (`perf/`: a resumed process starts with a cold prefix cache): what an
    exact resume must reproduce. The scheduler's utilisation metrics are clocks too."""
    from posttrain.rl.utilisation import CLOCK_PREFIXES

    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("time/", "perf/", *CLOCK_PREFIXES))
             and not k.endswith("/env_seconds")} for r in rows]


def kill9_after_checkpoint(args: list[str], run_dir: Path, step: int, *, cwd, env, timeout: float) -> list[int]:
    """Start the run `args`, SIGKILL it as soon as `run_dir` holds a checkpoint at >= `step`, and
    return the steps its metrics logged."""
    from posttrain.checkpoint import list_checkpoints
    from posttrain.telemetry.metrics import read_metrics

    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any(s >= step for s, _ in list_checkpoints(run_dir)):
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    return [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]


if __name__ == "__main__":
    from posttrain.cli import main

    sys.argv = [sys.argv[0], "rl", *sys.argv[1:]]
    main()
