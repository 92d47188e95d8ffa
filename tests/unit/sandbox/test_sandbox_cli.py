"""`posttrain sandbox run|serve` through typer's CliRunner."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from posttrain.cli import sandbox as cli
from tests.unit.sandbox.fakes import ScriptedSandbox, SubprocessSandbox

runner = CliRunner()


class Closing(SubprocessSandbox):
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    """Make the CLI build a SubprocessSandbox instead of a LocalSandbox; record the arguments."""
    made: list[tuple] = []

    def build(workers, max_queue, unisolated):
        made.append((workers, max_queue, unisolated))
        sandbox = Closing()
        made.append(sandbox)
        return sandbox

    monkeypatch.setattr(cli, "_local_sandbox", build)
    return made


def test_run_prints_sandboxfusion_json(tmp_path, fake):
    program = tmp_path / "p.py"
    program.write_text("print(input()[::-1])")
    stdin = tmp_path / "in.txt"
    stdin.write_text("abc\n")
    result = runner.invoke(cli.app, ["run", "--language", "python", str(program), "--stdin-file", str(stdin),
                                     "--timeout", "5", "--memory-mb", "256", "--unisolated"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "Success" and data["run_result"]["stdout"] == "cba\n"
    (workers, queue, unisolated), sandbox = fake
    assert unisolated is True and sandbox.closed
    (request,) = sandbox.requests
    assert (request.run_timeout, request.memory_limit_mb, request.stdin) == (5.0, 256, "abc\n")


def test_run_failing_program_exits_1(tmp_path, fake):
    program = tmp_path / "bad.c"
    program.write_text("int main(){ return 4; }")
    result = runner.invoke(cli.app, ["run", "-l", "c", str(program)])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "Failed" and data["run_result"]["return_code"] == 4
    assert fake[0][2] is False  # isolated by default


def test_run_sandbox_error_prints_sandboxerror(tmp_path, monkeypatch):
    from posttrain.sandbox.types import SandboxError

    monkeypatch.setattr(cli, "_local_sandbox", lambda *a: _Closable(error=SandboxError("bwrap: no user namespaces")))
    program = tmp_path / "p.py"
    program.write_text("print(1)")
    result = runner.invoke(cli.app, ["run", str(program)])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["status"] == "SandboxError" and "no user namespaces" in data["message"]


class _Closable(ScriptedSandbox):
    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "missing.py"], "error: FILE missing.py: no such file"),
        (["run", "{prog}", "--stdin-file", "nope.txt"], "error: --stdin-file nope.txt: no such file"),
        (["run", "-l", "cobol", "{prog}"], "error: --language: 'cobol' is not supported"),
        (["run", "{prog}", "--timeout", "0"], "error: --timeout: must be a positive"),
    ],
)
def test_run_bad_arguments_exit_2_with_one_line(tmp_path, fake, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text("print(1)")
    result = runner.invoke(cli.app, [a.replace("{prog}", "p.py") for a in args])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(message) and len(result.stderr.strip().splitlines()) == 1
    assert fake == []  # nothing was built, nothing ran


def test_run_end_to_end_with_local_sandbox(tmp_path, local_sandbox):
    program = tmp_path / "p.py"
    program.write_text("print(sum(range(10)))")
    result = runner.invoke(cli.app, ["run", str(program), "--unisolated"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_result"]["stdout"] == "45\n"


def test_serve_end_to_end_with_local_sandbox(local_sandbox):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = "from posttrain.cli.sandbox import app; app()"
    proc = subprocess.Popen(
        [sys.executable, "-c", command, "serve", "--port", str(port), "--workers", "2", "--unisolated"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{url}/v1/ping", timeout=1).json() == "pong":
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        data = httpx.post(f"{url}/run_code", json={"code": "print('up')", "language": "python"}, timeout=30).json()
        assert data["status"] == "Success" and data["run_result"]["stdout"] == "up\n"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
