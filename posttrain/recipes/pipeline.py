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

from posttrain.config import PipelineConfig, save_config
from posttrain.errors import ConfigError

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


def _sft(cfg: PipelineConfig, resume: bool) -> None:
    from posttrain.recipes import sft

    sft.run(cfg.sft, resume=resume)


def _rl(cfg: PipelineConfig, resume: bool) -> None:
    from posttrain.recipes import rl

    rl.run(cfg.rl, resume=resume)


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
    "sft": _sft,
    "rl": _rl,
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
