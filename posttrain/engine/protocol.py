"""The rollout `Engine` protocol, its request/result types, and the shared sampler (engines by name:
`engine/registry.py` ENGINES).

An engine turns prompts (token ids) into completions (token ids + the sampler's logprob of
each sampled token) under per-request `SamplingParams`, and takes new policy weights with
`update_weights(state_dict, version)`. Token-in, token-out: nothing is re-tokenized.

    engine = ENGINES["hf"](model_path, tokenizer)          # engine/registry.py; or HFEngine(model, pad_token_id=...)
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
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import torch
import torch.nn.functional as F

from posttrain.core.types import SamplingParams  # noqa: F401  (defined with the other messages)


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
    """What every engine has. Optional capabilities, read through the functions below rather than
    probed by each caller: `weights_precision` ("exact" when the engine samples with the trainer's
    fp32 weights, else the dtype's name; `weights_precision(engine)`), `kv_stats()` (KV-cache block
    counts; `kv_stats(engine)`), `reset_prefix_cache()` (forget cached prefixes; `reset_prefix_cache(engine)`)."""

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


@runtime_checkable
class KVStatsEngine(Protocol):
    def kv_stats(self) -> dict[str, Any]: ...


@runtime_checkable
class PrefixCacheEngine(Protocol):
    def reset_prefix_cache(self) -> None: ...


def weights_precision(engine: Any) -> str:
    """The engine's `weights_precision`, "exact" for an engine that does not say."""
    return str(getattr(engine, "weights_precision", "exact"))


def kv_stats(engine: Any) -> dict[str, Any]:
    """The engine's KV-cache stats; {} for an engine without a paged cache."""
    return engine.kv_stats() if isinstance(engine, KVStatsEngine) else {}


def reset_prefix_cache(engine: Any) -> bool:
    """Forget the engine's cached prefixes; False when it keeps none."""
    if not isinstance(engine, PrefixCacheEngine):
        return False
    engine.reset_prefix_cache()
    return True


def check_batch(prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> None:
    """The checks every `generate` makes first: one SamplingParams per prompt, no empty prompt."""
    if len(prompts) != len(params):
        raise ValueError(f"generate: {len(prompts)} prompts but {len(params)} SamplingParams (one per prompt)")
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"generate: prompt {i} is empty")


def step_until_finished(engine: SteppingEngine, request_ids: Sequence[int]) -> list[Completion]:
    """Step `engine` until every one of `request_ids` has finished; their completions in that order
    (what the steps report for other requests is dropped). How a stepping engine's `generate` runs
    the requests it has just queued (no other step loop may run meanwhile)."""
    index = {rid: i for i, rid in enumerate(request_ids)}
    tokens: list[list[int]] = [[] for _ in request_ids]
    logprobs: list[list[float]] = [[] for _ in request_ids]
    finish: list[str | None] = [None] * len(request_ids)
    remaining = len(request_ids)
    while remaining:
        for out in engine.step():
            i = index.get(out.request_id)
            if i is None:
                continue
            tokens[i] += out.token_ids
            logprobs[i] += out.logprobs
            if out.finished:
                finish[i] = out.finish_reason
                remaining -= 1
    return [Completion(tuple(t), tuple(lp), str(f)) for t, lp, f in zip(tokens, logprobs, finish)]


def check_request(prompt: Sequence[int], params: SamplingParams, *, vocab_size: int, max_model_len: int,
                  has_tokenizer: bool, where: str, name: str = "the prompt") -> None:
    """The per-request checks of an engine that holds its own context: a non-empty prompt of token ids in
    the vocabulary, room for at least one new token, and a tokenizer when stop strings are asked for
    (errors name `where` and `name`)."""
    if not prompt:
        raise ValueError(f"{where}: {name} is empty")
    if min(prompt) < 0 or max(prompt) >= vocab_size:
        raise ValueError(f"{where}: {name} has a token id outside the vocabulary [0, {vocab_size})")
    if len(prompt) >= max_model_len:
        raise ValueError(f"{where}: {name} has {len(prompt)} tokens but the context limit max_model_len is "
                         f"{max_model_len} (the prompt and at least one new token must fit)")
    if params.stop and not has_tokenizer:
        raise ValueError(f"{where}: stop strings need a tokenizer; the engine was built without one")


def hits_stop_string(tokenizer: Any, ids: Sequence[int], stop: Sequence[str]) -> bool:
    """Whether the decoded tail of `ids` contains one of `stop`. Every token decodes to >= 1 byte,
    so a stop string the newest token completes starts within its last len(bytes) tokens: only
    that window (doubled, for slack) is decoded."""
    window = 2 * max(len(s.encode()) for s in stop) + 4
    text = tokenizer.decode(list(ids[-window:]), skip_special_tokens=False)
    return any(s in text for s in stop)


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

    logits [B, V] (any float dtype; computed in float32); temperature [B] (0 = greedy: argmax of
    the logits); top_k [B] long (0 = off); top_p [B]; uniforms [B] float64 in [0, 1), one draw per
    row from that request's own generator; min_p [B] or None. Sampled rows: top-k, then top-p on
    the renormalised top-k distribution (the smallest most-probable prefix whose mass reaches
    top_p; the first token always stays), then min-p (tokens under min_p x the top token's
    probability dropped), then inverse-CDF sampling with the row's uniform (`inverse_cdf`), so a
    row's token depends on its logits and its uniform only.

    Cost matters at a real vocabulary: on a 2-core CPU a [128, 49k] batch through log_softmax,
    argmax and a float64 exp + cumsum took ~100 ms, as long as the model's forward. Here: one
    max pass (values and indices), one exp-sum pass for logsumexp, float32 probabilities and a
    two-level CDF (~10 ms)."""
    logits = logits.float()
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.dtype)
    scaled = logits if bool((scale == 1).all()) else logits / scale[:, None]  # T = 1: no division
    top, tokens = scaled.max(dim=-1, keepdim=True)
    lse = top + (scaled - top).exp_().sum(dim=-1, keepdim=True).log_()
    tokens = tokens.squeeze(1)
    rows = (~greedy).nonzero().squeeze(1)
    if rows.numel():
        probs = (scaled[rows] - lse[rows]).exp_()
        k, p = top_k[rows], top_p[rows].double()
        mp = min_p[rows] if min_p is not None else None
        order = None
        if bool((k > 0).any()) or bool((p < 1).any()):
            probs, order = probs.double().sort(dim=-1, descending=True, stable=True)
            ranks = torch.arange(probs.shape[-1], device=probs.device)
            probs = probs * ((k[:, None] == 0) | (ranks[None, :] < k[:, None]))
            mass_before = probs.cumsum(dim=-1) - probs
            probs = probs * (mass_before < p[:, None] * probs.sum(dim=-1, keepdim=True))
        if mp is not None and bool((mp > 0).any()):
            probs = probs * (probs >= mp[:, None].to(probs.dtype) * probs.max(dim=-1, keepdim=True).values)
        idx = inverse_cdf(probs, uniforms[rows])
        tokens[rows] = order.gather(1, idx[:, None]).squeeze(1) if order is not None else idx
    return tokens, (scaled.gather(1, tokens[:, None]) - lse).squeeze(1)


CDF_BLOCK = 1024


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose cumulative mass exceeds u x the row's total (never an index
    of zero mass): probs [R, V] >= 0 (unnormalised), uniforms [R] float64 in [0, 1).

    Two levels, both accumulated in float64: block sums of `CDF_BLOCK` entries pick the block,
    then one block's running sum picks the index. A full-width float64 cumsum is a sequential
    scan over V per row (~40 ms for 128 x 49k on a CPU); this reads the probabilities once."""
    r, v = probs.shape
    nb = -(-v // CDF_BLOCK)
    p = F.pad(probs, (0, nb * CDF_BLOCK - v)) if nb * CDF_BLOCK != v else probs
    p = p.view(r, nb, CDF_BLOCK)
    block_cdf = p.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)  # [R, nb]
    total = block_cdf[:, -1:]
    x = uniforms.to(torch.float64)[:, None] * total
    # u x total can round up to the total: stay on the last block (then index) with mass > 0
    j = torch.minimum(torch.searchsorted(block_cdf, x, right=True),
                      torch.searchsorted(block_cdf, total.contiguous(), right=False))
    before = torch.where(j > 0, block_cdf.gather(1, (j - 1).clamp_(min=0)), torch.zeros_like(x))
    inner = p.gather(1, j[:, :, None].expand(r, 1, CDF_BLOCK)).squeeze(1).to(torch.float64).cumsum(dim=-1)
    k = torch.minimum(torch.searchsorted(inner, (x - before).contiguous(), right=True),
                      torch.searchsorted(inner, inner[:, -1:].contiguous(), right=False))
    return (j * CDF_BLOCK + k).squeeze(1)
