"""Eval task sources: the spec grammar, JSONL and HumanEval files (format detection, domains, :N),
and bad input as one error naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.core.errors import ConfigError, DataError
from posttrain.eval.sources import file_domain, file_format, load_file, load_spec, parse_spec

ADD = {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"a + b\"\"\"\n", "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "canonical_solution": "    return a + b\n"}


def write(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_parse_spec():
    assert parse_spec("basic_arithmetic:10,chain_sum", 7) == [("basic_arithmetic", 10), ("chain_sum", 7)]
    assert parse_spec(" gcd , lcm:3 ,", 2) == [("gcd", 2), ("lcm", 3)]
    assert parse_spec("chain_sum:4,data/qa.jsonl,he.jsonl.gz:2", 9) == [
        ("chain_sum", 4), ("data/qa.jsonl", None), ("he.jsonl.gz", 2)]


@pytest.mark.parametrize(
    "spec, match",
    [("basic_arithmetic:x", "integer"), ("gcd:0", "> 0"), ("", "names no domain"), ("gcd,gcd", "twice"),
     ("chain_summ", "chain_sum"), ("a/qa.jsonl,b/qa.jsonl", "'qa' is listed twice"), ("qa.jsonl:-1", "> 0")],
)
def test_parse_spec_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_spec(spec, 5)


def test_file_domain():
    assert file_domain("data/HumanEval.jsonl.gz") == "HumanEval"
    assert file_domain("qa.jsonl") == "qa"
    assert file_domain("tasks.txt") == "tasks"


def test_jsonl_file_and_mixed_spec(tmp_path):
    qa = write(tmp_path / "qa.jsonl", [{"prompt": f"What is {i}+1?", "answer": str(i + 1), "verifier": "numeric"}
                                       for i in range(3)])
    assert file_format(qa) == "jsonl"
    tasks = load_spec(f"chain_sum:2,{qa}", default_n=5, seed=1_000_000)
    assert [t.domain for t in tasks] == ["chain_sum", "chain_sum", "qa", "qa", "qa"]
    assert [t.id for t in tasks[2:]] == ["qa/1", "qa/2", "qa/3"]  # DOMAIN/LINE
    assert tasks[2].verifiers == ("numeric",) and tasks[2].reference == "1"
    assert tasks[0].verifiers == ("reasoning_gym",) and tasks[0].id == "chain_sum/1000000"
    assert [t.id for t in load_spec(f"{qa}:2", 5, 0)] == ["qa/1", "qa/2"]
    with pytest.raises(ConfigError, match="only 3 tasks"):
        load_spec(f"{qa}:4", 5, 0)


def test_humaneval_file_becomes_code_tasks(tmp_path):
    path = write(tmp_path / "HumanEval.jsonl", [ADD, {**ADD, "task_id": "HumanEval/1"}])
    assert file_format(path) == "humaneval"
    t = load_file(path)[0]
    assert (t.id, t.domain, t.verifiers) == ("HumanEval/0", "HumanEval", ("code",))
    assert t.reference == {"prompt": ADD["prompt"], "entry_point": "add", "test": ADD["test"]}
    assert ADD["prompt"].rstrip() in t.prompt[0]["content"] and "```python" in t.prompt[0]["content"]
    assert t.limits.max_new_tokens >= 512


@pytest.mark.parametrize(
    "rows, line, what",
    [
        ([{"prompt": "q", "answer": "1"}, "{not json"], 2, "not valid JSON"),
        ([{"prompt": "q", "answer": "1"}, {"prompt": "q2"}], 2, "missing 'answer'"),
        ([{"prompt": "q", "answer": "1", "verifier": "no_such_verifier"}], 1, "unknown verifier"),
        ([ADD, {**ADD, "task_id": "HumanEval/1", "test": 3}], 2, "'test' is a int, not a string"),
        ([ADD, ADD], 2, "duplicate task_id"),
        (["[1, 2]"], 1, "expected a JSON object"),
    ],
)
def test_a_broken_line_names_file_and_line(tmp_path, rows, line, what):
    path = write(tmp_path / "t.jsonl", rows)
    with pytest.raises(DataError) as e:
        load_spec(path, 5, 0)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: ") and what in msg and "\n" not in msg


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_spec(str(tmp_path / "nope.jsonl"), 5, 0)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="empty"):
        load_spec(str(tmp_path / "empty.jsonl"), 5, 0)
