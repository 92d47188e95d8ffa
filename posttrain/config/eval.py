"""The eval part of the config tree: single eval runs, named suites, regression gates.

    eval:                                   # in an rl / sft config (and a pipeline's, with `models`)
      suites:
        general: {tasks: [leg_counting, humaneval:20], n: 50, samples: 8, k: [1, 8], temperature: 1.0}
      gates:
        - {suite: general, metric: pass@1, max_drop: 0.02, on_fail: rollback}
      best_by: general                      # the suite whose pass@1 picks the best checkpoint

A suite is what `posttrain eval --suite NAME` runs on one or several models (eval/compare_models.py); the
training recipes evaluate every suite before the first update and every `eval_every` steps
(eval/in_loop.py); a gate compares a metric against the starting model's (training) or the
baseline model's (a pipeline's eval stage). Loaded through posttrain/config/base.py like every section.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from posttrain.config.base import Strict


TaskSpec = str | list[str | dict[str, Any]]  # "a:10,b" or [a:10, {name: b, n: 5, options: {...}}]


class SamplingSection(Strict):
    """What an eval samples and reports: shared by single eval runs and suites."""

    samples: int = Field(1, gt=0)  # K: completions per task, for pass@K
    k: list[int] | None = None  # the pass@k reported; None: [1, samples]; each k <= samples
    seed: int = 1_000_000  # held-out seeds start here, far from training seeds
    temperature: float = Field(0.0, ge=0)  # 0: greedy (samples>1 then forces sampling at 1.0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(128, gt=0)  # worked solutions of 4-5 term problems need ~100 tokens
    task_options: dict[str, dict[str, Any]] = {}  # reasoning-gym options per domain
    # verifiers scoring every task, replacing the ones the tasks name (e.g. [numeric], as an RL
    # domain's `verifiers` does, so eval and training judge alike); None: the tasks' own
    verifiers: list[str] | None = None

    @model_validator(mode="after")
    def _check_k(self):
        for k in self.k or []:
            if not 1 <= k <= self.samples:
                raise ValueError(f"k: pass@{k} needs 1 <= k <= samples (samples={self.samples})")
        return self

    def ks(self) -> list[int]:
        return sorted({1, *(self.k if self.k is not None else [self.samples])})


class SuiteConfig(SamplingSection):
    tasks: TaskSpec  # eval/sources.py: reasoning-gym domains, registered sources, groups, files
    n: int = Field(50, gt=0)  # tasks per generated domain when an item gives no N (datasets, files: all)
    # a pipeline's eval stage only: the labels of eval.models this suite runs on (None: all of them)
    models: list[str] | None = None


class EvalConfig(SamplingSection):
    """One model on one task spec (`posttrain eval --model M --tasks SPEC`)."""

    model: str = "runs/sft/final"
    tasks: TaskSpec = "basic_arithmetic,chain_sum"
    n_per_domain: int = Field(50, gt=0)  # tasks per reasoning-gym domain when SPEC gives no :N (files: all)
    engine: Literal["hf", "paged", "remote", "vllm"] = "paged"  # posttrain/engine/registry.py ENGINES
    engine_options: dict[str, Any] = {}  # passed to the engine, e.g. {base_url: ...} for remote
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: fp32 on CPU, bf16 on GPU
    batch_size: int = Field(64, gt=0)  # sequences the engine decodes at once
    out: str = "runs/eval/eval.json"
    suite: str | None = None  # the suite this run belongs to (written into the result)
    label: str | None = None  # the model's name in a comparison (default: the model dir's name)


class GateConfig(Strict):
    suite: str
    metric: str = "pass@1"  # pass@k of the suite
    domain: str | None = None  # None: the suite's overall (mean over domains)
    max_drop: float = Field(ge=0)  # fails when baseline - value > max_drop
    baseline: str | None = None  # pipeline eval: the model label compared against (None: the first)
    # during training: alert (log it), stop (checkpoint, then stop with an error naming the gate),
    # rollback (the final model becomes the best checkpoint by `best_by`, and the run stops)
    on_fail: Literal["alert", "stop", "rollback"] = "alert"

    @property
    def name(self) -> str:
        return f"{self.suite}/{self.metric}" + (f"/{self.domain}" if self.domain else "") + f" max_drop {self.max_drop:g}"


class EvalSection(Strict):
    """Suites a training run evaluates in its loop, and the gates on them."""

    suites: dict[str, SuiteConfig] = {}
    gates: list[GateConfig] = []
    best_by: str | None = None  # suite whose overall pass@1 picks `best/` (rollback's target); None: the first gate's
    batch_size: int = Field(64, gt=0)  # sequences the eval engine decodes at once

    @model_validator(mode="after")
    def _check_names(self):
        for gate in self.gates:
            if gate.suite not in self.suites:
                raise ValueError(f"gates: suite {gate.suite!r} is not defined under suites "
                                 f"(defined: {', '.join(sorted(self.suites)) or 'none'})")
            k = gate.metric.partition("@")[2]
            if not gate.metric.startswith("pass@") or not k.isdigit() or int(k) not in self.suites[gate.suite].ks():
                raise ValueError(f"gates: metric {gate.metric!r} is not reported by suite {gate.suite!r} "
                                 f"(it reports {', '.join(f'pass@{k}' for k in self.suites[gate.suite].ks())})")
        if self.best_by is not None and self.best_by not in self.suites:
            raise ValueError(f"best_by: suite {self.best_by!r} is not defined under suites")
        return self

    def best_suite(self) -> str | None:
        return self.best_by or (self.gates[0].suite if self.gates else None)


class PipelineEvalConfig(EvalSection):
    """A pipeline's `eval` stage: every suite on every model, side by side, then the gates."""

    # models compared, in order: stage names (base, sft, rl; `start`: the first trained stage's
    # input model) or paths; None: `start` (when no base stage) then each model-producing stage
    models: list[str] | None = None
    in_loop: list[str] | None = None  # suites the sft / rl stages evaluate while training (None: all)
    engine: Literal["hf", "paged", "remote", "vllm"] = "paged"
    engine_options: dict[str, Any] = {}
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
