"""Chat data sources: JSONL validation with file:line errors, skip_bad_lines, hf: (local dirs), gym:, eval split."""

from __future__ import annotations

import json

import pytest

from posttrain.core.errors import DataError
from posttrain.train.data import check_messages, load_chat_examples, split_eval


def chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_jsonl_loads_valid_lines_and_skips_blank_ones(tmp_path):
    path = write_lines(tmp_path / "data.jsonl", [json.dumps(chat(0)), "", "   ", json.dumps(chat(1))])
    data = load_chat_examples(path)
    assert [ex[1]["content"] for ex in data.examples] == ["a0", "a1"]
    assert data.bad_lines == 0


@pytest.mark.parametrize(
    "bad, why",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"text": "hi"}), "no 'messages' field"),
        (json.dumps({"messages": []}), "non-empty list"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "no assistant turn"),
        (json.dumps({"messages": [{"role": "assistant"}]}), "messages[0] has no string 'content'"),
        (json.dumps({"messages": [{"content": "x"}]}), "messages[0] has no string 'role'"),
        (json.dumps([1, 2]), "expected a JSON object"),
    ],
)
def test_bad_line_raises_dataerror_naming_file_and_line(tmp_path, bad, why):
    path = write_lines(tmp_path / "data.jsonl", [json.dumps(chat(0)), json.dumps(chat(1)), bad])
    with pytest.raises(DataError) as e:
        load_chat_examples(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:3: ")
    assert why in msg
    assert "\n" not in msg


def test_skip_bad_lines_counts_and_names_first_lines(tmp_path):
    lines = [json.dumps(chat(i)) if i % 3 else "garbage" for i in range(1, 31)]  # lines 3, 6, ... 30 bad
    path = write_lines(tmp_path / "data.jsonl", lines)
    data = load_chat_examples(path, skip_bad_lines=True)
    assert data.bad_lines == 10
    assert len(data.examples) == 20
    assert data.bad_line_numbers == [3, 6, 9, 12, 15]
    assert data.bad_lines_summary() == f"10 bad lines skipped in {path} (lines 3, 6, 9, 12, 15, ...)"


def test_missing_file_and_all_bad_file(tmp_path):
    with pytest.raises(DataError, match="data file not found"):
        load_chat_examples(str(tmp_path / "nope.jsonl"))
    path = write_lines(tmp_path / "bad.jsonl", ["x", "y"])
    with pytest.raises(DataError, match="no valid examples"):
        load_chat_examples(path, skip_bad_lines=True)


def test_check_messages_keeps_only_role_and_content():
    msgs = check_messages({"messages": [{"role": "assistant", "content": "a", "name": "bot"}], "id": 3})
    assert msgs == [{"role": "assistant", "content": "a"}]


def test_hf_local_dataset_saved_to_disk(tmp_path):
    import datasets

    rows = [chat(i) for i in range(5)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    data = load_chat_examples(f"hf:{tmp_path / 'ds'}")
    assert [ex[0]["content"] for ex in data.examples] == [f"q{i}" for i in range(5)]

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]), "test": datasets.Dataset.from_list(rows[3:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert len(load_chat_examples(f"hf:{tmp_path / 'dd'}").examples) == 3  # default split: train
    assert len(load_chat_examples(f"hf:{tmp_path / 'dd'}:test").examples) == 2
    with pytest.raises(DataError, match="no split 'dev'"):
        load_chat_examples(f"hf:{tmp_path / 'dd'}:dev")


def test_hf_bad_rows_and_missing_column(tmp_path):
    import datasets

    rows = [chat(0), {"messages": [{"role": "user", "content": "only a question"}]}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DataError, match=r"row 1: 'messages' has no assistant turn"):
        load_chat_examples(f"hf:{tmp_path / 'ds'}")
    assert load_chat_examples(f"hf:{tmp_path / 'ds'}", skip_bad_lines=True).bad_lines == 1
    datasets.Dataset.from_list([{"text": "x"}]).save_to_disk(str(tmp_path / "plain"))
    with pytest.raises(DataError, match="no 'messages' column"):
        load_chat_examples(f"hf:{tmp_path / 'plain'}")


def test_hf_unknown_dataset_is_one_line_dataerror(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # no network in tests
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError) as e:
        load_chat_examples("hf:no-such-owner/no-such-dataset:train")
    assert str(e.value).startswith("hf:no-such-owner/no-such-dataset:train: cannot load dataset")
    assert "\n" not in str(e.value)


def test_split_eval_is_deterministic_and_disjoint():
    examples = [chat(i)["messages"] for i in range(100)]
    train, held = split_eval(examples, 0.1, seed=3)
    assert len(held) == 10 and len(train) == 90
    assert split_eval(examples, 0.1, seed=3) == (train, held)
    assert {ex[0]["content"] for ex in train}.isdisjoint(ex[0]["content"] for ex in held)
    assert split_eval(examples, 0.1, seed=4)[1] != held
    assert split_eval(examples, 0.0, seed=3) == (examples, [])
    assert len(split_eval(examples[:10], 0.01, seed=0)[1]) == 1  # at least one held out
