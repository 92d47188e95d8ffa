"""engine/registry.py: ENGINES is a table of "module:attr" names, each naming a real factory."""

from __future__ import annotations

from posttrain.engine.registry import ENGINES


def test_every_engine_name_resolves_to_a_make_engine():
    assert sorted(ENGINES) == ["hf", "llamacpp", "paged", "remote", "vllm"]
    for name in ENGINES:
        factory = ENGINES[name]
        assert callable(factory) and factory.__name__ == "make_engine", name
        assert factory.__module__.startswith("posttrain.engine."), name
