"""Preference data (train/pairs.py): every TRL format gives token-exact pairs, bad records are
named by file:line, and chat-template problems are reported."""

from __future__ import annotations

import copy
import json

import pytest

from posttrain.core.errors import DataError
from posttrain.train.pairs import load_pairs, tokenize_pairs
from posttrain.train.tokenizer import CHAT_TEMPLATE

USER = {"role": "user", "content": "Calculate 12 + 3."}
GOOD = {"role": "assistant", "content": "We add 12 and 3 to get 15.\nAnswer: 15"}
BAD = {"role": "assistant", "content": "We add 12 and 3 to get 16.\nAnswer: 16"}


def write(tmp_path, rows, name="pairs.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def template_ids(tok, messages, generation_prompt=False) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=generation_prompt)
    return list(out["input_ids"])


def with_template(tok, template: str):
    other = copy.deepcopy(tok)
    other.chat_template = template
    return other


def test_conversational_pairs_are_token_exact(tmp_path, tiny_tokenizer):
    tok = tiny_tokenizer
    path = write(tmp_path, [{"prompt": [USER], "chosen": [GOOD], "rejected": [BAD], "margin": 2, "extra": 1}])
    data = load_pairs(path, tok)
    (pair,) = data.pairs
    assert pair.prompt_ids == tuple(template_ids(tok, [USER], generation_prompt=True))
    assert list(pair.prompt_ids + pair.chosen_ids) == template_ids(tok, [USER, GOOD])
    assert list(pair.prompt_ids + pair.rejected_ids) == template_ids(tok, [USER, BAD])
    assert tok.eos_token_id in pair.chosen_ids and tok.eos_token_id in pair.rejected_ids
    assert pair.chosen_ids != pair.rejected_ids
    assert pair.margin == 2.0 and pair.where == f"{path}:1"
    assert data.template_issues == [] and data.bad_lines == [] and data.bad_lines_summary() is None


def test_text_pairs_append_eos(tmp_path, tiny_tokenizer):
    tok = tiny_tokenizer
    prompt, chosen, rejected = "Calculate 12 + 3.", "\nWe add 12 and 3 to get 15.", "\nWe add 12 and 3 to get 16."
    (pair,) = load_pairs(write(tmp_path, [{"prompt": prompt, "chosen": chosen, "rejected": rejected}]), tok).pairs
    assert list(pair.prompt_ids) == tok(prompt, add_special_tokens=False)["input_ids"]
    assert list(pair.prompt_ids + pair.chosen_ids) == tok(prompt + chosen)["input_ids"] + [tok.eos_token_id]
    assert list(pair.prompt_ids + pair.rejected_ids) == tok(prompt + rejected)["input_ids"] + [tok.eos_token_id]


def test_implicit_prompt_equals_explicit(tmp_path, tiny_tokenizer):
    system = {"role": "system", "content": "Be brief."}
    explicit = {"prompt": [system, USER], "chosen": [GOOD], "rejected": [BAD]}
    implicit = {"chosen": [system, USER, GOOD], "rejected": [system, USER, BAD]}
    a, b = load_pairs(write(tmp_path, [explicit, implicit]), tiny_tokenizer).pairs
    assert (a.prompt_ids, a.chosen_ids, a.rejected_ids) == (b.prompt_ids, b.chosen_ids, b.rejected_ids)


def test_trl_conversational_file_loads_unchanged(tmp_path, tiny_tokenizer):
    # the layout of TRL's preference datasets (e.g. ultrafeedback_binarized): content before role, scores
    rows = [
        {"chosen": [{"content": "What is 2 + 2?", "role": "user"}, {"content": "4", "role": "assistant"}],
         "rejected": [{"content": "What is 2 + 2?", "role": "user"}, {"content": "5", "role": "assistant"}],
         "score_chosen": 9.0, "score_rejected": 2.0},
        {"prompt": [{"content": "What is 3 + 3?", "role": "user"}],
         "chosen": [{"content": "6", "role": "assistant"}], "rejected": [{"content": "7", "role": "assistant"}]},
    ]
    path = write(tmp_path, rows)
    data = load_pairs(path, tiny_tokenizer)
    assert len(data.pairs) == 2
    for pair, row in zip(data.pairs, rows):
        convo = row["chosen"] if "prompt" not in row else row["prompt"] + row["chosen"]
        assert list(pair.prompt_ids + pair.chosen_ids) == template_ids(tiny_tokenizer, convo)


def test_unpaired_records(tmp_path, tiny_tokenizer):
    rows = [{"prompt": [USER], "completion": [GOOD], "label": True},
            {"prompt": "Calculate 1 + 1.", "completion": " 2", "label": False}]
    data = load_pairs(write(tmp_path, rows), tiny_tokenizer)
    assert data.pairs == [] and [e.desirable for e in data.examples] == [True, False]
    first = data.examples[0]
    assert list(first.prompt_ids + first.completion_ids) == template_ids(tiny_tokenizer, [USER, GOOD])
    assert data.examples[1].completion_ids[-1] == tiny_tokenizer.eos_token_id


def test_hf_saved_dataset(tmp_path, tiny_tokenizer):
    import datasets

    rows = [{"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]}] * 3
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    data = load_pairs(f"hf:{tmp_path / 'ds'}", tiny_tokenizer)
    assert len(data.pairs) == 3 and data.pairs[2].where == f"hf:{tmp_path / 'ds'} row 2"
    assert list(data.pairs[0].prompt_ids + data.pairs[0].chosen_ids) == template_ids(tiny_tokenizer, [USER, GOOD])


LONG = "Calculate " + " + ".join(str(i) for i in range(40)) + "."

BAD_CASES = [
    ({"prompt": [USER], "chosen": [GOOD], "rejected": [GOOD]}, "chosen and rejected are identical"),
    ({"prompt": "a", "chosen": "  \n", "rejected": "b"}, "'chosen' is empty"),
    ({"prompt": [USER], "chosen": [GOOD], "rejected": [{"role": "assistant", "content": " "}]}, "'rejected' is empty"),
    ({"prompt": "a", "chosen": "b"}, "missing field 'rejected'"),
    ({"prompt": "a", "chosen": 5, "rejected": "b"}, "'chosen' must be a string (as 'prompt' is), got int"),
    ({"prompt": [USER], "chosen": "b", "rejected": [BAD]}, "'chosen' must be a list of messages (as 'prompt' is), got str"),
    ({"prompt": [USER], "chosen": [{"role": "assistant"}], "rejected": [BAD]}, "'chosen'[0] has no string 'content'"),
    ({"chosen": [USER, GOOD], "rejected": [{"role": "user", "content": "x"}, BAD]},
     "implicit prompt: 'chosen' and 'rejected' share no leading messages"),
    ({"prompt": "a", "completion": "b", "label": 1}, "'label' must be true or false, got 1"),
    ({"prompt": "a", "chosen": "b", "rejected": "c", "margin": "big"}, "'margin' must be a finite number, got 'big'"),
    ([1, 2], "expected a JSON object, got list"),
]


@pytest.mark.parametrize("record,message", BAD_CASES, ids=[m for _, m in BAD_CASES])
def test_bad_record_names_file_line(tmp_path, tiny_tokenizer, record, message):
    path = write(tmp_path, [{"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]}, record])
    with pytest.raises(DataError) as e:
        load_pairs(path, tiny_tokenizer)
    assert str(e.value) == f"{path}:2: {message}"


def test_malformed_json_and_lengths(tmp_path, tiny_tokenizer):
    tok = tiny_tokenizer
    path = write(tmp_path, ['{"prompt": "a", "chosen"'])
    with pytest.raises(DataError, match=rf"^{path}:1: not valid JSON \("):
        load_pairs(path, tok)
    n_prompt = len(template_ids(tok, [{"role": "user", "content": LONG}], generation_prompt=True))
    path = write(tmp_path, [{"prompt": [{"role": "user", "content": LONG}], "chosen": [GOOD], "rejected": [BAD]}])
    with pytest.raises(DataError) as e:
        load_pairs(path, tok, max_prompt_len=n_prompt - 1)
    assert str(e.value) == f"{path}:1: prompt is {n_prompt} tokens, over max_prompt_len {n_prompt - 1}"
    long_bad = {"role": "assistant", "content": LONG}
    path = write(tmp_path, [{"prompt": [USER], "chosen": [GOOD], "rejected": [long_bad]}])
    n = len(template_ids(tok, [USER, long_bad]))
    assert len(template_ids(tok, [USER, GOOD])) < n - 1
    with pytest.raises(DataError) as e:
        load_pairs(path, tok, max_len=n - 1)
    assert str(e.value) == f"{path}:1: prompt + rejected is {n} tokens, over max_len {n - 1}"
    assert len(load_pairs(path, tok, max_len=n).pairs) == 1


def test_skip_bad_lines_counts_and_all_bad_is_an_error(tmp_path, tiny_tokenizer):
    good = {"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]}
    path = write(tmp_path, [good, {"prompt": "a", "chosen": "b", "rejected": "b"}, "", good, "not json"])
    data = load_pairs(path, tiny_tokenizer, skip_bad_lines=True)
    assert len(data.pairs) == 2 and [p.where for p in data.pairs] == [f"{path}:1", f"{path}:4"]
    assert len(data.bad_lines) == 2
    assert data.bad_lines[0] == f"{path}:2: chosen and rejected are identical"
    assert data.bad_lines[1].startswith(f"{path}:5: not valid JSON")
    assert data.bad_lines_summary().startswith(f"2 bad lines skipped in {path}: {path}:2: chosen and")
    with pytest.raises(DataError, match=r":2: chosen and rejected are identical"):
        load_pairs(path, tiny_tokenizer)
    all_bad = write(tmp_path, [{"prompt": "a", "chosen": "b", "rejected": "b"}, "{"], name="bad.jsonl")
    with pytest.raises(DataError, match=rf"^{all_bad}: no valid records \(2 bad lines, first {all_bad}:1: "):
        load_pairs(all_bad, tiny_tokenizer, skip_bad_lines=True)
    with pytest.raises(DataError, match="data file not found"):
        load_pairs(str(tmp_path / "missing.jsonl"), tiny_tokenizer)


def test_default_system_prompt_is_reported(tmp_path, tiny_tokenizer):
    inject = ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}"
              "{% endif %}" + CHAT_TEMPLATE)
    tok = with_template(tiny_tokenizer, inject)
    row = {"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]}
    with_system = {"prompt": [{"role": "system", "content": "Be brief."}, USER], "chosen": [GOOD], "rejected": [BAD]}
    path = write(tmp_path, [with_system, row, row])
    data = load_pairs(path, tok)
    (issue,) = data.template_issues
    assert "system prompt" in issue and issue.endswith(f"(2 records, first at {path}:2)")
    assert list(data.pairs[1].prompt_ids + data.pairs[1].chosen_ids) == template_ids(tok, [USER, GOOD])
    assert load_pairs(path, tiny_tokenizer).template_issues == []  # the plain template adds none


def test_stripped_think_blocks_are_reported(tmp_path, tiny_tokenizer):
    strip = CHAT_TEMPLATE.replace("message['content'] + '<|im_end|>' }}{% endgeneration %}",
                                  "message['content'].split('</think>')[-1] + '<|im_end|>' }}{% endgeneration %}")
    assert strip != CHAT_TEMPLATE
    tok = with_template(tiny_tokenizer, strip)
    think = {"role": "assistant", "content": "<think>12 and 3 make 15</think>Answer: 15"}
    path = write(tmp_path, [{"prompt": [USER], "chosen": [think], "rejected": [BAD]}])
    (issue,) = load_pairs(path, tok).template_issues
    assert "<think>" in issue and issue.endswith(f"(1 records, first at {path}:1)")
    assert load_pairs(path, tiny_tokenizer).template_issues == []


def test_boundary_merge_is_reported_and_completion_tokenized_alone(tiny_tokenizer):
    tok = tiny_tokenizer
    prompt_ids = tok("Answer: 1", add_special_tokens=False)["input_ids"]
    whole = tok("Answer: 12", add_special_tokens=False)["input_ids"]
    assert whole[:len(prompt_ids)] != prompt_ids  # "1" + "2" merge into one token in this vocabulary
    data = tokenize_pairs([("x:1", {"prompt": "Answer: 1", "chosen": "2", "rejected": " 3"})], tok,
                          max_prompt_len=64, max_len=64)
    (pair,) = data.pairs
    assert list(pair.prompt_ids) == prompt_ids
    assert list(pair.chosen_ids) == tok("2", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    (issue,) = data.template_issues
    assert "merge across the prompt/answer boundary" in issue and issue.endswith("(1 records, first at x:1)")


def test_generation_prompt_unlike_the_assistant_turn_is_reported(tiny_tokenizer):
    odd = CHAT_TEMPLATE.replace("{{ '<|im_start|>assistant\n' }}{% endif %}",
                                "{{ '<|im_start|>assistant\n<think>\n' }}{% endif %}")
    assert odd != CHAT_TEMPLATE
    tok = with_template(tiny_tokenizer, odd)
    data = tokenize_pairs([("x:1", {"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]})], tok,
                          max_prompt_len=64, max_len=128)
    (issue,) = data.template_issues
    assert "renders the prompt differently" in issue
    assert tok.decode(data.pairs[0].chosen_ids) == GOOD["content"] + "<|im_end|>\n"
