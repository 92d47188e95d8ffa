"""JSONL task files: good lines become Tasks; every kind of bad line is a DataError naming file:line."""

from __future__ import annotations

import json

import pytest

from posttrain.core.errors import DataError
from posttrain.tasks.jsonl import load_tasks
from posttrain.core.types import Limits


def write(tmp_path, lines, name="tasks.jsonl"):
    p = tmp_path / name
    p.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8")
    return p


def test_good_lines(tmp_path):
    p = write(tmp_path, [
        {"prompt": "What is 2+3?", "answer": "5", "verifier": "numeric"},
        "",  # blank lines are skipped but still counted
        {"id": "q7", "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital?"}],
         "answer": "Paris", "verifiers": ["exact", "numeric"], "max_tokens": 64, "metadata": {"rel_tol": 0.01}},
        {"id": "other/x", "prompt": "Say hi", "answer": "hi"},
    ])
    a, b, c = load_tasks(p, "mydom")
    assert a.id == "mydom/1" and a.domain == "mydom"
    assert a.prompt == ({"role": "user", "content": "What is 2+3?"},)
    assert a.reference == "5" and a.verifiers == ("numeric",) and a.limits == Limits()
    assert b.id == "mydom/q7"
    assert b.prompt == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital?"})
    assert b.verifiers == ("exact", "numeric")
    assert b.limits == Limits(max_new_tokens=64)
    assert b.metadata == {"rel_tol": 0.01}
    assert c.id == "other/x"  # an id with a slash is kept as is
    assert c.verifiers == ("exact",)  # the default verifier
    assert c.env == "single_turn"


def test_default_ids_follow_line_numbers(tmp_path):
    p = write(tmp_path, [{"prompt": "a", "answer": "1"}, "   ", {"prompt": "b", "answer": "2"}])
    assert [t.id for t in load_tasks(p, "d")] == ["d/1", "d/3"]


GOOD = {"prompt": "q", "answer": "a"}


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"prompt": "q", "answer": ', "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ({"answer": "a"}, "missing 'prompt'"),
        ({"prompt": "q"}, "missing 'answer'"),
        ({"prompt": "q", "answer": "a", "answr": "b"}, "unknown key 'answr'"),
        ({"prompt": "q", "answer": "a", "verifier": "exatc"}, "unknown verifier 'exatc'"),
        ({"prompt": "q", "answer": "a", "verifiers": []}, "'verifiers' must be a non-empty list"),
        ({"prompt": "q", "answer": "a", "verifiers": "exact"}, "'verifiers' must be a non-empty list"),
        ({"prompt": "", "answer": "a"}, "'prompt' must be a non-empty string or a list"),
        ({"prompt": [], "answer": "a"}, "'prompt' must be a non-empty string or a list"),
        ({"prompt": [{"role": "user", "content": "hi"}, {"role": "user"}], "answer": "a"}, "prompt[1] must be"),
        ({"prompt": ["hi"], "answer": "a"}, "prompt[0] must be"),
        ({"prompt": "q", "answer": "a", "max_tokens": 0}, "'max_tokens' must be a positive integer"),
        ({"prompt": "q", "answer": "a", "max_tokens": "64"}, "'max_tokens' must be a positive integer"),
        ({"prompt": "q", "answer": "a", "id": ""}, "'id' must be a non-empty string"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path, bad, message):
    p = write(tmp_path, [GOOD, GOOD, bad, GOOD])
    with pytest.raises(DataError) as e:
        load_tasks(p, "d")
    assert str(e.value).startswith(f"{p}:3: ")
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_duplicate_id(tmp_path):
    p = write(tmp_path, [{"id": "a", **GOOD}, GOOD, {"id": "a", **GOOD}])
    with pytest.raises(DataError, match=r"tasks.jsonl:3: duplicate task id 'd/a'"):
        load_tasks(p, "d")
    # an explicit id that equals another line's default id is a duplicate too
    p = write(tmp_path, [GOOD, {"id": "d/1", **GOOD}], name="clash.jsonl")
    with pytest.raises(DataError, match=r"clash.jsonl:2: duplicate task id 'd/1'"):
        load_tasks(p, "d")


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match=r"empty.jsonl: no tasks \(the file is empty\)"):
        load_tasks(empty, "d")
    with pytest.raises(DataError, match=r"nope.jsonl: task file not found"):
        load_tasks(tmp_path / "nope.jsonl", "d")
    with pytest.raises(DataError, match="task file not found"):
        load_tasks(tmp_path, "d")  # a directory is not a task file


def test_bad_metadata_is_a_data_error(tmp_path):
    for i, meta in enumerate(["abc", [1, 2], 5]):
        p = write(tmp_path, [GOOD, {**GOOD, "metadata": meta}], name=f"m{i}.jsonl")
        with pytest.raises(DataError, match=rf"m{i}.jsonl:2: 'metadata' must be a JSON object"):
            load_tasks(p, "d")


def test_non_utf8_line_is_a_data_error(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes(b'{"prompt": "q", "answer": "a"}\n{"prompt": "caf\xe9", "answer": "a"}\n')
    with pytest.raises(DataError, match=r"latin1.jsonl:2: not UTF-8"):
        load_tasks(p, "d")
