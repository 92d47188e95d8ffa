"""engine/registry.py: ENGINES is a table of "module:attr" names, each naming a real factory."""

from __future__ import annotations

import importlib

from posttrain.engine.registry import ENGINES


def test_every_engine_name_resolves_to_a_make_engine():
    for name, factory in ENGINES.items():
        module, _, attr = factory.target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name
    assert sorted(ENGINES) == ["hf", "paged", "remote", "vllm"]
