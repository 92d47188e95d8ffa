"""What an RL run records about its verifiers: the rollout log (which spot checks sample and
calibration reads back), verifier disagreement per domain, and reward-hacking alerts when a
verifier reports touched tests."""

from __future__ import annotations

import json
import subprocess
import sys

from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.recipes import rl
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.types import Score
from posttrain.verifiers import VERIFIERS, register
from posttrain.verifiers.calibrate import calibrate
from tests.recipes.rl_toy import overrides, write_tasks


def tampering_judge(task, traj):
    """Disagrees with first_token_even on ids divisible by 3, and reports touched tests on 5s."""
    tok = traj.token_ids[traj.prompt_len] if len(traj.token_ids) > traj.prompt_len else 0
    return Score(float(tok % 3 == 0), "tampering_judge", {"events": ["touched_tests"] if tok % 5 == 0 else []})


if "tampering_judge" not in VERIFIERS:
    register("tampering_judge")(tampering_judge)


def test_rollout_log_disagreement_alerts_spotcheck_and_calibration(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    domain = [{"name": "toy", "path": tasks, "eval_tasks": 8, "verifiers": ["first_token_even", "tampering_judge"],
               "combine": "all"}]
    run_dir = tmp_path / "run"
    args = overrides(tiny_model_dir, tasks, run_dir, **{"train.steps": 3, "monitor.disagreement_min": 4})
    cfg = load_config(RLConfig, None, [a for a in args if not a.startswith("tasks=")] + [f"tasks={json.dumps(domain)}"])
    rl.run(cfg)

    logs = sorted((run_dir / "rollouts").glob("step_*.jsonl"))
    assert [p.name for p in logs] == ["step_000001.jsonl", "step_000002.jsonl", "step_000003.jsonl"]
    recs = [json.loads(line) for line in logs[0].read_text().splitlines()]
    first = next(r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] == 1)
    assert len(recs) == 4 * first["generated_groups"] and {r["domain"] for r in recs} == {"toy"}  # every sample
    for r in recs:
        assert set(r["scores"]) == {"first_token_even", "tampering_judge"}
        assert r["score"] == min(r["scores"].values())  # combine: all
        assert isinstance(r["completion"], str) and r["prompt"].startswith("Say something")

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert all("verify/disagreement/toy" in r for r in rows)
    assert any(r["verify/disagreement/toy"] > 0 for r in rows)
    touched = [sum("touched_tests" in rec["events"] for rec in map(json.loads, p.read_text().splitlines()))
               for p in logs]  # per step: how many logged rollouts report touched tests
    assert any(touched), "precondition: some sampled first token is a multiple of 5 (else nothing is checked)"
    touched_steps = [i + 1 for i, n in enumerate(touched) if n]
    assert [r["step"] for r in rows if r.get("alert/test_tampering")] == touched_steps
    alerts = [json.loads(line) for line in (run_dir / "alerts.jsonl").read_text().splitlines()]
    tampering = [a for a in alerts if a["kind"] == "test_tampering"]
    # one alert per touched step, counting exactly that step's touched rollouts
    assert [(a["step"], a["details"]["counts"]) for a in tampering] == [
        (step, {"touched_tests": touched[step - 1]}) for step in touched_steps]

    done = subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", "spotcheck", str(run_dir), "--n", "12"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sample = run_dir / "spotcheck" / "spotcheck.jsonl"
    lines = [json.loads(line) for line in sample.read_text().splitlines()]
    assert len(lines) == 12 and (run_dir / "spotcheck" / "spotcheck.html").exists()
    # a human who agrees with first_token_even: it is perfectly precise, the strict combination misses some
    labelled = tmp_path / "labels.jsonl"
    labelled.write_text("".join(json.dumps({**r, "label": r["scores"]["first_token_even"] == 1.0}) + "\n"
                                for r in lines))
    report = calibrate(run_dir, str(labelled))
    assert report["verifiers"]["first_token_even"]["accuracy"] == 1.0
    assert report["labelled"] == 12
