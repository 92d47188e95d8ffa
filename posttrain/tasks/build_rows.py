"""Rows of a user's JSONL or CSV file made into posttrain task records (for tasks/build.py).

    n_rows, items = load_items(Path("qa.csv"), kind="qa", verifier="numeric", domain="qa")
    items[0].record  # {"id": "qa/2", "prompt": "What is 2+3?\\n\\nEnd your response with ...",
                     #  "answer": "5", "verifier": "numeric", "metadata": {"row": "qa.csv:2"}}
    items[0].gold    # "Answer: 5": the gold as a model's reply

A row is named `INPUT:LINE` (a CSV row by the line it starts on, the header being line 1). The
columns of each kind are in build.py's docstring; a missing or unknown column, an empty required
cell, a bad `split`, tests that are not Python or hold no assert, and a repeated id are each a
DataError naming the file and line (or, for a CSV header, the file and column).
"""

from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from pathlib import Path

from posttrain.core.errors import DataError
from posttrain.core.fsio import read_jsonl
from posttrain.verifiers.code import CODE_MAX_TOKENS
from posttrain.tasks.jsonl import parse_task
from posttrain.verifiers.answer import INSTRUCTION
from posttrain.core.types import Task

REQUIRED = {"qa": ("question", "answer"), "code": ("prompt", "solution")}
OPTIONAL = {"qa": ("id", "split"), "code": ("tests", "test", "entry_point", "id", "split")}
SPLITS = ("train", "eval")
CODE_REPLY = "Reply with the whole solution, imports included, in one ```python code block."


@dataclass(frozen=True)
class Item:
    row: str  # "INPUT:LINE"
    record: dict  # the posttrain JSONL task line (tasks/jsonl.py)
    task: Task  # that line parsed as `posttrain eval` and RL will parse it
    text: str  # the question / prompt: what dedup compares
    gold: str  # the gold as a model's reply
    split: str | None  # from the `split` column, else None


def _read_csv(path: Path) -> tuple[list[str], list[tuple[str, dict]]]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    rows: list[tuple[str, dict]] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            if not any(header):
                raise DataError(f"{path}: no header row (a CSV file starts with its column names)")
            twice = next((h for i, h in enumerate(header) if h in header[:i]), None)
            if twice is not None:
                raise DataError(f"{path}: column {twice!r} appears twice in the header")
            start = reader.line_num + 1
            for fields in reader:
                if any(v.strip() for v in fields):
                    if len(fields) != len(header):
                        raise DataError(f"{path}:{start}: {len(fields)} fields, the header has {len(header)}")
                    rows.append((f"{path}:{start}", dict(zip(header, fields))))
                start = reader.line_num + 1
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise DataError(f"{path}: not valid CSV ({e})") from None
    return header, rows


def check_columns(where: str, kind: str, have: list[str], word: str = "column") -> None:
    listed = ", ".join(have) or "none"
    for name in REQUIRED[kind]:
        if name not in have:
            raise DataError(f"{where}: missing {word} {name!r} (have: {listed})")
    if kind == "code" and "tests" not in have and "test" not in have:
        raise DataError(f"{where}: missing {word} 'tests' (assert statements; or 'test' with 'entry_point') (have: {listed})")
    if kind == "code" and "test" in have and "entry_point" not in have:
        raise DataError(f"{where}: missing {word} 'entry_point' (the function a 'test' checks) (have: {listed})")
    known = REQUIRED[kind] + OPTIONAL[kind]
    unknown = next((c for c in have if c not in known), None)
    if unknown is not None:
        raise DataError(f"{where}: unknown {word} {unknown!r} (expected some of {', '.join(known)})")


def _text(where: str, values: dict, key: str, required: bool = True) -> str | None:
    v = values.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        if required:
            raise DataError(f"{where}: empty {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise DataError(f"{where}: {key!r} must be text, got {type(v).__name__}")
    return v if isinstance(v, str) else str(v)


def _parse(where: str, key: str, src: str) -> ast.Module:
    try:
        return ast.parse(src)
    except SyntaxError as e:
        raise DataError(f"{where}: {key!r} is not valid Python ({e.msg}, line {e.lineno})") from None


def _assert_tests(where: str, tests) -> dict:
    """{"tests": [...], "setup": ...} from assert statements as text (statements that hold no
    assert, e.g. imports, become the setup) or, in JSONL, a list of them."""
    if isinstance(tests, list):
        if not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            raise DataError(f"{where}: 'tests' must be assert statements: a string, or a list of non-empty strings")
        for i, t in enumerate(tests):
            _parse(where, f"tests[{i}]", t)
        return {"tests": list(tests)}
    if not isinstance(tests, str):
        raise DataError(f"{where}: 'tests' must be assert statements as text, got {type(tests).__name__}")
    tree = _parse(where, "tests", tests)
    is_test = [any(isinstance(n, ast.Assert) for n in ast.walk(node)) for node in tree.body]
    if not any(is_test):
        raise DataError(f"{where}: 'tests' holds no assert statement")
    parts = [(ast.get_source_segment(tests, node), t) for node, t in zip(tree.body, is_test)]
    ref: dict = {"tests": [src for src, t in parts if t]}
    setup = "\n".join(src for src, t in parts if not t)
    if setup:
        ref["setup"] = setup
    return ref


def _code_reference(where: str, values: dict) -> dict:
    tests = values.get("tests")
    has_tests = tests is not None and not (isinstance(tests, str) and not tests.strip())
    test = _text(where, values, "test", required=False)
    if has_tests and test:
        raise DataError(f"{where}: give 'tests' or 'test', not both")
    if test:
        _parse(where, "test", test)
        return {"test": test, "entry_point": _text(where, values, "entry_point")}
    if not has_tests:
        raise DataError(f"{where}: empty 'tests' (assert statements, or a 'test' with its 'entry_point')")
    ref = _assert_tests(where, tests)
    entry = _text(where, values, "entry_point", required=False)
    return {**ref, "entry_point": entry} if entry else ref


def _split(where: str, values: dict) -> str | None:
    if "split" not in values:
        return None
    value = values["split"].strip().lower() if isinstance(values["split"], str) else values["split"]
    if value not in SPLITS:
        raise DataError(f"{where}: 'split' must be train or eval, got {values['split']!r}")
    return value


@dataclass(frozen=True)
class Failure:
    """A bad row: where, and why."""

    row: str  # "INPUT:LINE"
    reason: str  # "gold fails verifier numeric: ...", "duplicate of line 2 (exact)", ...


def make_item(where: str, values: dict, kind: str, verifier: str, domain: str) -> Item:
    path, _, line = where.rpartition(":")
    task_id = (_text(where, values, "id", required=False) or line).strip()
    meta = {"row": f"{Path(path).name}:{line}"}
    if kind == "qa":
        text = _text(where, values, "question").strip()
        answer = _text(where, values, "answer").strip()
        record = {"id": f"{domain}/{task_id}", "prompt": f"{text}\n\n{INSTRUCTION}", "answer": answer,
                  "verifier": verifier, "metadata": meta}
        gold = f"Answer: {answer}"
    else:
        text = _text(where, values, "prompt").strip()
        solution = _text(where, values, "solution")
        record = {"id": f"{domain}/{task_id}", "prompt": f"{text}\n\n{CODE_REPLY}",
                  "answer": _code_reference(where, values), "verifier": "code", "max_tokens": CODE_MAX_TOKENS,
                  "metadata": meta}
        gold = f"```python\n{solution.strip(chr(10))}\n```"
    task = parse_task(record, domain, where, record["id"])
    return Item(row=where, record=record, task=task, text=text, gold=gold, split=_split(where, values))


def read_rows(path: Path, kind: str, errors: list[str]) -> list[tuple[str, dict]]:
    """(`INPUT:LINE`, values) of each non-blank row (CSV: the header's columns checked; JSONL: lines
    that are no JSON object are appended to `errors`, "INPUT:LINE: why", and skipped)."""
    name = path.name.lower()
    if name.endswith(".csv"):
        header, rows = _read_csv(path)
        check_columns(str(path), kind, header)
        return rows
    if not name.endswith((".jsonl", ".jsonl.gz")):
        raise DataError(f"{path}: expected a .jsonl or .csv file")
    return read_jsonl(path, errors=errors)


def load_items(path: Path, kind: str, verifier: str, domain: str) -> tuple[int, list[Item], list]:
    """(rows read, one Item per good row, a Failure per malformed row): every row checked, all of them
    in one pass (a file-level problem, e.g. no header, is one DataError)."""
    unreadable: list[str] = []
    rows = read_rows(path, kind, unreadable)
    if not rows and not unreadable:
        raise DataError(f"{path}: no rows")
    bad = [Failure(*u.split(": ", 1)) for u in unreadable]
    jsonl = not path.name.lower().endswith(".csv")
    items = []
    for where, values in rows:
        try:
            if jsonl:
                check_columns(where, kind, list(values), word="key")
            items.append(make_item(where, values, kind, verifier, domain))
        except DataError as e:
            text = str(e)
            bad.append(Failure(where, text[len(where) + 2:] if text.startswith(f"{where}: ") else text))
    first: dict[str, str] = {}
    good = []
    for it in items:
        if it.task.id in first:
            bad.append(Failure(it.row, f"duplicate id {it.task.id.split('/', 1)[1]!r} (first on {first[it.task.id]})"))
        elif (it.split is None) != (items[0].split is None):
            bad.append(Failure(it.row, "every row needs a 'split' once one has it (train or eval)"))
        else:
            first[it.task.id] = it.row
            good.append(it)
    return len(rows), good, bad
