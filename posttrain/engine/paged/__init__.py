"""The built-in paged rollout engine: continuous batching over a paged KV cache with prefix
sharing, chunked prefill and preemption, for Llama / Qwen2 / Qwen3 / Mistral checkpoints.

config.py (HF config -> ModelSpec, RoPE tables), model.py (the decoder, weights), attention.py
(metadata and attention over blocks), cache.py (block allocator, KV tensors, int8),
scheduler.py (sequences, what runs each step), engine.py (PagedEngine), spec.py (speculative
decoding), factory.py (make_engine: engine + speculation).
"""

from posttrain.engine.paged.engine import PagedEngine
from posttrain.engine.paged.factory import make_engine

__all__ = ["PagedEngine", "make_engine"]
