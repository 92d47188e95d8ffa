"""What the RL loop records about its verifiers, step by step, so reward hacking shows:

- the rollout log, `RUN_DIR/rollouts/step_NNNNNN.jsonl`: every generated trajectory with its
  prompt, completion, reference, each verifier's score, the combined score and the reward (what
  `posttrain verify spotcheck` samples for humans to label);
- verifier disagreement (`verify/disagreement/<domain>`, `verify/agreement/<a>~<b>`), warned
  about above `monitor.disagreement_rate`, with examples;
- reward-hacking alarms (`posttrain/verifiers/monitors.py`): training pass rate vs held-out
  pass@1, surges of sandbox violations, touched tests and forged verdicts; `alert/<kind>`
  metrics, `RUN_DIR/alerts.jsonl`, the report's Alerts section.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posttrain.config.rl import RLConfig
from posttrain.core.fsio import atomic_file
from posttrain.rl.scoring import violations
from posttrain.core.types import Group
from posttrain.verifiers.ensemble import DisagreementTracker
from posttrain.verifiers.monitors import RewardHackingMonitor, note_resume, write_alerts


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def rollout_records(step: int, groups: list[Group]) -> list[dict]:
    """One record per freshly generated trajectory (replayed ones were logged when generated)."""
    out = []
    for g in groups:
        user = [m["content"] for m in g.task.prompt if m.get("role") == "user"]
        for traj, raw in list(zip(g.trajectories, g.raw))[g.replayed :]:
            out.append({
                "step": step, "task_id": g.task.id, "domain": g.task.domain, "prompt": user[-1] if user else "",
                "completion": traj.text, "reference": _jsonable(g.task.reference),
                "scores": {s.verifier: s.value for s in traj.scores}, "score": raw, "reward": traj.reward,
                "finish_reason": traj.finish_reason, "turns": traj.turns, "policy_version": traj.policy_version,
                "temperature": traj.sampling.temperature, "stop_reason": traj.stop_reason,
                "events": list(traj.events), **({"episode": dict(traj.stats)} if traj.turns > 1 else {}),
            })
    return out


class Auditor:
    def __init__(self, cfg: RLConfig, out_dir: Path):
        m = cfg.monitor
        self.out_dir, self.log = out_dir, m.rollout_log
        self.tracker = DisagreementTracker(threshold_rate=m.disagreement_rate, min_count=m.disagreement_min)
        self.monitor = RewardHackingMonitor(gap_widen=m.gap_widen, surge_factor=m.surge_factor, surge_min=m.surge_min)
        self.alerts: list = []

    def step(self, step: int, generated: list[Group], train_pass_rate: float) -> tuple[dict, list[str]]:
        """After verifying a step: log its rollouts, measure disagreement and violations.
        Returns (metrics, warning lines)."""
        if self.log:
            path = self.out_dir / "rollouts" / f"step_{step:06d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(path, fsync=False) as f:
                for rec in rollout_records(step, generated):
                    f.write(json.dumps(rec) + "\n")
        for g in generated:
            for traj in g.fresh:
                self.tracker.add(g.task.domain, g.task.id, traj.text, list(traj.scores),
                                 thresholds=g.task.metadata.get("verifier_thresholds"))
        metrics = self.tracker.metrics()
        warnings = self.tracker.warnings()
        self.tracker.reset()
        self.alerts += self.monitor.observe_step(step, train_pass_rate, violations(generated))
        return metrics, warnings

    def held_out(self, step: int, pass_at_1: float) -> None:
        self.alerts += self.monitor.observe_eval(step, pass_at_1)

    def flush(self) -> tuple[dict, list[str]]:
        """The monitor's metrics for this step, and its new alerts (also appended to alerts.jsonl)."""
        alerts, self.alerts = self.alerts, []
        if alerts:
            write_alerts(self.out_dir, alerts)
        return self.monitor.metrics(), [f"{a.kind}: {a.message}" for a in alerts]

    def state_dict(self) -> dict:
        return {"monitor": self.monitor.state_dict()}

    def load_state_dict(self, state: dict, step: int) -> None:
        """Restore the monitor saved at `step`; alerts the lost run wrote after it stop counting."""
        self.monitor.load_state_dict(state["monitor"])
        note_resume(self.out_dir, step)
