"""`posttrain verify tools`: a file of raw completions for one BFCL category, scored by our AST checker.

    summary = verify_tools_files("simple_python", "completions.jsonl", "results.jsonl", parser="hermes")

Completions: one JSON object per line with `id` (a BFCL id of the category, e.g. "simple_python_7")
and `completion` (the model's raw turn text); several lines may share an id. Each is parsed with the
named tool-call parser (envs/tools/parsers.py) and judged by bfcl_ast's rules (domains/bfcl/ast_check.py),
exactly as the verifier judges an episode's turn. Output, in input order, written atomically: `id`,
`passed`, `error` ("" when passed, else one line why). A bad line (not JSON, missing key, an id not
in the category) is a DataError naming the file and line, and nothing is written.
"""

from __future__ import annotations

import json

from posttrain.core.errors import ConfigError
from posttrain.core.fsio import atomic_file, bad_lines, read_jsonl
from posttrain.domains.bfcl.source import SINGLE_TURN
from posttrain.domains.bfcl.data import load_category
from posttrain.domains.bfcl.ast_check import judge, parse_text

COMPLETION_KEYS = ("id", "completion")


def verify_tools_files(category: str, completions_path, out_path, *, parser: str = "hermes",
                       dots: bool = False) -> dict:
    """Judge every completion; write `out_path` (JSONL); return {"completions", "passed", "accuracy"}.
    `dots`: the model saw BFCL's names with their dots (else "." became "_", as in our tool schemas)."""
    if category not in SINGLE_TURN:
        raise ConfigError(f"verify tools: unknown category {category!r} (known: {', '.join(SINGLE_TURN)})")
    from posttrain.envs.tools.parsers import get_parser

    get_parser(parser)  # an unknown parser is a ConfigError before any line is read
    entries = {e["id"]: e for e in load_category(category)}
    jobs: list[tuple[str, str]] = []
    bad: list[str] = []  # every bad line, reported together
    for where, rec in read_jsonl(completions_path, COMPLETION_KEYS, errors=bad):
        if rec["id"] not in entries:
            bad.append(f"{where}: id {rec['id']!r} is not in BFCL v4 {category}")
            continue
        jobs.append((rec["id"], rec["completion"]))
    if bad:
        raise bad_lines(bad)
    lines = []
    for bfcl_id, text in jobs:
        entry = entries[bfcl_id]
        calls, errors = parse_text(text, parser)
        verdict = judge({"category": category, "functions": entry["function"], "answer": entry["answer"],
                         "dots": dots}, calls, errors)
        lines.append({"id": bfcl_id, "passed": verdict.valid, "error": verdict.error})
    with atomic_file(out_path) as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    passed = sum(line["passed"] for line in lines)
    return {"completions": len(lines), "ids": len({i for i, _ in jobs}), "passed": passed,
            "accuracy": passed / len(lines) if lines else 0.0}
