"""`posttrain run CONFIG`: the stages of one pipeline, in order, in one run directory.

    run_dir/
      config.yaml        the resolved pipeline config
      base/              the embedded base (model/ in HF layout, metrics.jsonl)
      sft/               SFT checkpoints, metrics.jsonl, final/ (HF layout)
      rm/                the reward model: checkpoints, metrics.jsonl, final/ (HF sequence classifier + reward_stats.json)
      dpo/               DPO checkpoints, metrics.jsonl, final/
      rl/                RL checkpoints (with the replay buffer), metrics.jsonl, final/
      eval/SUITE/        every suite of `eval.suites` on every model of `eval.models`: LABEL.json each,
                         compare.json (deltas, significance, gates; eval/compare_models.py)
      timings.json       wall seconds of each stage that finished, {"base": 12.3, ...} (the report's cost column)
      report.html

Stage outputs chain unless the config sets them: each stage writes to run_dir/<stage>,
SFT starts from the base built here, the reward model and DPO from the SFT model, RL from the DPO
model when there is one (else SFT's); an RL domain whose verifiers name `reward_model` without a
`path` gets the reward model trained here (RLHF). `eval.models` names stages ("base",
"sft", "dpo", "rl", "start" = the first trained stage's input model) or paths, by default the starting
model then every model-producing stage, so the first numbers are the starting model's. The
suites of `eval.in_loop` (default: all) and their gates reach the sft / rl stages that define no
suites of their own: evaluated before the first update and every `eval_every` steps. The
eval stage fails the pipeline (GateError: non-zero exit, the gate named) when a gate fails for
the last model against its baseline (the first model); a report stage after it still writes the
report first. The top-level `task_options` reach
every stage and suite that draws tasks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from posttrain.config.base import config_text, save_config
from posttrain.config.pipeline import PipelineConfig
from posttrain.core.errors import ConfigError, GateError
from posttrain.core.fsio import write_text_atomic

console = Console(stderr=True)


def stage_outputs(cfg: PipelineConfig) -> dict[str, str]:
    return {"base": str(Path(cfg.base.out_dir) / "model"), "sft": str(Path(cfg.sft.out_dir) / "final"),
            "rm": str(Path(cfg.rm.out_dir) / "final"), "dpo": str(Path(cfg.dpo.out_dir) / "final"),
            "rl": str(Path(cfg.rl.out_dir) / "final")}


def _unset_path(section) -> bool:
    return "model" not in section.model_fields_set or "path" not in section.model.model_fields_set


def resolve(cfg: PipelineConfig) -> PipelineConfig:
    """Fill the stage paths the config left unset, chaining each stage to the one before."""
    run_dir = Path(cfg.run_dir)
    cfg = cfg.model_copy(deep=True)
    if "out_dir" not in cfg.base.model_fields_set:
        cfg.base.out_dir = str(run_dir / "base")
    for stage in ("sft", "rm", "dpo", "rl"):
        if "out_dir" not in getattr(cfg, stage).model_fields_set:
            getattr(cfg, stage).out_dir = str(run_dir / stage)
    outputs = stage_outputs(cfg)
    if _unset_path(cfg.sft):
        cfg.sft.model.path = outputs["base"]
    policy = outputs["sft"] if "sft" in cfg.stages or "base" not in cfg.stages else outputs["base"]
    for stage in ("rm", "dpo"):
        if _unset_path(getattr(cfg, stage)):
            getattr(cfg, stage).model.path = policy
    if _unset_path(cfg.rl):
        cfg.rl.model.path = outputs["dpo"] if "dpo" in cfg.stages else policy
    if "rm" in cfg.stages:
        for domain in cfg.rl.tasks:
            if "reward_model" in (domain.verifiers or ()) and "path" not in domain.verifier_options.get("reward_model", {}):
                domain.verifier_options = {**domain.verifier_options,
                                           "reward_model": {**domain.verifier_options.get("reward_model", {}),
                                                            "path": outputs["rm"]}}
    for stage in ("sft", "rm", "dpo"):
        data = getattr(cfg, stage).data
        if cfg.task_options and "task_options" not in data.model_fields_set:
            data.task_options = cfg.task_options
    for domain in cfg.rl.tasks:
        if domain.path is None and not domain.options and domain.name in cfg.task_options:
            domain.options = dict(cfg.task_options[domain.name])
    _resolve_eval(cfg, outputs)
    return cfg


def eval_models(cfg: PipelineConfig, outputs: dict[str, str]) -> list[tuple[str, str]]:
    """(label, path) of every model the eval stage compares, in order (config/eval.py PipelineEvalConfig.models)."""
    trained = [s for s in ("sft", "dpo", "rl") if s in cfg.stages]
    start = getattr(cfg, trained[0]).model.path if trained else None
    names = cfg.eval.models
    if names is None:
        names = (["base"] if "base" in cfg.stages else ["start"] if start else []) + trained
    models = []
    for name in names:
        if name == "start":
            if start is None:
                raise ConfigError("eval.models: 'start' names the first trained stage's input model, but no sft, dpo or rl stage runs")
            models.append(("start", start))
        elif name in outputs:
            models.append((name, outputs[name]))
        else:
            models.append((Path(name).name, name))
    return models


def _resolve_eval(cfg: PipelineConfig, outputs: dict[str, str]) -> None:
    """Suites named by eval.in_loop (default all) and their gates reach the sft / rl stages that set no suites."""
    ev = cfg.eval
    unknown = [s for s in ev.in_loop or [] if s not in ev.suites]
    if unknown:
        raise ConfigError(f"eval.in_loop: suite {unknown[0]!r} is not defined under eval.suites")
    if "eval" in cfg.stages and not ev.suites:
        raise ConfigError("stages include 'eval' but eval.suites defines no suite")
    for suite in ev.suites.values():
        if cfg.task_options and "task_options" not in suite.model_fields_set:
            suite.task_options = cfg.task_options
    names = list(ev.suites) if ev.in_loop is None else ev.in_loop
    for stage in ("sft", "rl"):
        section = getattr(cfg, stage).eval
        if stage in cfg.stages and not section.suites and names:
            gates = [g for g in ev.gates if g.suite in names]
            best = ev.best_by if ev.best_by in names else None
            getattr(cfg, stage).eval = type(section)(suites={n: ev.suites[n] for n in names}, gates=gates,
                                                     best_by=best, batch_size=ev.batch_size)
    if "eval" in cfg.stages:
        labels = [label for label, _ in eval_models(cfg, outputs)]  # unknown names fail here, before any stage
        for name, suite in ev.suites.items():
            missing = [m for m in suite.models or [] if m not in labels]
            if missing:
                raise ConfigError(f"eval.suites.{name}.models: {missing[0]!r} is not among eval.models ({', '.join(labels)})")


def _base(cfg: PipelineConfig, resume: bool) -> None:
    from posttrain.recipes import base

    base.run(cfg.base)


INPUT_MARK = "input_model.txt"  # identity of the model a finished stage started from


def finished_with(out_dir: str, stage_cfg) -> bool:
    """True when out_dir holds a final model trained with exactly this config from exactly this
    input model (so re-running a pipeline skips it instead of refusing to overwrite it)."""
    from posttrain.train.weights import model_identity

    saved, mark = Path(out_dir) / "config.yaml", Path(out_dir) / INPUT_MARK
    if not (Path(out_dir) / "final").is_dir() or not saved.is_file() or not mark.is_file():
        return False
    return saved.read_text() == config_text(stage_cfg) and mark.read_text() == model_identity(stage_cfg.model.path)


def mark_finished(out_dir: str, stage_cfg) -> None:
    from posttrain.train.weights import model_identity

    write_text_atomic(Path(out_dir) / INPUT_MARK, model_identity(stage_cfg.model.path))


def _trained_stage(name: str):
    """A stage that trains a model in its own out_dir (sft, rm, dpo, rl): skipped when already finished."""

    def run_stage(cfg: PipelineConfig, resume: bool) -> None:
        import importlib

        stage_cfg = getattr(cfg, name)
        if finished_with(stage_cfg.out_dir, stage_cfg):
            console.print(f"{name}: {stage_cfg.out_dir}/final was trained with this config; skipped")
            return
        importlib.import_module(f"posttrain.recipes.{name}").run(stage_cfg, resume=resume)
        mark_finished(stage_cfg.out_dir, stage_cfg)

    return run_stage


def _eval(cfg: PipelineConfig, resume: bool) -> None:
    """Every suite on every model (run_dir/eval/SUITE/), then the gates: a failed one fails the pipeline."""
    from posttrain.core.errors import gate_failure
    from posttrain.eval.compare_models import run_suite

    ev = cfg.eval
    models = eval_models(cfg, stage_outputs(cfg))
    failed = []
    for name, suite in ev.suites.items():
        chosen = [m for m in models if suite.models is None or m[0] in suite.models]
        cmp = run_suite(name, suite, chosen, Path(cfg.run_dir) / "eval", ev.gates, engine=ev.engine,
                        engine_options=ev.engine_options, dtype=ev.dtype, batch_size=ev.batch_size)
        failed += [g for g in cmp["gates"] if not g["passed"]]
    if failed:
        raise gate_failure(failed)


def _report(cfg: PipelineConfig, resume: bool) -> None:
    from posttrain.telemetry.report import write_report

    write_report(cfg.run_dir)


STAGES: dict[str, Callable[[PipelineConfig, bool], None]] = {
    "base": _base,
    "sft": _trained_stage("sft"),
    "rm": _trained_stage("rm"),
    "dpo": _trained_stage("dpo"),
    "rl": _trained_stage("rl"),
    "eval": _eval,
    "report": _report,
}


TIMINGS_FILE = "timings.json"


def _record_timing(run_dir: Path, stage: str, seconds: float) -> None:
    """run_dir/timings.json gains (or updates) this stage's wall seconds; earlier stages' entries stay."""
    path = run_dir / TIMINGS_FILE
    try:
        known = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    write_text_atomic(path, json.dumps({**known, stage: round(seconds, 3)}, indent=2) + "\n")


def run(cfg: PipelineConfig, resume: bool = False) -> Path:
    cfg = resolve(cfg)
    run_dir = Path(cfg.run_dir)
    save_config(cfg, run_dir)
    timings: dict[str, float] = {}
    for stage in cfg.stages:
        console.rule(f"[bold cyan]{stage}")
        start = time.perf_counter()
        try:
            STAGES[stage](cfg, resume)
        except GateError:  # the numbers are written: the report still shows them, then the pipeline fails
            if "report" in cfg.stages[cfg.stages.index(stage) + 1:]:
                console.print("[yellow]a gate failed: writing the report before stopping[/]")
                STAGES["report"](cfg, resume)
            raise
        timings[stage] = time.perf_counter() - start
        _record_timing(run_dir, stage, timings[stage])
        console.print(f"[dim]{stage} took {timings[stage]:.1f}s[/]")
    summary = ", ".join(f"{k} {v:.0f}s" for k, v in timings.items())
    console.print(f"[bold green]pipeline done[/] in {sum(timings.values()):.0f}s ({summary})")
    return run_dir / "report.html"
