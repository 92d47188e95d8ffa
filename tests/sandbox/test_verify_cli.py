"""`posttrain verify code` end to end: HumanEval-format files in, one result line per
completion out (input order, completion ids per task); bad lines are one error naming the file
and line, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.sandbox.test_code_verifier import ADD, SQUARE


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", *args], capture_output=True, text=True,
                          timeout=300)


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_verify_code_writes_one_line_per_completion(tmp_path):
    tasks = write(tmp_path / "tasks.jsonl", [{"task_id": "t/add", **ADD}, {"task_id": "t/sq", **SQUARE}])
    comps = write(tmp_path / "comps.jsonl", [
        {"task_id": "t/add", "completion": "    return a + b\n"},
        {"task_id": "t/sq", "completion": "    return x * x\n"},
        {"task_id": "t/add", "completion": "    return a - b\n"},
        {"task_id": "t/sq", "completion": "    class R:\n        __eq__ = lambda s, o: True\n    return R()\n"},
    ])
    out = tmp_path / "results.jsonl"
    done = cli("code", "--tasks", tasks, "--completions", comps, "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["completion_id"], r["passed"]) for r in rows] == [
        ("t/add", 0, True), ("t/sq", 0, True), ("t/add", 1, False), ("t/sq", 1, False)]
    assert rows[2]["score"] == 0.0 and rows[2]["details"]["results"] == [False, False, False]
    assert "2 passed" in done.stderr


def test_verify_code_names_the_bad_line_and_writes_nothing(tmp_path):
    tasks = write(tmp_path / "tasks.jsonl", [{"task_id": "t/add", **ADD}])
    out = tmp_path / "results.jsonl"
    bad = tmp_path / "comps.jsonl"
    bad.write_text(json.dumps({"task_id": "t/add", "completion": "    return a + b\n"}) + "\n{not json\n")
    done = cli("code", "--tasks", tasks, "--completions", str(bad), "--out", str(out))
    assert done.returncode == 2 and f"{bad}:2" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    unknown = write(tmp_path / "c2.jsonl", [{"task_id": "t/nope", "completion": "x"}])
    done = cli("code", "--tasks", tasks, "--completions", unknown, "--out", str(out))
    assert done.returncode == 2 and "c2.jsonl:1" in done.stderr and "t/nope" in done.stderr
    missing = write(tmp_path / "t2.jsonl", [{"task_id": "t/x", "prompt": "def f():\n", "test": "assert 1"}])
    done = cli("code", "--tasks", missing, "--completions", unknown, "--out", str(out))
    assert done.returncode == 2 and "t2.jsonl:1" in done.stderr and "entry_point" in done.stderr
