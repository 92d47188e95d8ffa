"""Shared fixtures: a tiny HF model + locally built tokenizer saved in standard HF layout."""

from __future__ import annotations

import os
import random

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from intra-op threads, and on a loaded 2-core machine two
# threads per process ran the same SFT test 50x slower than one (measured here).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after the thread settings)

torch.set_num_threads(1)

from posttrain.domains import load_domains  # noqa: E402  (an entry point: every domain registers its parts)

load_domains()

CORPUS_SEED = 1234


def tiny_corpus(n: int = 400) -> list[str]:
    rng = random.Random(CORPUS_SEED)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        out.append(f"Calculate {a} + {b}.\nWe add {a} and {b} to get {a + b}.\nAnswer: {a + b}")
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from posttrain.train.tokenizer import build_tokenizer

    return build_tokenizer(tiny_corpus(), vocab_size=400)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer):
    """A 2-layer Qwen2 model (random init) saved with save_pretrained; load it with from_pretrained."""
    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family="qwen2", seed=0)
    return str(save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_tokenizer):
    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family="llama", seed=0)
    return str(save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("tiny_llama") / "model"))
