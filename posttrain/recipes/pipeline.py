"""`posttrain run CONFIG`: the stages of one pipeline, in order, in one run directory.

    run_dir/
      config.yaml        the resolved pipeline config
      base/              the embedded base (model/ in HF layout, metrics.jsonl)
      sft/               SFT checkpoints, metrics.jsonl, final/ (HF layout)
      rl/                RL checkpoints (with the replay buffer), metrics.jsonl, final/
      eval/NAME.json     one eval per entry of `eval:` (e.g. base vs sft)
      report.html

Stage outputs chain unless the config sets them: each stage writes to run_dir/<stage>,
SFT starts from the base built here, RL from the SFT model, an eval's `model` may name a stage ("base", "sft", "rl")
instead of a path, and the top-level `task_options` reach every stage that draws tasks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from posttrain.config import PipelineConfig, config_text, save_config
from posttrain.errors import ConfigError
from posttrain.fsio import write_text_atomic

console = Console(stderr=True)


def resolve(cfg: PipelineConfig) -> PipelineConfig:
    """Fill the stage paths the config left unset, chaining each stage to the one before."""
    run_dir = Path(cfg.run_dir)
    cfg = cfg.model_copy(deep=True)
    if "out_dir" not in cfg.base.model_fields_set:
        cfg.base.out_dir = str(run_dir / "base")
    if "out_dir" not in cfg.sft.model_fields_set:
        cfg.sft.out_dir = str(run_dir / "sft")
    if "out_dir" not in cfg.rl.model_fields_set:
        cfg.rl.out_dir = str(run_dir / "rl")
    outputs = {"base": str(Path(cfg.base.out_dir) / "model"), "sft": str(Path(cfg.sft.out_dir) / "final"),
               "rl": str(Path(cfg.rl.out_dir) / "final")}
    if "model" not in cfg.sft.model_fields_set or "path" not in cfg.sft.model.model_fields_set:
        cfg.sft.model.path = outputs["base"]
    if "model" not in cfg.rl.model_fields_set or "path" not in cfg.rl.model.model_fields_set:
        cfg.rl.model.path = outputs["sft"] if "sft" in cfg.stages or "base" not in cfg.stages else outputs["base"]
    if cfg.task_options and "task_options" not in cfg.sft.data.model_fields_set:
        cfg.sft.data.task_options = cfg.task_options
    for domain in cfg.rl.tasks:
        if domain.path is None and not domain.options and domain.name in cfg.task_options:
            domain.options = dict(cfg.task_options[domain.name])
    for name, ev in cfg.eval.items():
        if cfg.task_options and "task_options" not in ev.model_fields_set:
            ev.task_options = cfg.task_options
        if ev.model in outputs:
            ev.model = outputs[ev.model]
        if "out" not in ev.model_fields_set:
            ev.out = str(run_dir / "eval" / f"{name}.json")
    if "eval" in cfg.stages and not cfg.eval:
        raise ConfigError("stages include 'eval' but the 'eval' section names no eval runs")
    return cfg


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
    """A stage that trains a model in its own out_dir (sft, rl): skipped when already finished."""

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
    from posttrain.eval import harness

    for name, ev in cfg.eval.items():
        console.print(f"[bold]eval[/] {name}: {ev.model}")
        harness.run(ev)


def _report(cfg: PipelineConfig, resume: bool) -> None:
    from posttrain.telemetry.report import write_report

    write_report(cfg.run_dir)


STAGES: dict[str, Callable[[PipelineConfig, bool], None]] = {
    "base": _base,
    "sft": _trained_stage("sft"),
    "rl": _trained_stage("rl"),
    "eval": _eval,
    "report": _report,
}


def run(cfg: PipelineConfig, resume: bool = False) -> Path:
    cfg = resolve(cfg)
    run_dir = Path(cfg.run_dir)
    save_config(cfg, run_dir)
    timings: dict[str, float] = {}
    for stage in cfg.stages:
        console.rule(f"[bold cyan]{stage}")
        start = time.perf_counter()
        STAGES[stage](cfg, resume)
        timings[stage] = time.perf_counter() - start
        console.print(f"[dim]{stage} took {timings[stage]:.1f}s[/]")
    summary = ", ".join(f"{k} {v:.0f}s" for k, v in timings.items())
    console.print(f"[bold green]pipeline done[/] in {sum(timings.values()):.0f}s ({summary})")
    return run_dir / "report.html"
