"""The engines by name: a `core.registry.Registry` of "module:attr" factories, imported on first use,
so that no engine module imports another (and the protocol imports none of them).

    engine = ENGINES["paged"](model_path, tokenizer, dtype="float32")   # factory(model_or_path, tokenizer, **options)

Each factory is `make_engine(model_or_path, tokenizer=None, **options) -> Engine`. A test or benchmark
may put its own callable under a name (`ENGINES[name] = fn`, or monkeypatch.setitem).
"""

from __future__ import annotations

from posttrain.core.errors import ConfigError
from posttrain.core.registry import Registry

# name -> factory(model_or_path, tokenizer, **options) -> Engine
ENGINES = Registry("engine", {
    "hf": "posttrain.engine.hf:make_engine",  # the reference engine on HF transformers
    "paged": "posttrain.engine.paged.factory:make_engine",  # the built-in engine
    "remote": "posttrain.engine.remote:make_engine",  # any OpenAI-compatible endpoint
    "vllm": "posttrain.engine.vllm:make_engine",  # optional extra, GPUs
    "llamacpp": "posttrain.engine.llamacpp:make_engine",  # optional (llama-cpp-python), CPU serving
}, error=ConfigError)
