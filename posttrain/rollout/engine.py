"""The rollout `Engine` protocol, its request/result types, and the registry of engines.

An engine turns prompts (token ids) into completions (token ids + the sampler's logprob of
each sampled token) under per-request `SamplingParams`, and takes new policy weights with
`update_weights(state_dict, version)`. Token-in, token-out: nothing is re-tokenized.

    engine = ENGINES["hf"](model_path, tokenizer)          # or HFEngine(model, pad_token_id=...)
    [c] = engine.generate([prompt_ids], [SamplingParams(temperature=1.0, max_tokens=64, seed=7)])
    c.token_ids, c.logprobs, c.finish_reason

Contract every engine keeps:
- `logprobs[i]` is log_softmax(logits / T)[token_ids[i]] under the weights of `version`, before
  top-k/top-p truncation (T = 0 reports the T = 1 logprobs);
- the same request (prompt, params with a seed) on the same weights gives the same completion,
  whatever else is in the batch;
- `token_ids` are every sampled token: a stop token is included, and the token that completed a
  stop string is the last one (the text is not trimmed here; callers decode what they need).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import torch

from posttrain.types import SamplingParams  # noqa: F401  (defined with the other messages)


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]  # generated tokens only, the stop token included when it was hit
    logprobs: tuple[float, ...]  # log_softmax(logits / T)[token] before top-p/top-k; T=0 -> T=1 logprobs
    finish_reason: str  # "stop" | "length"


@dataclass
class StepOutput:
    """What one `step()` of a continuously batching engine produced for one request."""

    request_id: int
    token_ids: list[int]  # new tokens this step (usually 1; more when speculative drafts are accepted)
    logprobs: list[float]
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort" once finished


@runtime_checkable
class Engine(Protocol):
    version: int  # policy version of the weights in use

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]: ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None: ...


@runtime_checkable
class SteppingEngine(Engine, Protocol):
    """An engine that batches continuously: requests join between steps, finished ones leave."""

    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams) -> int: ...  # thread-safe

    def abort(self, request_id: int) -> None: ...  # thread-safe

    def step(self) -> list[StepOutput]: ...  # one scheduler iteration, from one thread

    def has_unfinished(self) -> bool: ...


def check_batch(prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> None:
    """The checks every `generate` makes first: one SamplingParams per prompt, no empty prompt."""
    if len(prompts) != len(params):
        raise ValueError(f"generate: {len(prompts)} prompts but {len(params)} SamplingParams (one per prompt)")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"generate: prompt {i} is empty")


_SEED_RANGE = 2**63 - 1  # drawn seeds are in [0, 2**63 - 1): any engine or server takes them


def request_seed(params: SamplingParams) -> int:
    """The seed a request samples with: `params.seed` when it is set, untouched (a seeded request
    never reads any RNG, so it samples the same whatever else is drawn); when None, one draw from
    the global torch RNG. Every engine calls this once per request, in request order, so a run
    of unseeded requests is reproducible under `torch.manual_seed` (and only under it)."""
    return params.seed if params.seed is not None else int(torch.randint(_SEED_RANGE, ()))


def sample_next(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, uniforms: torch.Tensor,
    min_p: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One next token per row, and its logprob log_softmax(logits / T)[token] (T = 0 -> T = 1).

    logits [B, V]; temperature [B] (0 = greedy: argmax of the logits); top_k [B] long (0 = off);
    top_p [B]; uniforms [B] float64 in [0, 1), one draw per row from that request's own generator;
    min_p [B] or None. Sampled rows: top-k, then top-p on the renormalised top-k distribution (the
    smallest most-probable prefix whose mass reaches top_p; the first token always stays), then
    min-p (tokens under min_p x the top token's probability dropped), then inverse-CDF
    sampling with the row's uniform, so a row's token depends on its logits and its uniform only.
    """
    logits = logits.float()
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.dtype)
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)
    tokens = logits.argmax(dim=-1)
    rows = (~greedy).nonzero().squeeze(1)
    if rows.numel():
        probs = logp[rows].double().exp()
        k, p = top_k[rows], top_p[rows].double()
        mp = min_p[rows].double() if min_p is not None else torch.zeros_like(p)
        order = None
        if bool((k > 0).any()) or bool((p < 1).any()):
            probs, order = probs.sort(dim=-1, descending=True, stable=True)
            ranks = torch.arange(probs.shape[-1], device=probs.device)
            probs = probs * ((k[:, None] == 0) | (ranks[None, :] < k[:, None]))
            mass_before = probs.cumsum(dim=-1) - probs
            probs = probs * (mass_before < p[:, None] * probs.sum(dim=-1, keepdim=True))
        if bool((mp > 0).any()):
            probs = probs * (probs >= mp[:, None] * probs.max(dim=-1, keepdim=True).values)
        cdf = probs.cumsum(dim=-1)
        x = uniforms[rows].to(cdf)[:, None] * cdf[:, -1:]
        idx = torch.searchsorted(cdf, x, right=True)
        # u * total can round up to total: stay on the last token with probability > 0
        idx = torch.minimum(idx, torch.searchsorted(cdf, cdf[:, -1:].contiguous(), right=False))
        tokens[rows] = (order.gather(1, idx) if order is not None else idx).squeeze(1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _hf_engine(model_or_path: Any, tokenizer: Any = None, **options: Any) -> Engine:
    """`model_or_path`: a path (loaded with train.model.load_model; options dtype, device) or an
    HF causal LM the engine will own. Other options go to HFEngine (max_batch_sequences, ...)."""
    from posttrain.rollout.hf import HFEngine

    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        return HFEngine.from_pretrained(str(model_or_path), tokenizer=tokenizer, **options)
    if "pad_token_id" not in options:
        options["pad_token_id"] = HFEngine.default_pad_token_id(model_or_path, tokenizer)
    return HFEngine(model_or_path, tokenizer=tokenizer, **options)


def _from_module(module: str) -> Callable[..., Engine]:
    """A factory that imports `module` on first use and calls its `make_engine`."""

    def factory(model_or_path: Any, tokenizer: Any = None, **options: Any) -> Engine:
        import importlib

        return importlib.import_module(module).make_engine(model_or_path, tokenizer, **options)

    return factory


# name -> factory(model_or_path, tokenizer, **options) -> Engine
ENGINES: dict[str, Callable[..., Engine]] = {
    "hf": _hf_engine,
    "paged": _from_module("posttrain.rollout.paged.engine"),  # the built-in engine
    "remote": _from_module("posttrain.rollout.remote"),  # any OpenAI-compatible endpoint
    "vllm": _from_module("posttrain.rollout.vllm"),  # optional extra, GPUs
}
