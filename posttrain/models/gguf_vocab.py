"""The tokenizer half of a GGUF export: an HF fast byte-level BPE tokenizer as llama.cpp's
"gpt2" tokenizer model (tokens in id order, token types, merges, special ids, add_bos/add_eos,
the pre-tokenizer's llama.cpp name) and the chat template.

    vocab = read_vocab(model_dir, n_vocab)   # n_vocab: rows of the embedding matrix
    vocab.write(writer)                      # into a gguf.GGUFWriter's metadata

llama.cpp splits text before BPE with a fixed regex chosen by `tokenizer.ggml.pre`; we name it
from the tokenizer.json pre-tokenizer's structure (plain ByteLevel -> gpt-2, individual digits
then ByteLevel -> smollm, the Qwen2 / Llama-3 split regexes -> qwen2 / llama-bpe). Any other
pre-tokenizer is refused in one line rather than exported with a split that tokenizes
differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from posttrain.core.errors import ModelLoadError, one_line

_LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                 "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# llama.cpp pre-tokenizer name -> the tokenizer.json pre-tokenizer steps it reproduces
PRE_TOKENIZERS = {
    "gpt-2": (("ByteLevel", True),),
    "smollm": (("Digits", True), ("ByteLevel", True)),
    "qwen2": (("Split", _QWEN2_SPLIT), ("ByteLevel", False)),
    "llama-bpe": (("Split", _LLAMA3_SPLIT), ("ByteLevel", False)),
}


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    types: list[int]  # gguf.TokenType per token
    merges: list[str]  # "left right", in rank order
    pre: str  # llama.cpp's pre-tokenizer name
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None

    def write(self, writer) -> None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.types)
        writer.add_token_merges(self.merges)
        for add, value in ((writer.add_bos_token_id, self.bos_id), (writer.add_eos_token_id, self.eos_id),
                           (writer.add_pad_token_id, self.pad_id), (writer.add_unk_token_id, self.unk_id)):
            if value is not None:
                add(value)
        writer.add_add_bos_token(self.add_bos)
        writer.add_add_eos_token(self.add_eos)
        if self.chat_template:
            writer.add_chat_template(self.chat_template)


def _step(p: dict) -> tuple:
    kind = p.get("type")
    if kind == "ByteLevel":
        return kind, bool(p.get("use_regex", True))
    if kind == "Digits":
        return kind, bool(p.get("individual_digits", False))
    if kind == "Split":
        return kind, (p.get("pattern") or {}).get("Regex")
    return (kind,)


def pre_tokenizer_name(spec: dict | None, where: Path) -> str:
    """llama.cpp's name for a tokenizer.json `pre_tokenizer`, or a one-line ModelLoadError."""
    if not spec:
        raise ModelLoadError(f"{where}: the tokenizer has no pre-tokenizer; GGUF export needs a byte-level BPE one")
    steps = spec.get("pretokenizers", []) if spec.get("type") == "Sequence" else [spec]
    shape = tuple(_step(p) for p in steps)
    for name, known in PRE_TOKENIZERS.items():
        if shape == known:
            return name
    kinds = " + ".join(str(s[0]) for s in shape)
    raise ModelLoadError(f"{where}: pre-tokenizer {kinds} has no llama.cpp equivalent this exporter knows "
                         f"(known: {', '.join(PRE_TOKENIZERS)})")


def _load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as e:
        raise ModelLoadError(f"{model_dir}: cannot load its tokenizer ({one_line(e, 160)})") from None
    if not getattr(tok, "is_fast", False):
        raise ModelLoadError(f"{model_dir}: the tokenizer is not a fast (tokenizer.json) tokenizer; "
                             f"GGUF export needs one")
    return tok


def _chat_template(tok) -> str | None:
    template = getattr(tok, "chat_template", None)
    if isinstance(template, dict):  # several named templates: llama.cpp reads the default one
        template = template.get("default")
    return template if isinstance(template, str) and template.strip() else None


def read_vocab(model_dir: Path, n_vocab: int) -> Vocab:
    """The vocabulary of the tokenizer in `model_dir`, padded to the embedding's `n_vocab` rows."""
    import gguf

    if not (model_dir / "tokenizer.json").is_file():
        raise ModelLoadError(f"{model_dir}: no tokenizer.json (GGUF export needs the model's fast tokenizer "
                             f"saved beside it)")
    tok = _load_tokenizer(model_dir)
    spec = json.loads(tok.backend_tokenizer.to_str())
    model = spec.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ModelLoadError(f"{model_dir}: tokenizer model {model.get('type')!r} is not byte-level BPE; "
                             f"this exporter writes gpt2-style BPE vocabularies only")
    pre = pre_tokenizer_name(spec.get("pre_tokenizer"), model_dir)

    by_id: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    top = max(by_id) + 1
    if top > n_vocab:
        raise ModelLoadError(f"{model_dir}: the tokenizer has ids up to {top - 1} but the embedding has only "
                             f"{n_vocab} rows")
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:  # an embedding row no token uses (vocab padded to a round size)
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    probe = tok("a", add_special_tokens=True)["input_ids"]
    bare = tok("a", add_special_tokens=False)["input_ids"]
    add_bos = tok.bos_token_id is not None and len(probe) > len(bare) and probe[0] == tok.bos_token_id
    add_eos = tok.eos_token_id is not None and len(probe) > len(bare) and probe[-1] == tok.eos_token_id
    return Vocab(
        tokens=tokens, types=[int(t) for t in types], merges=merges, pre=pre,
        bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, unk_id=tok.unk_token_id,
        add_bos=bool(add_bos), add_eos=bool(add_eos), chat_template=_chat_template(tok),
    )
