"""`posttrain export --format gguf`: tiny Llama (tied and untied head) and Qwen2 (q/k/v biases)
models built here export at f32 / f16 / q8_0 and load back through transformers' GGUF reader
with the original tensors (exact, f16-rounded, within q8_0's block error), the same greedy
generations, the same tokenizer and chat template. Bad input is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from posttrain.core.errors import ConfigError, ModelLoadError
from posttrain.models.export import export_gguf, gguf_name
from posttrain.models.gguf_vocab import pre_tokenizer_name

ROOT = Path(__file__).resolve().parents[3]
TEXTS = ["Calculate 12 + 34.", "We add 7 and 8 to get 15.\nAnswer: 15", "  spaces,  punctuation!? 1234"]
PROMPTS = ["Calculate 12 + 34.", "Calculate 905 + 17.", "We add 3 and"]


def _build(tokenizer, family: str, tied: bool, seed: int):
    """A tiny random model whose every tensor (norms and biases included) is far from its init."""
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import tiny_config

    cfg = tiny_config(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id)
    cfg.tie_word_embeddings = tied
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms start at 1, biases at 0: make both carry information
                p.copy_(1.0 + 0.3 * torch.randn_like(p) if "norm" in name else 0.5 * torch.randn_like(p))
            else:
                p.mul_(4.0)  # sharper logits: greedy choices are not near-ties
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def _qwen2_tokenizer():
    """Our tiny BPE with Qwen2's pre-tokenizer (its split regex, then byte-level without regex)."""
    from tokenizers import Regex, pre_tokenizers

    from posttrain.models.gguf_vocab import PRE_TOKENIZERS
    from posttrain.train.tokenizer import build_tokenizer
    from tests.conftest import tiny_corpus

    tok = build_tokenizer(tiny_corpus(), vocab_size=400)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKENIZERS["qwen2"][0][1]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return tok


@pytest.fixture(scope="module", params=["llama", "llama-untied", "qwen2"])
def hf_model(request, tmp_path_factory, tiny_tokenizer):
    """(directory, tokenizer): the llama ones use our gpt-2-style tokenizer, qwen2 Qwen2's split."""
    from posttrain.train.tiny import save_model

    family = request.param.split("-")[0]
    tok = _qwen2_tokenizer() if family == "qwen2" else tiny_tokenizer
    model = _build(tok, family, tied=not request.param.endswith("untied"), seed=3)
    return save_model(model, tok, tmp_path_factory.mktemp(request.param) / "model"), tok


@pytest.fixture
def hf_dir(hf_model):
    return hf_model[0]


def _load_gguf(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _original(hf_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()


def _greedy(model, tokenizer, prompt: str, n: int = 12) -> list[int]:
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def _state(model) -> dict[str, torch.Tensor]:
    sd = dict(model.state_dict())
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return sd


def test_names_match_the_gguf_packages_table(tiny_tokenizer):
    import gguf

    for family, arch in (("llama", gguf.MODEL_ARCH.LLAMA), ("qwen2", gguf.MODEL_ARCH.QWEN2)):
        model = _build(tiny_tokenizer, family, tied=False, seed=0)
        table = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
        names = list(model.state_dict())
        assert any(n.endswith("q_proj.bias") for n in names) == (family == "qwen2")
        for hf in names:
            stem, suffix = hf.rsplit(".", 1)
            assert gguf_name(hf) == f"{table.get_name(stem)}.{suffix}", hf


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_export_loads_back_with_the_original_tensors(hf_dir, tmp_path, dtype):
    out = tmp_path / f"m-{dtype}.gguf"
    done = export_gguf(hf_dir, out, dtype=dtype)
    original = _original(hf_dir)
    n_matrices = sum(p.dim() == 2 for p in _state(original).values())
    assert done.out == out and out.stat().st_size == done.size_bytes and not done.warnings
    assert done.architecture == ("qwen2" if original.config.model_type == "qwen2" else "llama")
    big = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0"}[dtype]
    assert done.tensor_types.get(big, 0) >= n_matrices and sum(done.tensor_types.values()) == len(_state(original))
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary file left

    loaded, _ = _load_gguf(out)
    assert loaded.config.num_hidden_layers == 2 and loaded.config.num_key_value_heads == 2
    assert loaded.config.rms_norm_eps == pytest.approx(original.config.rms_norm_eps)
    ours, theirs = _state(original), _state(loaded)
    assert set(ours) == set(theirs)
    lossy = 0
    for name, a in ours.items():
        b = theirs[name]
        if a.dim() == 1 or dtype == "f32":  # norms and biases stay f32 at every dtype
            assert torch.equal(a, b), name
        elif dtype == "f16":
            assert torch.equal(a.half().float(), b), name
        else:  # q8_0: blocks of 32, step amax/127 kept in f16: half a step plus 127 f16 roundings of it
            err = (a - b).abs().reshape(-1, 32)
            step = a.abs().reshape(-1, 32).amax(dim=1, keepdim=True) / 127
            assert (err <= step * (0.5 + 127 / 2048) + 1e-8).all(), name
            lossy += int(err.max() > 0)
    assert dtype != "q8_0" or lossy > 0


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_greedy_generations_match_the_original(hf_model, tmp_path, dtype):
    hf_dir, tiny_tokenizer = hf_model
    out = export_gguf(hf_dir, tmp_path / "m.gguf", dtype=dtype).out
    original = _original(hf_dir)
    loaded, gguf_tok = _load_gguf(out)
    for prompt in PROMPTS:
        expected = _greedy(original, tiny_tokenizer, prompt)
        assert _greedy(loaded, gguf_tok, prompt) == expected, prompt
        x = torch.tensor([tiny_tokenizer(prompt)["input_ids"]])
        with torch.no_grad():
            ours, theirs = original(x).logits, loaded(x).logits
        if dtype == "f32":  # lossless: the same logits, not only the same argmax
            torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)


def test_tokenizer_and_chat_template_round_trip(hf_model, tmp_path):
    import gguf

    hf_dir, tiny_tokenizer = hf_model

    out = export_gguf(hf_dir, tmp_path / "m.gguf", dtype="f16").out
    _, tok = _load_gguf(out)
    for text in TEXTS:
        ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tok(text, add_special_tokens=False)["input_ids"] == ids
        assert tok.decode(ids) == text
    chat = [{"role": "user", "content": TEXTS[0]}, {"role": "assistant", "content": "46"}]
    assert tok.chat_template == tiny_tokenizer.chat_template
    assert tok.apply_chat_template(chat, tokenize=False) == tiny_tokenizer.apply_chat_template(chat, tokenize=False)
    assert tok.eos_token_id == tiny_tokenizer.eos_token_id

    reader = gguf.GGUFReader(str(out))
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    arch = field("general.architecture")
    assert field("tokenizer.ggml.model") == "gpt2"
    assert field("tokenizer.ggml.pre") == ("qwen2" if arch == "qwen2" else "gpt-2")
    assert field("tokenizer.ggml.add_bos_token") is False
    assert field("tokenizer.ggml.padding_token_id") == tiny_tokenizer.pad_token_id
    assert "tokenizer.ggml.bos_token_id" not in reader.fields  # our tokenizer has no bos
    tokens, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    assert tokens == [tiny_tokenizer.convert_ids_to_tokens(i) for i in range(len(tiny_tokenizer))]
    assert types[tiny_tokenizer.eos_token_id] == gguf.TokenType.CONTROL and types[300] == gguf.TokenType.NORMAL
    assert field("general.file_type") == gguf.LlamaFileType.MOSTLY_F16
    assert field(f"{arch}.rope.freq_base") == 10000.0 and field(f"{arch}.context_length") == 1024


def test_pre_tokenizer_names():
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    digits = {"type": "Digits", "individual_digits": True}
    assert pre_tokenizer_name(byte_level, Path("m")) == "gpt-2"
    assert pre_tokenizer_name({"type": "Sequence", "pretokenizers": [digits, byte_level]}, Path("m")) == "smollm"
    with pytest.raises(ModelLoadError, match="Whitespace has no llama.cpp equivalent"):
        pre_tokenizer_name({"type": "Whitespace"}, Path("m"))


def test_vocab_is_padded_to_the_embedding_rows(tmp_path, tiny_tokenizer):
    import gguf
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import save_model, tiny_config

    cfg = tiny_config("llama", vocab_size=len(tiny_tokenizer) + 16, pad_token_id=tiny_tokenizer.pad_token_id,
                      eos_token_id=tiny_tokenizer.eos_token_id)
    model = AutoModelForCausalLM.from_config(cfg)
    src = save_model(model, tiny_tokenizer, tmp_path / "padded")
    out = export_gguf(src, tmp_path / "p.gguf", dtype="q8_0").out
    reader = gguf.GGUFReader(str(out))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == cfg.vocab_size and tokens[-1] == f"[PAD{cfg.vocab_size - 1}]"
    assert reader.fields["tokenizer.ggml.token_type"].contents()[-1] == gguf.TokenType.UNUSED


def test_bad_input_is_one_clear_line(tmp_path, tiny_model_dir):
    src = Path(tiny_model_dir)
    out = tmp_path / "m.gguf"
    with pytest.raises(ConfigError, match="unknown dtype 'q4_k'.*f32, f16, q8_0"):
        export_gguf(src, out, dtype="q4_k")
    out.write_bytes(b"old")
    with pytest.raises(ModelLoadError, match="already exists .pass --force"):
        export_gguf(src, out)
    assert out.read_bytes() == b"old"
    assert export_gguf(src, out, force=True).size_bytes > 1000

    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(src / f, no_tok / f)
    with pytest.raises(ModelLoadError, match="no tokenizer.json"):
        export_gguf(no_tok, tmp_path / "x.gguf")
    config = json.loads((no_tok / "config.json").read_text())
    (no_tok / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="architecture 'gpt2' cannot be exported.*llama, qwen2"):
        export_gguf(no_tok, tmp_path / "x.gguf")
    yarn = {"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}
    (no_tok / "config.json").write_text(json.dumps({**config, "rope_parameters": yarn}))
    with pytest.raises(ModelLoadError, match="rope type 'yarn' is not supported"):
        export_gguf(no_tok, tmp_path / "x.gguf")
    with pytest.raises(ModelLoadError, match="not a directory"):
        export_gguf(tmp_path / "missing", tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_cli_exports_and_bad_input_exits_2_with_one_line(tmp_path, tiny_model_dir):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "posttrain.cli", "export", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    out = tmp_path / "m.gguf"
    ok = cli(tiny_model_dir, "--format", "gguf", "--dtype", "q8_0", "--out", str(out))
    assert ok.returncode == 0 and out.is_file() and "wrote" in ok.stderr and "Q8_0 x" in ok.stderr
    for args, needle in (((tiny_model_dir, "--out", str(out)), "already exists"),
                         ((tiny_model_dir, "--format", "onnx", "--out", str(tmp_path / "y")), "unknown format 'onnx'")):
        bad = cli(*args)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.returncode == 2 and len(lines) == 1 and needle in lines[0], bad.stderr


def test_q8_0_bytes_dequantize_to_the_stored_tensor(tmp_path, tiny_model_dir):
    """The file's raw Q8_0 blocks (read with gguf's own reader, not transformers) decode to the weights."""
    import gguf
    from safetensors.torch import load_file

    out = export_gguf(tiny_model_dir, tmp_path / "q.gguf", dtype="q8_0").out
    reader = gguf.GGUFReader(str(out))
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
    w = gguf.quants.dequantize(t.data, t.tensor_type)
    ref = load_file(str(Path(tiny_model_dir) / "model.safetensors"))["model.layers.0.mlp.down_proj.weight"].numpy()
    assert w.shape == ref.shape and np.abs(w - ref).max() <= np.abs(ref).max() / 127
