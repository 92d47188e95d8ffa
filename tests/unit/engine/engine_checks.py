"""Checks and fixtures the engine tests share (HF reference engine and paged engine alike): completion
equality, the sampler's logprobs against a full forward, and a chi-square goodness-of-fit test."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.engine import Completion, SamplingParams


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def mixed_params(n: int, max_tokens: int) -> list[SamplingParams]:
    """Greedy and seeded T=1/top-p 0.9 requests of different lengths (up to max_tokens)."""
    return [
        SamplingParams(temperature=0.0, max_tokens=max_tokens - i % 5) if i % 2 == 0
        else SamplingParams(temperature=1.0, top_p=0.9, max_tokens=max_tokens - i % 7, seed=100 + i)
        for i in range(n)
    ]


def same(a: Completion, b: Completion) -> bool:
    """Same tokens and finish; logprobs equal up to the float noise that padding adds."""
    close = len(a.logprobs) == len(b.logprobs) and all(abs(x - y) < 1e-4 for x, y in zip(a.logprobs, b.logprobs))
    return a.token_ids == b.token_ids and a.finish_reason == b.finish_reason and close


def logprob_error(model, prompts, params, outs) -> float:
    """Largest |sampler logprob - log_softmax(logits / T)[token]| of one full HF forward per
    completion (T = 0 reports T = 1 logprobs); also checks one logprob per token, max_tokens each."""
    worst = 0.0
    for prompt, p, c in zip(prompts, params, outs):
        assert len(c.logprobs) == len(c.token_ids) == p.max_tokens
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(prompt) + list(c.token_ids)])).logits[0].float()
        ref = torch.log_softmax(logits[len(prompt) - 1 : -1] / (p.temperature or 1.0), dim=-1)
        ref = ref.gather(1, torch.tensor(c.token_ids)[:, None]).squeeze(1)
        worst = max(worst, float((ref - torch.tensor(c.logprobs)).abs().max()))
    return worst


def chi_square_999(df: int) -> float:
    """Upper 0.1% point of chi-square(df), Wilson-Hilferty approximation (z = 3.09)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + 3.09 * math.sqrt(c)) ** 3


def chi_square(counts: torch.Tensor, probs: torch.Tensor, n: int) -> tuple[float, int]:
    """Pearson statistic over tokens with expected count >= 5, the rest lumped into one bin."""
    expected = probs.double() * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]]).double()
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum()) - 1


# ---------------------------------------------------------------- fixtures (conftest.py re-exports them)
PROMPT_TEXTS = ["Calculate 1 + 2.", "Calculate 345 + 678 and then some more words.", "x", "We add 12 and"]


@pytest.fixture(scope="module")
def sharp_model(tiny_model_dir):
    """Callers that hand it to an engine owning its model (HFEngine) pass a deepcopy."""
    from posttrain.core.hf import load_model

    model = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    return model.eval()


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer(t, add_special_tokens=False)["input_ids"] for t in PROMPT_TEXTS]
