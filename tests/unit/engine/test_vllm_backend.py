"""What of the vLLM backend runs without vLLM: the SamplingParams mapping, Completion assembly from
vLLM-shaped outputs, the logprob caveats, the in-process model lookup for weight updates, and the
install hint when vllm is missing. The engine itself needs a GPU with vLLM installed."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field

import pytest
import torch

from posttrain.engine import SamplingParams
from posttrain.engine import vllm as backend

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@dataclass
class Logprob:  # the shape of vllm.sequence.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:  # the fields of vllm.outputs.CompletionOutput that we read
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None
    stop_reason: int | str | None = None
    text: str = ""
    extra: dict = field(default_factory=dict)


def test_sampling_params_mapping():
    p = SamplingParams(0.7, top_p=0.9, top_k=5, min_p=0.05, max_tokens=33, stop_token_ids=(2, 9), stop=("\n\n", "END"))
    kw = backend.vllm_sampling_kwargs(p, seed=123)
    assert kw == {
        "n": 1, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.05, "seed": 123, "max_tokens": 33,
        "stop": ["\n\n", "END"], "stop_token_ids": [2, 9], "ignore_eos": True, "logprobs": 0,
        "detokenize": True, "skip_special_tokens": False,
    }
    off = backend.vllm_sampling_kwargs(SamplingParams(0.0, max_tokens=4), seed=0)
    assert off["top_k"] == -1 and off["stop"] == [] and off["detokenize"] is False and off["temperature"] == 0.0


def test_completion_from_output():
    out = CompletionOutput([5, 6, 2], [{5: Logprob(-0.5, 1)}, {6: Logprob(-1.25, 3), 7: Logprob(-0.2, 1)},
                                       {2: Logprob(-3.0)}], "stop", stop_reason=2)
    c = backend.completion_from_output(out)
    assert c.token_ids == (5, 6, 2) and c.logprobs == (-0.5, -1.25, -3.0) and c.finish_reason == "stop"
    bare = backend.completion_from_output(CompletionOutput([5, 6], None, "length"))
    assert bare.token_ids == (5, 6) and all(math.isnan(x) for x in bare.logprobs)
    missing = backend.completion_from_output(CompletionOutput([5, 6], [{5: Logprob(-0.5)}, {8: Logprob(-1.0)}],
                                                              "length"))
    assert missing.logprobs[0] == -0.5 and math.isnan(missing.logprobs[1])
    floats = backend.completion_from_output(CompletionOutput([4], [{4: -0.75}], "length"))  # plain floats too
    assert floats.logprobs == (-0.75,)
    with pytest.raises(RuntimeError, match="abort"):
        backend.completion_from_output(CompletionOutput([5], None, "abort"))


def test_logprob_caveats():
    assert backend.logprob_caveat(SamplingParams(1.0), None) is None
    assert backend.logprob_caveat(SamplingParams(0.0, top_k=3), None) is None
    assert "T=1" in backend.logprob_caveat(SamplingParams(0.7), None)
    assert backend.logprob_caveat(SamplingParams(0.7), "processed_logprobs") is None
    assert "truncation" in backend.logprob_caveat(SamplingParams(0.7, top_p=0.9), "processed_logprobs")


def test_update_weights_finds_the_inprocess_model():
    """The attribute paths verl/OpenRLHF use: the model's own load_weights gets HF names."""

    class Model:
        def __init__(self):
            self.got = None

        def load_weights(self, weights):
            self.got = dict(weights)
            return set(self.got)

    def chain(names, leaf):
        obj = leaf
        for name in reversed(names):
            obj = type("Node", (), {name: obj})()
        return obj

    for path in backend._MODEL_PATHS:
        model = Model()
        llm, resets = chain(path, model), []
        llm.reset_prefix_cache = lambda: resets.append(1)  # cached KV is from the old weights
        assert backend._inprocess_model(llm) is model
        engine = object.__new__(backend.VLLMEngine)  # no vllm here: the engine around a stand-in LLM
        engine.llm, engine.version = llm, 0
        state = {"model.embed_tokens.weight": torch.ones(2, 2)}
        engine.update_weights(state, version=7)
        assert engine.version == 7 and set(model.got) == {"model.embed_tokens.weight"} and resets == [1]
    assert backend._inprocess_model(object()) is None


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed")
def test_missing_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install 'posttrain\[vllm\]'"):
        backend.make_engine("some/model")
    with pytest.raises(ImportError, match=r"posttrain\[vllm\]"):
        backend.require_vllm()
    with pytest.raises(ValueError, match="by path"):
        backend.make_engine(torch.nn.Linear(2, 2))
