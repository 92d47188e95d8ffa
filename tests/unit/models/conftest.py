"""A tiny llama (2 layers, hidden 64, our 400-token byte-level BPE with its ChatML template)
written as GGUF files with the `gguf` package's writer: F32 and Q4_1 (the real SmolLM2 file's type)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer):
    from posttrain.train.tiny import make_tiny_model

    return make_tiny_model(tiny_tokenizer, family="llama", seed=0).eval()


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """A folder holding tiny-F32.gguf, tiny-Q4_1.gguf and tiny-notemplate.gguf (read-only for tests)."""
    from tests.unit.models.tiny_gguf import write_tiny_gguf

    folder = tmp_path_factory.mktemp("gguf")
    for qtype in ("F32", "Q4_1"):
        write_tiny_gguf(tiny_llama, tiny_tokenizer, folder / f"tiny-{qtype}.gguf", qtype=qtype)
    write_tiny_gguf(tiny_llama, tiny_tokenizer, folder / "tiny-notemplate.gguf", chat_template=None)
    return folder
