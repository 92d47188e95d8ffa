"""The engines by name: a table of "module:attr" factories, imported on first use, so that no
engine module imports another (and the protocol imports none of them).

    engine = ENGINES["paged"](model_path, tokenizer, dtype="float32")   # factory(model_or_path, tokenizer, **options)

Each factory is `make_engine(model_or_path, tokenizer=None, **options) -> Engine`. The table is a
plain dict: a test or benchmark may put its own callable under a name.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from posttrain.engine.protocol import Engine


class _Named:
    """A factory named "module:attr", imported on the first call."""

    def __init__(self, target: str):
        self.target = target

    def __call__(self, model_or_path: Any, tokenizer: Any = None, **options: Any) -> Engine:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)(model_or_path, tokenizer, **options)

    def __repr__(self) -> str:
        return f"<engine factory {self.target}>"


# name -> factory(model_or_path, tokenizer, **options) -> Engine
ENGINES: dict[str, Callable[..., Engine]] = {
    "hf": _Named("posttrain.engine.hf:make_engine"),  # the reference engine on HF transformers
    "paged": _Named("posttrain.engine.paged.factory:make_engine"),  # the built-in engine
    "remote": _Named("posttrain.engine.remote:make_engine"),  # any OpenAI-compatible endpoint
    "vllm": _Named("posttrain.engine.vllm:make_engine"),  # optional extra, GPUs
}
