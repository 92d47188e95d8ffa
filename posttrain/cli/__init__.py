"""The `posttrain` command. Each command loads a typed config (YAML + dotted overrides)
and calls one recipe; heavy imports happen inside the commands so `--help` is instant. The
sub-command groups are modules here: tasks.py (`posttrain tasks`), verify.py, sandbox.py, models.py, export.py (`posttrain export`).

    posttrain run configs/quickstart.yaml
    posttrain sft configs/x.yaml train.lr=1e-4 model.path=/models/m
    posttrain dpo model.path=runs/sft/final data.train=pairs.jsonl algo.loss=sigmoid
    posttrain rm model.path=runs/sft/final data.train=pairs.jsonl
    posttrain eval --model runs/sft/final --tasks basic_arithmetic,chain_sum --samples 4
    posttrain verify code --tasks T.jsonl --completions C.jsonl --out R.jsonl
    posttrain serve --model runs/quickstart/rl/final --port 8000
    posttrain models get smollm2-135m-instruct --out models/smollm2
    posttrain export runs/sft/final --format gguf --dtype q8_0
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from posttrain.core.errors import ConfigError, PosttrainError
from posttrain.cli.export import export as export_command
from posttrain.cli.models import app as models_app
from posttrain.cli.sandbox import app as sandbox_app
from posttrain.cli.tasks import app as tasks_app
from posttrain.cli.verify import app as verify_app
from posttrain.domains import load_domains

app = typer.Typer(
    help="posttrain: post-training for open-weight language models (SFT, reward models and DPO, RL with verifiable rewards; eval, sandbox, verifiers).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _domains() -> None:
    """Every command sees every domain's task sources, envs and verifiers."""
    load_domains()


app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(verify_app, name="verify")
app.add_typer(models_app, name="models")
app.command("export")(export_command)

err = Console(stderr=True)
DEFAULT_SUITES = "configs/suites.yaml"

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
    """Run a pipeline of stages (base, sft, rm, dpo, rl, eval, report) from one config."""
    from posttrain.config.pipeline import PipelineConfig
    from posttrain.recipes import pipeline

    _run(PipelineConfig, pipeline, "done, report", config, overrides, resume)


@app.command()
def base(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    out: Optional[str] = typer.Option(None, "--out", help="Directory for the base model (overrides out_dir)."),
) -> None:
    """Build the embedded default base model: local tokenizer + tiny HF model pretrained on CPU."""
    from posttrain.config.base import load_config
    from posttrain.config.pipeline import BaseConfig

    path, rest = _split(config, overrides)
    if out is not None:
        rest.append(f"out_dir={out}")
    cfg = load_config(BaseConfig, path, rest)
    from posttrain.recipes import base as base_recipe

    model_dir = base_recipe.run(cfg)
    err.print(f"[bold green]base model[/]: {model_dir}")


def _run(config_cls, recipe, label: str, config, overrides, resume: bool, skip_bad_lines: bool = False) -> None:
    """Load `config_cls` from the file and overrides (with --skip-bad-lines: data.skip_bad_lines),
    run `recipe.run(cfg, resume=...)`, print what it made."""
    from posttrain.config.base import load_config

    path, rest = _split(config, overrides)
    if skip_bad_lines:
        rest.append("data.skip_bad_lines=true")
    final = recipe.run(load_config(config_cls, path, rest), resume=resume)
    err.print(f"[bold green]{label}[/]: {final}")


ResumeOpt = typer.Option(False, "--resume", help="Continue from the newest complete checkpoint.")
SkipOpt = typer.Option(False, "--skip-bad-lines", help="Count and report bad data lines instead of failing.")


@app.command()
def sft(config: Optional[str] = ConfigArg, overrides: Optional[list[str]] = OverridesArg,
        resume: bool = ResumeOpt, skip_bad_lines: bool = SkipOpt) -> None:
    """Supervised fine-tuning on chat data, with sequence packing."""
    from posttrain.config.sft import SFTConfig
    from posttrain.recipes import sft as recipe

    _run(SFTConfig, recipe, "sft model", config, overrides, resume, skip_bad_lines)


@app.command()
def rm(config: Optional[str] = ConfigArg, overrides: Optional[list[str]] = OverridesArg,
       resume: bool = ResumeOpt, skip_bad_lines: bool = SkipOpt) -> None:
    """Train a Bradley-Terry reward model on preference pairs (saved as an HF sequence classifier)."""
    from posttrain.config.pref import RMConfig
    from posttrain.recipes import rm as recipe

    _run(RMConfig, recipe, "reward model", config, overrides, resume, skip_bad_lines)


@app.command()
def dpo(config: Optional[str] = ConfigArg, overrides: Optional[list[str]] = OverridesArg,
        resume: bool = ResumeOpt, skip_bad_lines: bool = SkipOpt) -> None:
    """Preference optimisation: DPO, IPO, hinge, robust DPO, SimPO, ORPO, KTO; offline or online."""
    from posttrain.config.pref import DPOConfig
    from posttrain.recipes import dpo as recipe

    _run(DPOConfig, recipe, "dpo model", config, overrides, resume, skip_bad_lines)


@app.command()
def rl(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    resume: bool = typer.Option(False, "--resume", help="Continue exactly from the newest complete checkpoint."),
) -> None:
    """Reinforcement learning with verifiable rewards (GRPO, Dr. GRPO, RLOO, REINFORCE++)."""
    from posttrain.config.rl import RLConfig
    from posttrain.recipes import rl as recipe

    _run(RLConfig, recipe, "rl model", config, overrides, resume)


@app.command("eval")
def eval_(
    config: Optional[str] = ConfigArg,
    overrides: Optional[list[str]] = OverridesArg,
    model: Optional[list[str]] = typer.Option(
        None, "--model", help="Model directory (HF layout); with --suite, repeat it to compare models side by side."),
    label: Optional[list[str]] = typer.Option(None, "--label", help="Names of the --model dirs, in order (default: dir names)."),
    suite: Optional[str] = typer.Option(
        None, "--suite", help=f"A named suite from CONFIG's suites (default file: {DEFAULT_SUITES})."),
    tasks: Optional[str] = typer.Option(
        None, "--tasks", help="NAME[:N],FILE[:N],...: reasoning-gym domains, sources (humaneval, ...), JSONL / HumanEval files."),
    samples: Optional[int] = typer.Option(None, "--samples", help="K completions per task (pass@K)."),
    n: Optional[int] = typer.Option(None, "--n", help="Tasks per generated domain when an item gives no :N."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Rollout engine: paged (built-in, default) or hf."),
    out: Optional[str] = typer.Option(None, "--out", help="JSON results file; with --suite, a directory (default runs/eval)."),
) -> None:
    """Evaluate models through the rollout engine and the verifiers: pass@k per domain with 95% intervals;
    with --suite and several --model, side by side with paired significance tests and the suite's gates."""
    path, rest = _split(config, overrides)
    models = list(model or [])
    if suite is not None:
        _eval_suite(path or DEFAULT_SUITES, rest, suite, models, list(label or []), out, engine, samples, n, tasks)
        return
    from posttrain.config.base import load_config
    from posttrain.config.eval import EvalConfig

    if len(models) > 1 or label:
        raise ConfigError("eval: several --model (and --label) need --suite NAME; without it, give one --model")
    for key, value in (("model", models[0] if models else None), ("tasks", tasks), ("samples", samples),
                       ("n_per_domain", n), ("engine", engine), ("out", out)):
        if value is not None:
            rest.append(f"{key}={value}")
    cfg = load_config(EvalConfig, path, rest)
    from posttrain.eval import run as harness
    harness.run(cfg)


def _eval_suite(path: str, rest: list[str], name: str, models: list[str], labels: list[str], out: Optional[str],
                engine: Optional[str], samples: Optional[int], n: Optional[int], tasks: Optional[str]) -> None:
    from posttrain.core.errors import gate_failure
    from posttrain.eval.compare_models import load_suites, run_suite

    if not models:
        raise ConfigError("eval --suite: name at least one --model")
    if labels and len(labels) != len(models):
        raise ConfigError(f"eval: {len(labels)} --label for {len(models)} --model; give one per model or none")
    if tasks is not None:
        raise ConfigError("eval: --tasks and --suite exclude each other (a suite names its tasks)")
    rest = rest + [f"suites.{name}.{k}={v}" for k, v in (("samples", samples), ("n", n)) if v is not None]
    suites, gates = load_suites(path, rest)
    if name not in suites:
        raise ConfigError(f"eval: no suite {name!r} in {path} (suites: {', '.join(sorted(suites))})")
    pairs = list(zip(labels or [Path(m).name for m in models], models))
    cmp = run_suite(name, suites[name], pairs, out or "runs/eval", gates, **({"engine": engine} if engine else {}))
    failed = [g for g in cmp["gates"] if not g["passed"]]
    if failed:
        raise gate_failure(failed)


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
    engine: str = typer.Option("paged", "--engine", help="Engine: paged (built-in), hf (reference), or llamacpp (llama.cpp on a GGUF export of the model; needs llama-cpp-python; the fastest at batch 1 on a CPU)."),
    model_name: Optional[str] = typer.Option(None, "--model-name", help="Name clients use (default: the path)."),
    enable_weight_updates: bool = typer.Option(
        False, "--enable-weight-updates", help="Serve POST /update_weights_from_disk (loads any path a client names: 127.0.0.1 only)."),
    mode: str = typer.Option(
        "fast", "--mode", help="paged engine: fast (int8 weight-only matmuls and n-gram speculation; "
        "interactive use) or standard (the checkpoint's exact weights; long, hard reasoning). "
        "llamacpp engine: fast serves a q8_0 GGUF, standard an f32 one."),
) -> None:
    """An OpenAI-compatible HTTP server (/v1/models, /v1/completions, /v1/chat/completions)."""
    from posttrain.engine.server.app import LLAMACPP_MODES, serve as run_server

    options = {}
    if engine == "llamacpp" and mode in LLAMACPP_MODES:
        from posttrain.engine.llamacpp import require_llama_cpp
        from posttrain.models.export import gguf_for  # the engine reads GGUF files; exporting is a layer up

        require_llama_cpp()  # before an export that would be for nothing
        options["gguf"] = str(gguf_for(model, LLAMACPP_MODES[mode]["dtype"]))
    run_server(model, host=host, port=port, engine=engine, model_name=model_name,
               enable_weight_updates=enable_weight_updates, mode=mode, **options)


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
