"""`posttrain verify tools` end to end (a real subprocess): raw completions in, one verdict line each
out, in order, through the named parser and our AST checker; bad lines are one error, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", "tools", *args], capture_output=True,
                          text=True, timeout=300)


def write(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def hermes(name: str, args: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def test_scores_each_completion_in_order(tmp_path):
    # simple_python_0: calculate_triangle_area(base=10, height=5, unit optional "units")
    # simple_python_1: math.factorial(number=5), the tool is named math_factorial
    rows = [
        {"id": "simple_python_0", "completion": "Sure.\n" + hermes("calculate_triangle_area", {"base": 10, "height": 5})},
        {"id": "simple_python_0", "completion": hermes("calculate_triangle_area", {"base": 10, "height": 6})},
        {"id": "simple_python_1", "completion": hermes("math_factorial", {"number": 5})},
        {"id": "simple_python_1", "completion": hermes("math.factorial", {"number": 5})},
        {"id": "simple_python_1", "completion": '<tool_call>{"name": "math_factorial", "arguments": {"number": 5</tool_call>'},
        {"id": "simple_python_1", "completion": "The factorial of 5 is 120."},
    ]
    out = tmp_path / "results.jsonl"
    done = cli("--category", "simple_python", "--completions", write(tmp_path / "c.jsonl", rows), "--out", str(out))
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["passed"]) for r in got] == [
        ("simple_python_0", True), ("simple_python_0", False), ("simple_python_1", True),
        ("simple_python_1", False), ("simple_python_1", False), ("simple_python_1", False)]
    assert got[0]["error"] == "" and "height" in got[1]["error"]
    assert "math_factorial" in got[3]["error"] and "not parsed" in got[4]["error"]
    assert "0 calls" in got[5]["error"]
    assert "2 passed" in done.stderr and "33.3%" in done.stderr


def test_keep_dots_and_the_pythonic_parser(tmp_path):
    rows = [{"id": "simple_python_1", "completion": "[math.factorial(number=5)]"},
            {"id": "simple_python_1", "completion": "[math_factorial(number=5)]"}]
    out = tmp_path / "r.jsonl"
    done = cli("--category", "simple_python", "--completions", write(tmp_path / "c.jsonl", rows), "--out", str(out),
               "--parser", "pythonic", "--keep-dots")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["passed"] for line in out.read_text().splitlines()] == [True, False]


def test_irrelevance_passes_only_without_a_call(tmp_path):
    rows = [{"id": "irrelevance_0", "completion": "I cannot help with that using these tools."},
            {"id": "irrelevance_0", "completion": hermes("anything", {})}]
    out = tmp_path / "r.jsonl"
    done = cli("--category", "irrelevance", "--completions", write(tmp_path / "c.jsonl", rows), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["passed"] for line in out.read_text().splitlines()] == [True, False]


def test_bad_lines_name_file_and_line_and_write_nothing(tmp_path):
    out = tmp_path / "r.jsonl"
    good = {"id": "simple_python_0", "completion": "x"}
    for rows, expect in (
        ([good, "{not json"], "c.jsonl:2: not valid JSON"),
        ([good, {"id": "simple_python_0"}], "c.jsonl:2: 'completion' is missing"),
        ([{"id": "simple_python_9999", "completion": "x"}], "c.jsonl:1: id 'simple_python_9999' is not in BFCL v4 simple_python"),
    ):
        done = cli("--category", "simple_python", "--completions", write(tmp_path / "c.jsonl", rows), "--out", str(out))
        assert done.returncode == 2, done.stderr
        assert expect in done.stderr and "Traceback" not in done.stderr
        assert not out.exists()
    unknown = cli("--category", "simple_java", "--completions", write(tmp_path / "c.jsonl", [good]), "--out", str(out))
    assert unknown.returncode == 2 and "unknown category 'simple_java'" in unknown.stderr
    parser = cli("--category", "simple_python", "--completions", str(tmp_path / "c.jsonl"), "--out", str(out), "--parser", "xml")
    assert parser.returncode == 2 and "unknown tool-call parser 'xml'" in parser.stderr
    assert not out.exists()
