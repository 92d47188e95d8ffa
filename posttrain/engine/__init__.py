"""Rollout: the `Engine` protocol (prompts as token ids -> completions with sampler logprobs),
`SamplingParams` / `Completion`, the engines by name (`ENGINES`), and `HFEngine`, the reference
engine on HF transformers."""

from posttrain.engine.hf import HFEngine
from posttrain.engine.protocol import Completion, Engine, SamplingParams, sample_next
from posttrain.engine.registry import ENGINES

__all__ = ["ENGINES", "Completion", "Engine", "HFEngine", "SamplingParams", "sample_next"]
