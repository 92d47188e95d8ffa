"""The `posttrain` command. Each command loads a typed config (YAML + dotted overrides)
and calls one recipe; heavy imports happen inside the commands so `--help` is instant.

    posttrain run configs/quickstart.yaml
    posttrain sft configs/x.yaml train.lr=1e-4 model.path=/models/m
    posttrain eval --model runs/sft/final --tasks basic_arithmetic,chain_sum --samples 4
    posttrain verify code --tasks T.jsonl --completions C.jsonl --out R.jsonl
    posttrain serve --model runs/quickstart/rl/final --port 8000
    posttrain models get smollm2-135m-instruct --out models/smollm2
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from posttrain.errors import PosttrainError
from posttrain.models.cli import app as models_app
from posttrain.sandbox.cli import app as sandbox_app
from posttrain.tasks.cli import app as tasks_app
from posttrain.verifiers.cli import app as verify_app

app = typer.Typer(
    help="posttrain: post-training for open-weight language models (SFT, then RL with verifiable rewards; eval, sandbox, verifiers).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(verify_app, name="verify")
app.add_typer(models_app, name="models")

err = Console(stderr=True)

ConfigArg = typer.Argument(None, help="YAML config file (optional for commands with defaults).")
OverridesArg = typer.Argument(None, help="Dotted overrides, e.g. train.lr=1e-4 model.path=/m")


def _split(config: Optional[str], overrides: Optional[list[str]]) -> tuple[Optional[str], list[str]]:
    """A first positional argument containing '=' is an override, not a file."""
    rest = list(overrides or [])
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *rest]
    return config, rest


@app.command()
def run(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue each stage from its newest complete checkpoint."),
) -> None:
    """Run a pipeline of stages (base, sft, rl, eval, report) from one config."""
    from posttrain.config import PipelineConfig, load_config

    path, rest = _split(config, overrides)
    cfg = load_config(PipelineConfig, path, rest)
    from posttrain.recipes import pipeline

    report = pipeline.run(cfg, resume=resume)
    err.print(f"[bold green]done[/] report: {report}")


@app.command()
def base(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    out: Optional[str] = typer.Option(None, "--out", help="Directory for the base model (overrides out_dir)."),
) -> None:
    """Build the embedded default base model: local tokenizer + tiny HF model pretrained on CPU."""
    from posttrain.config import BaseConfig, load_config

    path, rest = _split(config, overrides)
    if out is not None:
        rest.append(f"out_dir={out}")
    cfg = load_config(BaseConfig, path, rest)
    from posttrain.recipes import base as base_recipe

    model_dir = base_recipe.run(cfg)
    err.print(f"[bold green]base model[/]: {model_dir}")


@app.command()
def sft(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest complete checkpoint."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Count and report bad dataset lines instead of failing."),
) -> None:
    """Supervised fine-tuning on chat data, with sequence packing."""
    from posttrain.config import SFTConfig, load_config

    path, rest = _split(config, overrides)
    if skip_bad_lines:
        rest.append("data.skip_bad_lines=true")
    cfg = load_config(SFTConfig, path, rest)
    from posttrain.recipes import sft as sft_recipe

    final = sft_recipe.run(cfg, resume=resume)
    err.print(f"[bold green]sft model[/]: {final}")


@app.command()
def rl(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue exactly from the newest complete checkpoint."),
) -> None:
    """Reinforcement learning with verifiable rewards (GRPO, Dr. GRPO, RLOO, REINFORCE++)."""
    from posttrain.config import RLConfig, load_config

    path, rest = _split(config, overrides)
    cfg = load_config(RLConfig, path, rest)
    from posttrain.recipes import rl as rl_recipe

    final = rl_recipe.run(cfg, resume=resume)
    err.print(f"[bold green]rl model[/]: {final}")


@app.command("eval")
def eval_(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    model: Optional[str] = typer.Option(None, "--model", help="Model directory (HF layout)."),
    tasks: Optional[str] = typer.Option(
        None, "--tasks", help="NAME[:N],FILE[:N],...: reasoning-gym domains, JSONL task files, HumanEval-format files."),
    samples: Optional[int] = typer.Option(None, "--samples", help="K completions per task (pass@K)."),
    n: Optional[int] = typer.Option(None, "--n", help="Tasks per reasoning-gym domain when SPEC gives no :N."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Rollout engine: paged (built-in, default) or hf."),
    out: Optional[str] = typer.Option(None, "--out", help="Where to write the JSON results."),
) -> None:
    """Evaluate a model through the rollout engine and the verifiers: pass@1 and pass@K per domain, with 95% intervals."""
    from posttrain.config import EvalConfig, load_config

    path, rest = _split(config, overrides)
    for key, value in (("model", model), ("tasks", tasks), ("samples", samples), ("n_per_domain", n),
                       ("engine", engine), ("out", out)):
        if value is not None:
            rest.append(f"{key}={value}")
    cfg = load_config(EvalConfig, path, rest)
    from posttrain.eval import harness

    harness.run(cfg)


@app.command()
def report(run_dir: str = typer.Argument(..., help="A run directory (one stage or a whole pipeline).")) -> None:
    """Write RUN_DIR/report.html: config, curves and eval tables in one self-contained page."""
    from posttrain.telemetry.report import write_report

    path = write_report(run_dir)
    err.print(f"[bold green]report[/]: {path}")


@app.command()
def serve(
    model: str = typer.Option(..., "--model", help="Model directory (HF layout)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    engine: str = typer.Option("paged", "--engine", help="Rollout engine: paged (built-in) or hf (reference)."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Name clients use (default: the path)."),
    enable_weight_updates: bool = typer.Option(
        False, "--enable-weight-updates", help="Serve POST /update_weights_from_disk (loads any path a client names: 127.0.0.1 only)."),
    mode: str = typer.Option(
        "fast", "--mode", help="paged engine: fast (int8 weight-only matmuls and n-gram speculation; "
        "interactive use) or standard (the checkpoint's exact weights; long, hard reasoning)."),
) -> None:
    """An OpenAI-compatible HTTP server (/v1/models, /v1/completions, /v1/chat/completions)."""
    from posttrain.rollout.server import serve as run_server

    run_server(model, host=host, port=port, engine=engine, model_name=model_name,
               enable_weight_updates=enable_weight_updates, mode=mode)


def main() -> None:
    try:
        app()
    except PosttrainError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("[bold red]interrupted[/]")
        sys.exit(130)


if __name__ == "__main__":
    main()
