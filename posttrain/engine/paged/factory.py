"""`ENGINES["paged"]`: a PagedEngine (engine.py) with speculative decoding on by default (spec.py).
Speculation and the engine do not import each other: a draft-model proposer gets this factory to
build its own engine."""

from __future__ import annotations

from typing import Any

from posttrain.engine.paged.engine import PagedEngine, build_engine
from posttrain.engine.paged.spec import enable_speculative


def make_engine(model_or_path: Any, tokenizer=None, **options: Any) -> PagedEngine:
    """`ENGINES["paged"]`: a path to an HF model directory (safetensors) or an HF causal LM object.
    Options: device, dtype ('auto' = fp32 on CPU, bf16 on CUDA), block_size, num_blocks or
    kv_cache_bytes, max_model_len, max_num_seqs, max_num_batched_tokens, prefix_sharing, kv_dtype,
    weights ("exact", the default | "bf16" | "int8" | "int8-weight-only" | "auto": quant.py);
    speculative ("ngram", the default | "draft:PATH" | None: off), speculative_k, speculative_max_running
    (spec.py: drafts only while at most that many sequences are in flight; exact either way)."""
    spec = {"speculative": "ngram"}
    spec.update({k: options.pop(k) for k in ("speculative", "speculative_k", "speculative_max_running") if k in options})
    engine = build_engine(model_or_path, tokenizer=tokenizer, **options)
    if spec.get("speculative"):
        enable_speculative(engine, spec["speculative"], k=spec.get("speculative_k"),
                           max_running=spec.get("speculative_max_running", 4), make_draft=make_engine)
    return engine
