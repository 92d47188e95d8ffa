"""The SandboxFusion-compatible HTTP server, exercised over real HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pytest

from posttrain.sandbox.fusion import command_to_json, result_to_json
from posttrain.sandbox.types import CommandResult, RunResult, SandboxError, Status


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def post(url: str, body, **kwargs) -> httpx.Response:
    if not isinstance(body, (dict, list)):
        return httpx.post(f"{url}/run_code", content=body, timeout=30, **kwargs)
    return httpx.post(f"{url}/run_code", json=body, timeout=30, **kwargs)


def test_ping(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    response = httpx.get(f"{url}/v1/ping")
    assert response.status_code == 200 and response.json() == "pong"


def test_success_with_stdin(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    code = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))"
    data = post(url, {"code": code, "language": "python", "stdin": "1 2 3\n"}).json()
    assert data["status"] == "Success" and data["message"] == ""
    assert data["compile_result"] is None
    run = data["run_result"]
    assert (run["status"], run["return_code"], run["stdout"]) == ("Finished", 0, "6\n")
    assert run["execution_time"] > 0 and data["files"] == {}


def test_failing_code_is_200_failed_with_run_result(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    response = post(url, {"code": "raise SystemExit('boom')", "language": "python"})
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "Failed" and data["message"] == "run: exited with code 1"
    assert data["run_result"]["return_code"] == 1 and "boom" in data["run_result"]["stderr"]


def test_c_compile_error_and_success(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    bad = post(url, {"code": "int main( { return 0; }", "language": "c"}).json()
    assert bad["status"] == "Failed" and bad["run_result"] is None
    assert bad["compile_result"]["status"] == "Finished" and bad["compile_result"]["return_code"] != 0
    assert "error" in bad["compile_result"]["stderr"] and bad["message"].startswith("compile: exited with code")
    good = post(url, {"code": '#include <stdio.h>\nint main(){puts("hi");return 0;}', "language": "c"}).json()
    assert good["status"] == "Success" and good["run_result"]["stdout"] == "hi\n"
    assert good["compile_result"]["return_code"] == 0


def test_files_in_and_fetch_files_back(served, subprocess_sandbox):
    url = served(subprocess_sandbox)
    blob = bytes(range(256)) * 3
    code = (
        "import pathlib\n"
        "data = pathlib.Path('in/blob.bin').read_bytes()\n"
        "pathlib.Path('out').mkdir()\n"
        "pathlib.Path('out/rev.bin').write_bytes(data[::-1])\n"
    )
    body = {
        "code": code,
        "language": "python",
        "files": {"in/blob.bin": b64(blob), "skipped.txt": None},
        "fetch_files": ["out/rev.bin", "missing.txt", "out/rev.bin"],
    }
    data = post(url, body).json()
    assert data["status"] == "Success", data
    assert set(data["files"]) == {"out/rev.bin"}
    assert base64.b64decode(data["files"]["out/rev.bin"]) == blob[::-1]
    (request,) = subprocess_sandbox.requests
    assert dict(request.files) == {"in/blob.bin": blob} and request.fetch_files == ("out/rev.bin", "missing.txt")


@pytest.mark.parametrize(
    "files, fetch, field",
    [
        ({"/etc/passwd": b64(b"x")}, [], "files['/etc/passwd']"),
        ({"../escape.txt": b64(b"x")}, [], "files['../escape.txt']"),
        ({"a/../../escape.txt": b64(b"x")}, [], "files['a/../../escape.txt']"),
        ({}, ["/etc/shadow"], "fetch_files[0]"),
        ({}, ["ok.txt", "sub/../../x"], "fetch_files[1]"),
        ({}, ["."], "fetch_files[0]"),
    ],
)
def test_paths_outside_the_work_directory_are_refused_before_running(served, subprocess_sandbox, files, fetch, field):
    url = served(subprocess_sandbox)
    response = post(url, {"code": "print(1)", "language": "python", "files": files, "fetch_files": fetch})
    assert response.status_code == 422
    assert response.json()["detail"].startswith(field + ":")
    assert subprocess_sandbox.requests == []


@pytest.mark.parametrize(
    "body, code, starts",
    [
        (b"{not json", 400, "request body: not valid JSON"),
        (b'{"code": "print(1)", "language": "python", "run_timeout": NaN}', 400, "request body: not valid JSON"),
        (b"[1, 2]", 422, "request body: must be a JSON object"),
        ({"language": "python"}, 422, "code: is required"),
        ({"code": 5, "language": "python"}, 422, "code: must be a string"),
        ({"code": "1", "language": "cobol"}, 422, "language: 'cobol' is not supported"),
        ({"code": "1", "language": "python", "run_timeout": "ten"}, 422, "run_timeout: must be a number"),
        ({"code": "1", "language": "python", "compile_timeout": -1}, 422, "compile_timeout: must be a positive"),
        ({"code": "1", "language": "python", "run_timeout": 0}, 422, "run_timeout: must be a positive"),
        ({"code": "1", "language": "python", "memory_limit_MB": "lots"}, 422, "memory_limit_MB: must be an integer"),
        ({"code": "1", "language": "python", "stdin": 3}, 422, "stdin: must be a string"),
        ({"code": "1", "language": "python", "files": ["a"]}, 422, "files: must be an object"),
        ({"code": "1", "language": "python", "files": {"a": "@@@"}}, 422, "files['a']: content is not valid base64"),
        ({"code": "1", "language": "python", "fetch_files": "a"}, 422, "fetch_files: must be a list"),
    ],
)
def test_malformed_requests_get_4xx_naming_the_field(served, subprocess_sandbox, body, code, starts):
    url = served(subprocess_sandbox)
    response = post(url, body)
    assert response.status_code == code
    detail = response.json()["detail"]
    assert detail.startswith(starts) and "\n" not in detail
    assert subprocess_sandbox.requests == []


def test_unknown_fields_ignored_and_sandboxfusion_defaults(served, subprocess_sandbox):
    url = served(subprocess_sandbox, default_memory_limit_mb=300)
    body = {"code": "print('ok')", "language": "python", "args": ["-x"], "memory_limit_MB": -1, "whatever": {"a": 1}}
    data = post(url, body).json()
    assert data["status"] == "Success" and data["run_result"]["stdout"] == "ok\n"
    (request,) = subprocess_sandbox.requests
    assert request.memory_limit_mb == 300 and request.stdin == ""


def test_body_over_the_limit_is_413(served, subprocess_sandbox):
    url = served(subprocess_sandbox, max_body_bytes=1000)
    response = post(url, {"code": "#" * 2000, "language": "python"})
    assert response.status_code == 413 and "limit of 1000 bytes" in response.json()["detail"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"code": "'
        yield b"#" * 2000
        yield b'", "language": "python"}'

    assert post(url, chunks()).status_code == 413
    assert subprocess_sandbox.requests == []


def test_sandbox_error_is_reported_as_sandboxerror(served):
    from tests.unit.sandbox.fakes import ScriptedSandbox

    url = served(ScriptedSandbox(error=SandboxError("queue full (64 waiting)")))
    response = post(url, {"code": "print(1)", "language": "python"})
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "SandboxError" and data["message"] == "sandbox error: queue full (64 waiting)"
    url = served(ScriptedSandbox(error=KeyError("bug")))
    data = post(url, {"code": "print(1)", "language": "python"}).json()
    assert data["status"] == "SandboxError" and data["message"].startswith("internal error: KeyError")


def test_blocking_runs_do_not_block_the_event_loop(served):
    from tests.unit.sandbox.fakes import ScriptedSandbox

    done = CommandResult(Status.FINISHED, 0, "", "", 0.0, 0.0)
    url = served(ScriptedSandbox(RunResult(compile=None, run=done), delay=1.0))
    threads = [threading.Thread(target=post, args=(url, {"code": "", "language": "bash"})) for _ in range(2)]
    start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.2)
    ping_start = time.monotonic()
    assert httpx.get(f"{url}/v1/ping").json() == "pong"
    assert time.monotonic() - ping_start < 0.5
    for t in threads:
        t.join()
    assert time.monotonic() - start < 1.8  # the two runs overlapped


def test_status_mapping_onto_sandboxfusion():
    def cmd(status, rc):
        return command_to_json(CommandResult(status, rc, "o", "e", 1.5, 0.5))

    assert cmd(Status.FINISHED, 3)["status"] == "Finished" and cmd(Status.FINISHED, 3)["return_code"] == 3
    assert (cmd(Status.TIME_LIMIT, None)["status"], cmd(Status.TIME_LIMIT, None)["return_code"]) == (
        "TimeLimitExceeded",
        None,
    )
    assert (cmd(Status.ERROR, -11)["status"], cmd(Status.ERROR, -11)["return_code"]) == ("Finished", -11)
    assert cmd(Status.ERROR, None)["status"] == "Error"
    for limit in (Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT):
        assert (cmd(limit, None)["status"], cmd(limit, None)["return_code"]) == ("Finished", -9)
        assert cmd(limit, None)["posttrain"] == {"status": limit.value, "return_code": None}
        assert cmd(limit, 1)["return_code"] == 1
    full = cmd(Status.FINISHED, 0)
    assert (full["execution_time"], full["cpu_time"], full["stdout"], full["stderr"]) == (1.5, 0.5, "o", "e")

    mle = RunResult(compile=None, run=CommandResult(Status.MEMORY_LIMIT, None, "", "", 0.1, 0.1), events=("memory",))
    data = result_to_json(mle, pod_name="pod-1")
    assert data["status"] == "Failed" and data["message"] == "run: MemoryLimitExceeded"
    assert data["executor_pod_name"] == "pod-1" and data["posttrain"] == {"events": ["memory"]}
