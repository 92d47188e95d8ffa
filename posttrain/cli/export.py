"""`posttrain export MODEL --format gguf [--dtype f16|f32|q8_0] [--out FILE] [--force]`: a trained
(or any HF Llama / SmolLM2 / Qwen2) model directory as one GGUF file for llama.cpp and ollama.

Errors are PosttrainErrors: `posttrain` prints them as one line and exits 2.
"""

from __future__ import annotations

import time
from typing import Optional

import typer


def export(
    model: str = typer.Argument(..., help="HF model directory (e.g. runs/sft/final) or a checkpoint directory."),
    fmt: str = typer.Option("gguf", "--format", help="Output format: gguf."),
    dtype: str = typer.Option("f16", "--dtype", help="Weight type: f16, f32 or q8_0 (norms stay f32)."),
    out: Optional[str] = typer.Option(None, "--out", help="Output file (default: MODEL-DTYPE.gguf beside MODEL)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output file."),
) -> None:
    """Export a model for deployment: GGUF with its tokenizer and chat template (llama.cpp, ollama)."""
    from posttrain.models.export import check_export_args, export_gguf

    check_export_args(fmt, dtype)
    started = time.monotonic()
    done = export_gguf(model, out, dtype=dtype, force=force)
    for warning in done.warnings:
        typer.secho(f"warning: {warning}", err=True, fg="yellow")
    types = ", ".join(f"{k} x{v}" for k, v in sorted(done.tensor_types.items()))
    typer.echo(f"wrote {done.out} ({done.architecture}, {done.parameters / 1e6:.1f}M parameters, {types}; "
               f"{done.size_bytes / 1e6:.1f} MB) in {time.monotonic() - started:.1f}s", err=True)
