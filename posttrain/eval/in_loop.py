"""Suites and regression gates inside a training loop (sft, rl): baseline first, then every eval_every.

    suites = SuiteEvals(cfg.eval, out_dir, tokenizer, stop_ids)       # tasks built (and checked) here
    metrics = suites.evaluate(engine, step)      # {"suite/general/pass@1": .., "suite/general/pass@1/gcd": ..}
    verdict = suites.check(step, metrics)        # gate rows that failed; alerts written to alerts.jsonl
    if verdict.action == "rollback": final = suites.rollback(out_dir) ...
    suites.maybe_save_best(step, metrics, policy, tokenizer)

Each suite runs through the one eval path (`eval/suite.evaluate_tasks`) on the engine the loop
already has (RL: its rollout engine, synced to the policy; SFT: a paged engine built from the
model and synced before each eval), with the suite's own samples, k, temperature, seed and
max_new_tokens, so the numbers equal `posttrain eval --suite` on a checkpoint of that step.

The first evaluation (step 0, before any update) is the baseline: each gate compares its metric
at every later eval against the baseline's (fails when baseline - value > max_drop), logs an
alert of kind `gate` (alerts.jsonl, the report's Alerts section) and acts by its `on_fail`:
`alert` only; `stop`: the loop saves a checkpoint and ends with a GateError naming the gate (no
final model); `rollback`: the final model is `best/`, the model of the eval step with the best
overall pass@1 on `best_by` (default the first gate's suite) among the evals that passed every
gate (step 0 always does), and the run ends there. So `best_by: trained` with a gate on
`general` keeps the best model on the trained domains that has not traded general ability away. Baseline and best are in `state_dict`, saved with every
checkpoint, so a resumed run gates and picks exactly as the uninterrupted one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from posttrain.config.eval import EvalSection, GateConfig
from posttrain.eval.compare import gate_row
from posttrain.core.types import Task
from posttrain.verifiers.monitors import Alert, write_alerts

BEST_DIR = "best"


def suite_key(suite: str, metric: str, domain: str | None = None) -> str:
    return f"suite/{suite}/{metric}" + (f"/{domain}" if domain else "")


@dataclass
class Verdict:
    failed: list[dict[str, Any]] = field(default_factory=list)
    action: str | None = None  # None | "stop" | "rollback" (the strongest on_fail among failed gates)


class SuiteEvals:
    def __init__(self, section: EvalSection, out_dir: str | Path, tokenizer, stop_ids: Sequence[int]):
        from posttrain.eval.run import with_verifiers
        from posttrain.eval.sources import load_spec

        self.section, self.out_dir, self.tokenizer, self.stop_ids = section, Path(out_dir), tokenizer, tuple(stop_ids)
        self.tasks: dict[str, list[Task]] = {
            name: with_verifiers(load_spec(s.tasks, s.n, s.seed, s.task_options), s.verifiers)
            for name, s in section.suites.items()}
        self.baseline: dict[str, float] = {}
        self.best: dict[str, Any] | None = None  # {"step", "value"} of best/

    def __bool__(self) -> bool:
        return bool(self.section.suites)

    def evaluate(self, engine, step: int) -> dict[str, float]:
        """Every suite on `engine` (already holding the weights of `step`); flat metrics."""
        from posttrain.eval.run import sampling_temperature, tasks_per_call
        from posttrain.eval.evaluate import evaluate_tasks

        out: dict[str, float] = {}
        for name, s in self.section.suites.items():
            result = evaluate_tasks(engine, self.tokenizer, self.tasks[name], samples=s.samples, ks=s.ks(),
                                    temperature=sampling_temperature(s.temperature, s.samples), top_p=s.top_p,
                                    max_tokens=s.max_new_tokens, stop_ids=self.stop_ids, seed=s.seed,
                                    tasks_per_call=tasks_per_call(self.section.batch_size, s.samples))
            for key in result.keys:
                out[suite_key(name, key)] = result.overall[key]
                out.update({suite_key(name, key, d): row[key] for d, row in sorted(result.domains.items())})
        if step == 0 or not self.baseline:
            self.baseline = dict(out)
        return out

    def check(self, step: int, metrics: dict[str, float]) -> Verdict:
        """The gates on this eval's metrics against the baseline; failed ones become alerts."""
        verdict = Verdict()
        if step == 0 or not metrics:
            return verdict
        for gate in self.section.gates:
            key = suite_key(gate.suite, gate.metric, gate.domain)
            if key not in metrics or key not in self.baseline:
                continue
            row = gate_row(gate, "step 0", self.baseline[key], f"step {step}", metrics[key])
            if not row["passed"]:
                verdict.failed.append(row)
                verdict.action = _stronger(verdict.action, gate)
        if verdict.failed:
            write_alerts(self.out_dir, [Alert(step, "gate", _message(r), details=r) for r in verdict.failed])
        return verdict

    def maybe_save_best(self, step: int, metrics: dict[str, float], model, tokenizer,
                        verdict: Verdict | None = None) -> bool:
        """Keep out_dir/best/ (HF layout) when this eval passed every gate and beats every earlier
        such eval on best_by's overall pass@1."""
        suite = self.section.best_suite()
        key = suite_key(suite, "pass@1") if suite else None
        if key is None or key not in metrics or (verdict is not None and verdict.failed):
            return False
        if self.best is not None and metrics[key] <= self.best["value"]:
            return False
        from posttrain.train.run import export_final

        export_final(copy.deepcopy(model), tokenizer, self.out_dir, next(model.parameters()).dtype, name=BEST_DIR)
        self.best = {"step": step, "value": metrics[key]}
        return True

    def rollback(self) -> Path:
        """out_dir/final := out_dir/best (the best eval step's model)."""
        import shutil

        from posttrain.core.fsio import replace_dir

        tmp = self.out_dir / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(self.out_dir / BEST_DIR, tmp)
        replace_dir(tmp, self.out_dir / "final")
        return self.out_dir / "final"

    def state_dict(self) -> dict[str, Any]:
        return {"baseline": dict(self.baseline), "best": self.best}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.baseline, self.best = dict(state.get("baseline") or {}), state.get("best")


def _stronger(current: str | None, gate: GateConfig) -> str | None:
    order = {None: 0, "alert": 0, "stop": 1, "rollback": 2}
    wanted = None if gate.on_fail == "alert" else gate.on_fail
    return wanted if order[wanted] > order[current] else current


def _message(row: dict[str, Any]) -> str:
    return (f"gate {row['name']} failed: {row['value']:.3f} at {row['model']} vs {row['baseline_value']:.3f} "
            f"at {row['baseline']} (drop {row['drop']:.3f} > {row['max_drop']:g})")
