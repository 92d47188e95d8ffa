"""`posttrain sandbox ...` commands: run one program, or serve the sandbox over HTTP.

    posttrain sandbox serve --host 127.0.0.1 --port 8080 [--workers N] [--max-queue N] [--unisolated]
    posttrain sandbox run --language python FILE [--stdin-file F] [--timeout S] [--memory-mb N] [--unisolated]

`run` prints the SandboxFusion response JSON (the same shape `POST /run_code` returns)
and exits 0 when the program succeeded, 1 when it failed or the sandbox failed, and 2
for bad arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from posttrain.sandbox.types import LANGUAGES

app = typer.Typer(help="Run code in the sandbox, or serve the sandbox over HTTP.", no_args_is_help=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _local_sandbox(workers: Optional[int], max_queue: int, unisolated: bool) -> Any:
    """A LocalSandbox (imported here so `--help` works without the executor's dependencies)."""
    try:
        from posttrain.sandbox import LocalSandbox
    except ImportError as e:
        raise _fail(f"the local sandbox is not available: {e}", 1) from None
    kwargs: dict[str, Any] = {"max_queue": max_queue, "isolation": "none" if unisolated else "bwrap"}
    if workers is not None:
        kwargs["max_workers"] = workers
    return LocalSandbox(**kwargs)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind; keep it private, the server has no auth."),
    port: int = typer.Option(8080, help="TCP port."),
    workers: Optional[int] = typer.Option(None, min=1, help="Programs run at once (default: CPU count)."),
    max_queue: int = typer.Option(64, min=0, help="Requests waiting beyond those; more get SandboxError."),
    unisolated: bool = typer.Option(False, "--unisolated", help="Run without bubblewrap (trusted code only)."),
) -> None:
    """Serve the sandbox over HTTP with SandboxFusion's API (POST /run_code, GET /v1/ping)."""
    from posttrain.sandbox.server import serve as serve_http

    sandbox = _local_sandbox(workers, max_queue, unisolated)
    typer.echo(f"sandbox: serving on http://{host}:{port} (isolation: {'none' if unisolated else 'bwrap'})", err=True)
    try:
        serve_http(host, port, sandbox=sandbox)
    finally:
        sandbox.close()


def _read_text(path: Path, what: str) -> str:
    if not path.is_file():
        raise _fail(f"{what} {path}: no such file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(f"{what} {path}: cannot read as UTF-8 text ({e})")


@app.command()
def run(
    file: Path = typer.Argument(..., help="Source file of the program to run."),
    language: str = typer.Option("python", "--language", "-l", help=f"One of: {', '.join(LANGUAGES)}."),
    stdin_file: Optional[Path] = typer.Option(None, "--stdin-file", help="File whose text is the program's stdin."),
    timeout: float = typer.Option(10.0, help="Run time limit in seconds (wall clock)."),
    memory_mb: int = typer.Option(512, "--memory-mb", help="Memory limit in MiB."),
    unisolated: bool = typer.Option(False, "--unisolated", help="Run without bubblewrap (trusted code only)."),
) -> None:
    """Run one program in the sandbox and print the result as SandboxFusion JSON."""
    from posttrain.sandbox.fusion import result_to_json, sandbox_error_json
    from posttrain.sandbox.types import RunRequest, SandboxError

    if language not in LANGUAGES:
        raise _fail(f"--language: {language!r} is not supported; use one of {', '.join(LANGUAGES)}")
    if not timeout > 0:
        raise _fail(f"--timeout: must be a positive number of seconds, got {timeout}")
    if memory_mb <= 0:
        raise _fail(f"--memory-mb: must be a positive number of MiB, got {memory_mb}")
    code = _read_text(file, "FILE")
    stdin = _read_text(stdin_file, "--stdin-file") if stdin_file is not None else ""
    request = RunRequest(code=code, language=language, stdin=stdin, run_timeout=timeout, memory_limit_mb=memory_mb)

    sandbox = _local_sandbox(1, 1, unisolated)
    try:
        result = sandbox.run(request)
        out, ok = result_to_json(result), result.ok
    except SandboxError as e:
        out, ok = sandbox_error_json(f"sandbox error: {e}"), False
    finally:
        sandbox.close()
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
    raise typer.Exit(0 if ok else 1)
