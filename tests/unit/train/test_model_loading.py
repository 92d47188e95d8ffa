import pytest
import torch

from posttrain.core.errors import ModelLoadError
from posttrain.core.hf import load_model_and_tokenizer


def test_tiny_model_round_trips_through_from_pretrained(tiny_model_dir):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    assert model.config.num_hidden_layers == 2
    assert tok.eos_token == "<|im_end|>"
    ids = tok("Calculate 1 + 2.")["input_ids"]
    assert tok.decode(ids) == "Calculate 1 + 2."
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits
    assert logits.shape == (1, len(ids), len(tok))


def test_chat_template_marks_assistant_tokens(tiny_model_dir):
    _, tok = load_model_and_tokenizer(tiny_model_dir)
    messages = [{"role": "user", "content": "Calculate 1 + 2."}, {"role": "assistant", "content": "Answer: 3"}]
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained == "Answer: 3<|im_end|>"
    assert "user" not in trained


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model_and_tokenizer(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model_and_tokenizer(str(tmp_path))
