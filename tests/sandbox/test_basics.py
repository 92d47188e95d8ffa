"""Ordinary correctness: each language, stdin, files in and out, compile errors and timeouts,
bad input, the explicit unisolated mode, the refusal without bubblewrap, pool and metrics."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from posttrain.sandbox import LocalSandbox, RunRequest, SandboxError, Status

C_HELLO = '#include <stdio.h>\nint main(void){char n[64]; scanf("%63s", n); printf("hello %s\\n", n); return 0;}\n'
CPP_HELLO = '#include <iostream>\n#include <string>\nint main(){std::string n; std::cin >> n; std::cout << "hello " << n << "\\n";}\n'
HELLO = {
    "python": "print('hello', input())",
    "bash": "read n; echo hello $n",
    "c": C_HELLO,
    "cpp": CPP_HELLO,
}


@pytest.mark.parametrize("language", ["python", "bash", "c", "cpp"])
def test_hello_each_language_with_stdin(sandbox, language):
    r = sandbox.run(RunRequest(code=HELLO[language], language=language, stdin="world\n"))
    assert r.ok, r
    assert r.run.stdout == "hello world\n"
    assert r.run.status is Status.FINISHED and r.run.return_code == 0
    assert r.run.wall_time > 0 and r.run.cpu_time > 0
    assert (r.compile is not None) == (language in ("c", "cpp"))


def test_return_code_and_stderr_are_reported(sandbox):
    r = sandbox.run(RunRequest(code="import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"))
    assert (r.run.status, r.run.return_code, r.run.stdout, r.run.stderr) == (Status.FINISHED, 3, "out\n", "err\n")
    assert not r.ok


def test_files_in_and_out_with_subdirectories(sandbox):
    code = (
        "import os\n"
        "data = open('data/in.txt').read()\n"
        "os.makedirs('out/deep', exist_ok=True)\n"
        "open('out/deep/result.txt', 'w').write(data.upper())\n"
        "open('bin.dat', 'wb').write(bytes(range(256)))\n"
    )
    r = sandbox.run(
        RunRequest(
            code=code,
            files={"data/in.txt": b"abc", "./data/other.bin": b"\x00\xff"},
            fetch_files=("out/deep/result.txt", "bin.dat", "data/other.bin", "missing.txt"),
        )
    )
    assert r.ok, r
    assert r.files == {"out/deep/result.txt": b"ABC", "bin.dat": bytes(range(256)), "data/other.bin": b"\x00\xff"}
    assert r.events == ()


def test_python_can_import_a_module_given_as_a_file(sandbox):
    r = sandbox.run(RunRequest(code="from solution import f\nprint(f(2))", files={"solution.py": b"def f(x):\n    return x * 21\n"}))
    assert r.run.stdout == "42\n", r


def test_bash_and_c_with_input_files(sandbox):
    r = sandbox.run(RunRequest(code="wc -c < in.txt", language="bash", files={"in.txt": b"12345"}))
    assert r.run.stdout.strip() == "5"
    c = '#include <stdio.h>\nint main(void){FILE*f=fopen("n.txt","r");int n;fscanf(f,"%d",&n);printf("%d\\n",n*2);return 0;}'
    r = sandbox.run(RunRequest(code=c, language="c", files={"n.txt": b"21"}))
    assert r.run.stdout == "42\n", r


def test_c_syntax_error_is_a_finished_compile_with_nonzero_code(sandbox):
    r = sandbox.run(RunRequest(code="int main( { return 0 }", language="c"))
    assert r.compile.status is Status.FINISHED and r.compile.return_code != 0
    assert "error" in r.compile.stderr
    assert r.run is None and not r.ok


def test_cpp_compile_timeout_is_its_own_limit(sandbox):
    # 2^22 distinct template instantiations: far more than a second of compiling
    code = (
        "template<unsigned long N, unsigned long K> struct T "
        "{ static const unsigned long v = T<N-1, 2*K>::v + T<N-1, 2*K+1>::v; };\n"
        "template<unsigned long K> struct T<0, K> { static const unsigned long v = 1; };\n"
        "int main() { return T<22, 0>::v == 0; }\n"
    )
    r = sandbox.run(RunRequest(code=code, language="cpp", compile_timeout=1.0, run_timeout=5.0))
    assert r.compile.status is Status.TIME_LIMIT, r.compile
    assert r.compile.wall_time < 3
    assert r.run is None and "compile_time_limit" in r.events


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"language": "rust"}, "language: unknown 'rust'"),
        ({"run_timeout": -1}, "run_timeout: must be a positive"),
        ({"compile_timeout": 0}, "compile_timeout: must be a positive"),
        ({"run_timeout": float("nan")}, "run_timeout: must be a positive"),
        ({"memory_limit_mb": -5}, "memory_limit_mb: must be a positive"),
        ({"output_limit_bytes": 0}, "output_limit_bytes: must be a positive"),
        ({"files": {"/etc/passwd": b"x"}}, "files: path '/etc/passwd' is absolute"),
        ({"files": {"../up.txt": b"x"}}, "files: path '../up.txt' contains '..'"),
        ({"files": {"a/../../b": b"x"}}, "contains '..'"),
        ({"files": {"main.py": b"x"}}, "'main.py' is reserved"),
        ({"files": {"a": b"x", "a/b": b"y"}}, "needs 'a' to be a directory"),
        ({"fetch_files": ("/etc/shadow",)}, "fetch_files: path '/etc/shadow' is absolute"),
        ({"fetch_files": ("x/../../y",)}, "fetch_files: path 'x/../../y' contains '..'"),
        ({"fetch_files": "out.txt"}, "fetch_files: must be a list"),
    ],
)
def test_bad_requests_are_refused_before_running(sandbox, fields, message):
    runs = sandbox.metrics()["runs"]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        sandbox.run(RunRequest(code="print(1)", **fields))
    assert sandbox.metrics()["runs"] == runs


def test_isolation_none_runs_and_warns_on_every_run(caplog, tmp_path):
    with LocalSandbox(max_workers=1, isolation="none") as sb:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="posttrain.sandbox"):
            for _ in range(2):
                r = sb.run(RunRequest(code="print(6 * 7)"))
                assert r.run.stdout == "42\n"
        warnings = [rec for rec in caplog.records if "unisolated" in rec.getMessage()]
        assert len(warnings) == 2
        assert sb.metrics()["isolation"] == "none"


def test_missing_bwrap_is_refused_with_install_hint():
    with pytest.raises(SandboxError) as err:
        LocalSandbox(max_workers=1, bwrap="/nonexistent/bwrap")
    text = str(err.value)
    assert "apt-get install bubblewrap" in text and 'isolation="none"' in text
    assert "\n" not in text


def test_unknown_isolation_is_a_clear_error():
    with pytest.raises(ValueError, match="isolation: unknown 'docker'"):
        LocalSandbox(max_workers=1, isolation="docker")


def test_queue_full_is_refused_not_queued_forever(sandbox):
    with LocalSandbox(max_workers=1, max_queue=1) as sb:
        slow = RunRequest(code="import time; time.sleep(0.6)", run_timeout=3)
        results, errors = [], []

        def go():
            try:
                results.append(sb.run(slow))
            except SandboxError as e:
                errors.append(str(e))

        threads = [threading.Thread(target=go) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 2 and all(r.ok for r in results)
        assert len(errors) == 1 and errors[0].startswith("sandbox queue full")
        m = sb.metrics()
        assert m["rejected"] == 1 and m["runs"] == 2 and m["queue_wait_s_p50"] >= 0


def test_arun_runs_concurrently_for_asyncio_callers(sandbox):
    async def main():
        reqs = [RunRequest(code=f"print({i} * 2)") for i in range(4)]
        return await asyncio.gather(*(sandbox.arun(r) for r in reqs))

    results = asyncio.run(main())
    assert [r.run.stdout for r in results] == ["0\n", "2\n", "4\n", "6\n"]


def test_metrics_report_latency_and_violations(sandbox):
    sandbox.run(RunRequest(code="while True: print('x' * 1000)", output_limit_bytes=1000, run_timeout=2))
    m = sandbox.metrics()
    for key in ("queue_wait_s_p50", "run_s_p50", "runs", "violations", "in_flight", "queued"):
        assert key in m
    assert m["violations"].get("output_limit", 0) >= 1
    assert m["run_s_p50"] > 0 and m["in_flight"] == 0 and m["queued"] == 0


def test_closed_sandbox_refuses_new_work():
    sb = LocalSandbox(max_workers=1)
    sb.close()
    with pytest.raises(SandboxError, match="sandbox is closed"):
        sb.run(RunRequest(code="print(1)"))
