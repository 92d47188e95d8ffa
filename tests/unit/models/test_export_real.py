"""Slow GGUF export checks on real runtimes: the real SmolLM2-135M-Instruct exported at f16 and
q8_0 generates (greedy, through transformers' GGUF loader) exactly what the original does; and,
where llama-cpp-python is installed, llama.cpp itself loads our f16 files (a tiny Llama, a tiny
Qwen2, SmolLM2), tokenizes chat prompts as we do and greedily generates our tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from posttrain.models.export import export_gguf

SMOL = Path(__file__).resolve().parents[3] / ".cache/posttrain/models/smollm2-135m-instruct"
QUESTIONS = ["What is 2+3?", "Name a color of the sky.", "Write a haiku about the sea."]
NEW_TOKENS = 20

pytestmark = pytest.mark.slow


def _hf(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(str(path)))


def _prompt_ids(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _greedy(model, ids: list[int], eos: int | None) -> list[int]:
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos)
    new = out[0, len(ids):].tolist()
    return new[: new.index(eos) + 1] if eos in new else new


def _smol():
    if not (SMOL / "model.safetensors").is_file():
        pytest.skip(f"{SMOL} is not installed (posttrain models get smollm2-135m-instruct)")
    return SMOL


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_smollm2_gguf_generates_what_the_original_does(tmp_path, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _smol()
    done = export_gguf(src, tmp_path / f"smol-{dtype}.gguf", dtype=dtype)
    model, tok = _hf(src)
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=done.out.name, dtype=torch.float32).eval()
    gguf_tok = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=done.out.name)
    assert gguf_tok.chat_template == tok.chat_template
    for question in QUESTIONS:
        ids = _prompt_ids(tok, question)
        assert _prompt_ids(gguf_tok, question) == ids
        expected = _greedy(model, ids, tok.eos_token_id)
        assert len(expected) > 3
        assert _greedy(loaded, ids, tok.eos_token_id) == expected, question


# ---------------------------------------------------------------- llama.cpp itself


def _llama_cpp_greedy(llm, ids: list[int], eos: int | None) -> list[int]:
    out = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(token))
        if token == eos or len(out) == NEW_TOKENS:
            break
    return out


def _check_with_llama_cpp(src: Path, out: Path) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    export_gguf(src, out, dtype="f16")
    model, tok = _hf(src)
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=512, n_threads=1, verbose=False, logits_all=False)
    assert llm.n_vocab() == model.config.vocab_size
    for question in QUESTIONS:
        ids = _prompt_ids(tok, question)
        text = tok.decode(ids)
        assert llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) == ids, question
        expected = _greedy(model, ids, tok.eos_token_id)
        assert _llama_cpp_greedy(llm, ids, tok.eos_token_id) == expected, question
    if tok.chat_template:  # the chat template travels in the file's metadata
        assert llm.metadata.get("tokenizer.chat_template") == tok.chat_template


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_llama_cpp_runs_a_tiny_export_like_we_do(tmp_path, family, tiny_tokenizer):
    pytest.importorskip("llama_cpp")
    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family=family, seed=1)
    with torch.no_grad():  # sharper than init, so greedy choices are not near-ties
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    src = save_model(model, tiny_tokenizer, tmp_path / "model")
    _check_with_llama_cpp(src, tmp_path / "tiny.gguf")


def test_llama_cpp_runs_smollm2_like_we_do(tmp_path):
    pytest.importorskip("llama_cpp")
    _check_with_llama_cpp(_smol(), tmp_path / "smol-f16.gguf")
