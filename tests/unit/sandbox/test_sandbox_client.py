"""RemoteSandbox against our server over real HTTP: faithful results, retries only on
infrastructure faults; and the official `sandbox_fusion` client against our server."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from posttrain.sandbox.client import RemoteSandbox
from posttrain.sandbox.fusion import result_to_json, sandbox_error_json
from posttrain.sandbox.types import CommandResult, RunRequest, RunResult, SandboxError, Status
from tests.unit.sandbox.fakes import ScriptedSandbox


def remote(url: str, retries: int = 3) -> RemoteSandbox:
    return RemoteSandbox(url, timeout=30, retries=retries, backoff=0.01)


def flaky_app(failures: list[tuple[int, dict | str]], then: RunResult) -> tuple[FastAPI, list[int]]:
    """Answers each `failures` entry (HTTP code, body) in turn, then `then`; counts attempts."""
    app, attempts = FastAPI(), []

    @app.post("/run_code")
    async def run_code(request: Request):
        attempts.append(1)
        if len(attempts) <= len(failures):
            code, body = failures[len(attempts) - 1]
            return JSONResponse(body, status_code=code)
        return JSONResponse(result_to_json(then))

    return app, attempts


OK = RunResult(compile=None, run=CommandResult(Status.FINISHED, 0, "hi\n", "", 0.1, 0.05))
FAILED = RunResult(compile=None, run=CommandResult(Status.FINISHED, 1, "", "Traceback...\n", 0.1, 0.05))


def test_round_trip_is_faithful(served):
    exotic = RunResult(
        compile=CommandResult(Status.FINISHED, 0, "", "warning: x\n", 0.4, 0.3),
        run=CommandResult(Status.MEMORY_LIMIT, None, "partial", "", 1.25, 0.75),
        files={"out.bin": b"\x00\xffdata", "d/e.txt": b""},
        events=("memory_limit",),
    )
    for result in (OK, FAILED, exotic, RunResult(compile=None, run=CommandResult(Status.ERROR, -11, "", "", 0, 0))):
        url = served(ScriptedSandbox(result))
        with remote(url) as sandbox:
            assert sandbox.run(RunRequest(code="x")) == result


def test_real_programs_through_server_and_client(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    with remote(url) as sandbox:
        assert sandbox.ping()
        request = RunRequest(
            code="import sys, pathlib\npathlib.Path('o.bin').write_bytes(pathlib.Path('i.bin').read_bytes()*2)\n"
            "print(sys.stdin.read().upper())",
            stdin="abc",
            files={"i.bin": b"\x01\x02"},
            fetch_files=("o.bin",),
        )
        result = sandbox.run(request)
        assert result.ok and result.run.stdout == "ABC\n" and dict(result.files) == {"o.bin": b"\x01\x02\x01\x02"}
        sent = subprocess_sandbox.requests[-1]
        assert (sent.stdin, dict(sent.files), sent.fetch_files) == ("abc", {"i.bin": b"\x01\x02"}, ("o.bin",))
        bad = sandbox.run(RunRequest(code="int main(", language="cpp"))
        assert not bad.ok and bad.run is None and bad.compile.return_code != 0


def test_retries_5xx_then_succeeds(served):
    app, attempts = flaky_app([(503, {"detail": "busy"}), (502, "bad gateway"), (500, "oops")], OK)
    with remote(served(app), retries=3) as sandbox:
        assert sandbox.run(RunRequest(code="x")) == OK
    assert len(attempts) == 4


def test_retries_sandboxerror_status_and_gives_up(served):
    app, attempts = flaky_app([(200, sandbox_error_json("queue full"))] * 10, OK)
    with remote(served(app), retries=2) as sandbox, pytest.raises(SandboxError) as info:
        sandbox.run(RunRequest(code="x"))
    assert len(attempts) == 3
    assert "failed after 3 attempts" in str(info.value) and "queue full" in str(info.value)


def test_does_not_retry_failed_user_code(served):
    app, attempts = flaky_app([], FAILED)
    with remote(served(app), retries=3) as sandbox:
        result = sandbox.run(RunRequest(code="x"))
    assert result == FAILED and not result.ok and len(attempts) == 1


def test_refused_request_raises_valueerror_without_retry(served):
    app, attempts = flaky_app([(422, {"detail": "language: 'c' is not supported"})], OK)
    with remote(served(app)) as sandbox, pytest.raises(ValueError, match="HTTP 422.*language"):
        sandbox.run(RunRequest(code="x", language="c"))
    assert len(attempts) == 1


def test_malformed_response_is_retried(served):
    app, attempts = flaky_app([(200, "<html>proxy error</html>"), (200, {"status": "Weird"})], OK)
    with remote(served(app)) as sandbox:
        assert sandbox.run(RunRequest(code="x")) == OK
    assert len(attempts) == 3


def test_connection_refused_is_sandboxerror():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with remote(f"http://127.0.0.1:{port}", retries=1) as sandbox, pytest.raises(SandboxError, match="2 attempts"):
        sandbox.run(RunRequest(code="x"))


def test_arun_and_verl_style_url(served):
    app, attempts = flaky_app([(503, "busy")], OK)
    sandbox = RemoteSandbox(served(app) + "/run_code", retries=2, backoff=0.01)

    async def main():
        results = await asyncio.gather(sandbox.arun(RunRequest(code="x")), sandbox.arun(RunRequest(code="y")))
        await sandbox.aclose()
        return results

    assert asyncio.run(main()) == [OK, OK] and len(attempts) == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="base_url"):
        RemoteSandbox("localhost:8080")
    with pytest.raises(ValueError, match="retries"):
        RemoteSandbox("http://h", retries=-1)


def test_official_sandbox_fusion_client(served, subprocess_sandbox):
    import sandbox_fusion as sf  # the official client, a dev dependency
    url = served(subprocess_sandbox)
    ok = sf.run_code(sf.RunCodeRequest(code="print(input()*2)", stdin="ab", language="python"), endpoint=url)
    assert ok.status == sf.RunStatus.Success and ok.run_result.stdout == "abab\n"
    assert sf.summary_run_code_result(ok, sf.SummaryMapping()) == "Success"
    failed = sf.run_code(sf.RunCodeRequest(code="1/0", language="python"), endpoint=url, max_attempts=1)
    assert failed.status == sf.RunStatus.Failed and "ZeroDivisionError" in failed.run_result.stderr
    assert sf.summary_run_code_result(failed, sf.SummaryMapping()) == "Failed"
    import base64

    files = sf.run_code(
        sf.RunCodeRequest(
            code="open('b.txt','w').write(open('a.txt').read()[::-1])",
            language="python",
            files={"a.txt": base64.b64encode(b"hello").decode()},
            fetch_files=["b.txt"],
        ),
        endpoint=url,
    )
    assert base64.b64decode(files.files["b.txt"]) == b"olleh"
    compile_error = sf.run_code(sf.RunCodeRequest(code="int main(", language="cpp"), endpoint=url)
    assert sf.summary_run_code_result(compile_error, sf.SummaryMapping(CompileFailed="CE")) == "CE"


def test_official_client_accepts_limit_statuses(served):
    import sandbox_fusion as sf  # the official client, a dev dependency
    mle = RunResult(compile=None, run=CommandResult(Status.MEMORY_LIMIT, None, "", "", 0.1, 0.1))
    url = served(ScriptedSandbox(mle))
    response = sf.run_code(sf.RunCodeRequest(code="x", language="python"), endpoint=url, max_attempts=1)
    assert response.status == sf.RunStatus.Failed and response.run_result.return_code == -9
    assert sf.summary_run_code_result(response, sf.SummaryMapping()) == "Failed"


def test_end_to_end_through_local_sandbox(served, local_sandbox):
    url = served(local_sandbox)
    with remote(url) as sandbox:
        ok = sandbox.run(RunRequest(code="print(6*7)"))
        assert ok.ok and ok.run.stdout == "42\n"
        failed = sandbox.run(RunRequest(code="import sys; sys.exit(3)"))
        assert not failed.ok and failed.run.return_code == 3
