"""BFCL v4 task sources: the held-out split (disjoint, stable, about 25%), deterministic picks, the
tasks' shape, tool schemas converted from BFCL's docs, and bad options as one-line ConfigErrors."""

from __future__ import annotations

import ast
import sys

import pytest

from posttrain.core.errors import ConfigError
from posttrain.domains.bfcl.data import bfcl_dir, json_schema, split_of, tool_schema
from posttrain.tasks.registry import is_source, make_source_tasks

SOURCES = ("bfcl_simple_python", "bfcl_multiple", "bfcl_parallel", "bfcl_parallel_multiple", "bfcl_irrelevance",
           "bfcl_multi_turn_base")


def ids(tasks) -> list[str]:
    return [t.id for t in tasks]


@pytest.mark.parametrize("name", SOURCES)
def test_train_and_test_are_disjoint_and_cover_all(name):
    every = make_source_tasks(name, None, 0, {})
    train = make_source_tasks(name, None, 0, {"split": "train"})
    test = make_source_tasks(name, None, 0, {"split": "test"})
    assert not set(ids(train)) & set(ids(test))
    assert sorted(ids(train) + ids(test)) == sorted(ids(every))
    assert 0.15 < len(test) / len(every) < 0.35
    # a pick from train never holds a test id, whatever the seed
    for seed in (0, 1, 2):
        assert not set(ids(make_source_tasks(name, 20, seed, {"split": "train"}))) & set(ids(test))


def test_split_depends_on_the_id_alone():
    assert split_of("simple_python_0") == split_of("simple_python_0")
    counts = {s: sum(split_of(f"x_{i}") == s for i in range(4000)) for s in ("train", "test")}
    assert 900 < counts["test"] < 1100 and counts["train"] + counts["test"] == 4000


def test_picks_are_deterministic_and_seeded():
    a = ids(make_source_tasks("bfcl_parallel", 30, 7, {"split": "test"}))
    assert a == ids(make_source_tasks("bfcl_parallel", 30, 7, {"split": "test"}))
    assert a != ids(make_source_tasks("bfcl_parallel", 30, 8, {"split": "test"}))
    assert len(set(a)) == 30


def test_single_turn_task_shape():
    task = make_source_tasks("bfcl_simple_python", None, 0, {})[1]
    assert task.id == "bfcl_simple_python/simple_python_1" and task.domain == "bfcl_simple_python"
    assert task.env == "single_turn" and task.verifiers == ("bfcl_ast",)
    assert task.prompt == ({"role": "user", "content": "Calculate the factorial of 5 using math functions."},)
    assert task.reference["category"] == "simple_python"
    assert task.reference["answer"] == [{"math.factorial": {"number": [5]}}]
    assert task.reference["functions"][0]["name"] == "math.factorial"
    assert task.metadata["tools"] == [{"type": "function", "function": {
        "name": "math_factorial", "description": "Calculate the factorial of a given number.",
        "parameters": {"type": "object", "properties": {"number": {
            "type": "integer", "description": "The number for which factorial needs to be calculated."}},
            "required": ["number"]}}}]
    kept = make_source_tasks("bfcl_simple_python", None, 0, {"dots": True})[1]
    assert kept.metadata["tools"][0]["function"]["name"] == "math.factorial" and kept.reference["dots"] is True


def test_irrelevance_has_no_answer():
    task = make_source_tasks("bfcl_irrelevance", 1, 0, {})[0]
    assert task.reference["answer"] is None and task.metadata["tools"]


def test_schema_conversion():
    doc = {"type": "dict", "required": ["a"], "properties": {
        "a": {"type": "float", "description": "x"}, "b": {"type": "tuple", "items": {"type": "dict", "properties": {
            "c": {"type": "any"}}}}, "d": {"type": "string", "enum": ["u", "v"], "default": "u"}}}
    assert json_schema(doc) == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "number", "description": "x"}, "b": {"type": "array", "items": {"type": "object", "properties": {
            "c": {}}}}, "d": {"type": "string", "enum": ["u", "v"], "default": "u"}}}
    assert tool_schema({"name": "a.b.c", "parameters": doc})["function"]["name"] == "a_b_c"
    # no BFCL-only type name is left in any shipped task's tools
    bfcl_only = {"dict", "float", "tuple", "any"}
    for name in SOURCES:
        for task in make_source_tasks(name, None, 0, {}):
            assert not bfcl_only & set(_types(task.metadata["tools"])), task.id


def _types(value):
    if isinstance(value, dict):
        if isinstance(value.get("type"), str):
            yield value["type"]
        for k, v in value.items():
            if k != "type":
                yield from _types(v)
    elif isinstance(value, list):
        for v in value:
            yield from _types(v)


def test_multi_turn_task_shape():
    task = next(t for t in make_source_tasks("bfcl_multi_turn_base", None, 0, {}) if t.id.endswith("/multi_turn_base_0"))
    assert task.env == "bfcl" and task.verifiers == ("env_score",)
    ref = task.reference
    assert ref["involved_classes"] == ["TwitterAPI", "GorillaFileSystem"]
    assert len(ref["questions"]) == len(ref["ground_truth"]) == 4
    assert task.prompt == tuple(ref["questions"][0])
    names = {t["function"]["name"] for t in task.metadata["tools"]}
    assert {"cd", "mv", "grep", "post_tweet"} <= names
    assert task.limits.max_turns >= 2 * len(ref["questions"])


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="option split must be one of train, test, all"):
        make_source_tasks("bfcl_multiple", None, 0, {"split": "dev"})
    with pytest.raises(ConfigError, match="unknown option 'splits'"):
        make_source_tasks("bfcl_multiple", None, 0, {"splits": "test"})
    with pytest.raises(ConfigError, match="the test split has only"):
        make_source_tasks("bfcl_multiple", 150, 0, {"split": "test"})
    with pytest.raises(ConfigError, match="only 200 tasks"):
        make_source_tasks("bfcl_multiple", 201, 0, {})


def test_all_sources_registered_and_bfcl_never_imported():
    assert all(is_source(n) for n in SOURCES + ("bfcl_live_simple", "bfcl_live_relevance"))
    assert bfcl_dir().name == "bfcl_eval"
    assert not [m for m in sys.modules if m == "bfcl_eval" or m.startswith("bfcl_eval.")]


def test_no_bfcl_module_of_ours_imports_bfcl_eval():
    from pathlib import Path

    root = Path(__file__).resolve().parents[4] / "posttrain"
    paths = sorted((root / "domains" / "bfcl").rglob("*.py"))
    assert len(paths) >= 6
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not [n for n in names if n.split(".")[0] == "bfcl_eval"], path
