"""Off-policy corrections: per-token loss weights for tokens the trainer did not sample itself.

A token is off-policy when the weights that sampled it (the behaviour policy mu: an older
version in asynchronous RL, or the same version at bf16 / int8 precision) are not the weights
being trained. With rho_t = exp(log pi_prox(t) - log mu(t)), where pi_prox is the trainer's
policy at the start of the update (its logprobs recomputed, or taken detached from the first
forward pass when the step makes one update), each correction gives a weight w_t that
multiplies the token's PPO loss, whose ratio is taken against pi_prox:

    tis        w = min(rho_t, cap)                           truncated IS (Ionides 2008; the
                                                             "TIS" of Yao et al. 2025, verl)
    decoupled  w = rho_t                                     decoupled PPO (Hilton et al. 2021,
                                                             "Batch size-invariance for policy
                                                             optimization"; AReaL): the clip on
                                                             pi / pi_prox is the trust region,
                                                             the behaviour ratio is not cut
    seq_mask   w = 1 if low <= prod_t rho_t <= high else 0   sequence-level masked IS: a sequence
                                                             too far off-policy is left out whole
    geo_mask   w = 1 if low <= (prod_t rho_t)^(1/n) <= high  the same on the geometric mean
               else 0                                        (length-normalised, so long sequences
                                                             are not all masked)
    none       w = 1, and the ratio against mu itself        plain PPO on stale data (the clip alone)

Each is a pure function of flat [N] tensors (every token of a micro-batch, `seq_index` naming
its sequence) and is picked by name from `OFF_POLICY`. `effective_sample_size` is the
normalised ESS (sum w)^2 / (N sum w^2): 1 when every weight is equal, 1/N when one token carries
them all.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def _log_ratio(proximal: Tensor, sampler: Tensor) -> Tensor:
    if proximal.shape != sampler.shape or proximal.dim() != 1:
        raise ValueError(f"off-policy weights need flat [N] tensors of one shape, got {tuple(proximal.shape)} "
                         f"and {tuple(sampler.shape)}")
    return torch.clamp(proximal.detach().float() - sampler.detach().float(), -20.0, 20.0)


def tis(proximal: Tensor, sampler: Tensor, seq_index: Tensor, *, cap: float = 2.0, **_) -> Tensor:
    if cap <= 0:
        raise ValueError(f"tis needs cap > 0, got {cap}")
    return torch.clamp(torch.exp(_log_ratio(proximal, sampler)), max=cap)


def decoupled(proximal: Tensor, sampler: Tensor, seq_index: Tensor, **_) -> Tensor:
    return torch.exp(_log_ratio(proximal, sampler))


def _sequence_mask(per_seq: Tensor, seq_index: Tensor, low: float, high: float) -> Tensor:
    if not 0 < low <= 1 <= high:
        raise ValueError(f"masking needs 0 < low <= 1 <= high, got low={low}, high={high}")
    keep = (per_seq >= torch.log(torch.tensor(low))) & (per_seq <= torch.log(torch.tensor(high)))
    return keep[seq_index].float()


def _per_sequence_sums(r: Tensor, seq_index: Tensor) -> tuple[Tensor, Tensor]:
    n = int(seq_index.max()) + 1 if seq_index.numel() else 0
    sums = torch.zeros(n, dtype=r.dtype).index_add_(0, seq_index, r)
    counts = torch.zeros(n, dtype=r.dtype).index_add_(0, seq_index, torch.ones_like(r))
    return sums, counts


def seq_mask(proximal: Tensor, sampler: Tensor, seq_index: Tensor, *, low: float = 0.5, high: float = 2.0,
             **_) -> Tensor:
    r = _log_ratio(proximal, sampler)
    sums, _ = _per_sequence_sums(r, seq_index)
    return _sequence_mask(sums, seq_index, low, high)


def geo_mask(proximal: Tensor, sampler: Tensor, seq_index: Tensor, *, low: float = 0.5, high: float = 2.0,
             **_) -> Tensor:
    r = _log_ratio(proximal, sampler)
    sums, counts = _per_sequence_sums(r, seq_index)
    return _sequence_mask(sums / counts.clamp(min=1), seq_index, low, high)


def none(proximal: Tensor, sampler: Tensor, seq_index: Tensor, **_) -> Tensor:
    _log_ratio(proximal, sampler)
    return torch.ones_like(proximal, dtype=torch.float32)


OFF_POLICY: dict[str, Callable[..., Tensor]] = {
    "tis": tis, "decoupled": decoupled, "seq_mask": seq_mask, "geo_mask": geo_mask, "none": none,
}


def off_policy_weights(name: str, proximal: Tensor, sampler: Tensor, seq_index: Tensor, **options) -> Tensor:
    """OFF_POLICY[name](...): the weight [N] (float32) of each token; ValueError naming the known ones."""
    try:
        fn = OFF_POLICY[name]
    except KeyError:
        raise ValueError(f"unknown off-policy correction {name!r}; known: {sorted(OFF_POLICY)}") from None
    return fn(proximal, sampler, seq_index, **options)


def corrects(algo) -> bool:
    """Whether `algo` (config.AlgoConfig) corrects off-policy tokens at all: not with `none`, nor with
    `tis` and no cap (`tis_cap: null` turns the default correction off; the gap is still measured)."""
    return algo.off_policy != "none" and (algo.off_policy != "tis" or algo.tis_cap is not None)


def off_policy_options(algo) -> dict:
    return {"cap": algo.tis_cap, "low": algo.off_policy_low, "high": algo.off_policy_high}


def effective_sample_size(weights: Tensor) -> float:
    """(sum w)^2 / (N sum w^2) in [1/N, 1]; 1.0 for no tokens or all-zero weights' absence of information."""
    w = weights.detach().double()
    sq = float((w * w).sum())
    if w.numel() == 0 or sq == 0.0:
        return 1.0 if w.numel() == 0 else 0.0
    return float(w.sum()) ** 2 / (w.numel() * sq)
