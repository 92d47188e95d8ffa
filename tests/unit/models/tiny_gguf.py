"""Write a tiny llama GGUF file locally with the `gguf` package's writer, from a tiny HF model
and our byte-level BPE tokenizer, so conversion is tested without any download.

    write_tiny_gguf(model, tokenizer, "tiny.gguf", qtype="Q8_0")

The tensors take llama.cpp's names and layout (q/k rows permuted the way its converter does);
`qtype` quantizes the 2-D weights with `gguf.quants` (norms stay F32, as llama.cpp keeps them);
`arch` is only the metadata's name (an unsupported one for error tests), `f64_norms` stores the
norms as F64, a tensor type transformers cannot load.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row order for q/k: each head's rotary halves interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(model, tokenizer, path: str | Path, qtype: str = "F32", arch: str = "llama",
                    chat_template: str | None = "default", name: str = "tiny-llama",
                    f64_norms: bool = False) -> Path:
    import gguf

    cfg = model.config
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)

    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = set(tokenizer.all_special_tokens)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(tokenizer.chat_template if chat_template == "default" else chat_template)

    quant = gguf.GGMLQuantizationType[qtype]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        stem, suffix = hf_name.rsplit(".", 1)
        gguf_name = f"{names.get_name(stem)}.{suffix}"
        w = tensor.detach().float().numpy()
        if ".attn_q." in gguf_name:
            w = _permute_qk(w, cfg.num_attention_heads)
        elif ".attn_k." in gguf_name:
            w = _permute_qk(w, cfg.num_key_value_heads)
        if w.ndim == 2 and quant != gguf.GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name, gguf.quants.quantize(w, quant), raw_dtype=quant)
        else:
            writer.add_tensor(gguf_name, w.astype("float64") if f64_norms else w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
