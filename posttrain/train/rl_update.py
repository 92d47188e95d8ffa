"""The policy update of one RL step: mini-batches of samples -> micro-batches -> loss -> AdamW.

    metrics = update_policy(model, optimizer, scheduler, samples, algo=cfg.algo, ...)

Each of `updates_per_step` mini-batches (consecutive slices of the step's samples, so a
group stays together) is one optimizer update. Its loss is written as a sum over its
tokens of `token_weights(...) x per-token loss`, so gradients accumulated over
micro-batches equal one big batch's exactly. Per-token loss:

    ppo_clip(logp, old_logp, A) x is_weight  +  kl_coef x kl(logp, ref_logp)   (KL in the loss)
    - entropy_coef x entropy

is_weight is the truncated importance-sampling (TIS) weight min(exp(trainer - sampler), tis_cap)
for the sampler/trainer gap, 1 for a trajectory sampled with the trainer's exact weights. For a
sample marked `inline_tis` (drawn with inexact rollout weights, one update per step, no
recomputed old logprobs: see train/step.py) it is computed here, with no extra forward pass:
old_logp := logp.detach() (PPO ratio 1, as verl does on-policy) and is_weight :=
min(exp(logp.detach() - sampler_logp), tis_cap). Otherwise it comes precomputed in the
sample's `token_weights` (the recomputed-old-logprobs path), or is 1. Tokens of exact samples
get exactly today's loss.

Mismatch, measured on the FIRST mini-batch (whose weights are still the ones that sampled fresh,
on-policy data), over the fresh (not replayed) trained tokens, with r = logp - sampler_logp
(trainer - sampler, the sampler's own logprobs even when old logprobs were recomputed):
    mismatch/kl               mean k3 = exp(r) - r - 1, an estimate of KL(sampler || trainer) per token
    mismatch/max_abs_logprob  max |r|
and over the fresh tokens that carry a TIS weight (when TIS is applied):
    mismatch/tis_mean         mean weight
    mismatch/tis_clip_frac    fraction of them at tis_cap
Replayed tokens are left out of all four: their gap is mostly the policy's drift since they
were sampled (their TIS weight, when they get one, corrects that too). An exact sampler shows
only the trainer's own numerical noise (train vs eval kernels, packing): k3 ~ 1e-13.

A non-finite loss or gradient norm skips the update (gradients dropped) and says why.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from posttrain.algos.kl import entropy_from_logits, kl_estimate
from posttrain.algos.off_policy import off_policy_weights
from posttrain.algos.policy_loss import POLICY_LOSSES, token_weights
from posttrain.config.rl import AlgoConfig
from posttrain.train.optim import clip_grad_norm
from posttrain.train.rl_batch import (RLMicroBatch, Sample, build_rl_microbatches, gather_logprobs,
                                      supports_shared_prefix, token_logits)


def split_minibatches(samples: list[Sample], n: int) -> list[list[Sample]]:
    """`n` consecutive slices of about equal size, sequences renumbered 0.. within each."""
    n = max(1, min(n, len(samples)))
    bounds = [round(i * len(samples) / n) for i in range(n + 1)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        out.append([replace(s, seq=j) for j, s in enumerate(samples[a:b])])
    return out


def corrected_old_and_weights(logp: torch.Tensor, mb: RLMicroBatch, tis_cap: float | None,
                              algo: AlgoConfig | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The old logprobs [N] and off-policy weights [N] (None: all 1) the loss uses for micro-batch `mb`.

    Tokens marked `inline_tis` (off-policy samples trained with one update per step) get old :=
    logp.detach() (the proximal policy: these weights, before the update) and the weight of
    `algo.off_policy` (algos/off_policy.py; default tis: min(exp(logp.detach() - sampler_logp),
    tis_cap)); every other token keeps its sample's old logprob and `token_weights` (1 where it has
    none). No correction when `tis_cap` is None and the correction is tis, or it is `none`."""
    old, weights = mb.old_logprobs, mb.token_weights
    name = algo.off_policy if algo is not None else "tis"
    on = name != "none" and (name != "tis" or tis_cap is not None)
    if mb.inline_tis is None or not on or not bool(mb.inline_tis.any()):
        return old, weights
    lp = logp.detach()
    inline = mb.inline_tis
    options = {"cap": tis_cap, **({"low": algo.off_policy_low, "high": algo.off_policy_high} if algo else {})}
    w = torch.ones_like(lp, dtype=torch.float32)
    w[inline] = off_policy_weights(name, lp[inline], mb.sampler_logprobs[inline], mb.seq_index[inline], **options)
    old = torch.where(inline, lp, old)
    weights = torch.where(inline, w, weights if weights is not None else torch.ones_like(w))
    return old, weights


def _mismatch_sums(logp: torch.Tensor, mb: RLMicroBatch, weights: torch.Tensor | None, tis_cap: float | None,
                   sums: dict) -> None:
    """Add this micro-batch's sampler/trainer gap and TIS statistics (fresh tokens only) to `sums`."""
    with torch.no_grad():
        fresh = mb.fresh
        # float64: a bf16 sampler's per-token k3 (~r^2 / 2, r ~ 1e-3) is below float32's resolution of exp(r)
        sampler, trainer = mb.sampler_logprobs[fresh].double(), logp.detach()[fresh].double()
        if trainer.numel():
            sums["kl_sum"] += float(kl_estimate(sampler, trainer, "k3").sum())  # k3 of KL(sampler || trainer)
            sums["max_abs"] = max(sums["max_abs"], float((trainer - sampler).abs().max()))
            sums["tokens"] += int(trainer.numel())
        if weights is None:
            return
        carries = torch.zeros_like(fresh)
        if mb.weighted is not None:
            carries |= mb.weighted
        if mb.inline_tis is not None:
            carries |= mb.inline_tis
        w = weights[carries & fresh]
        sums["tis_sum"] += float(w.sum())
        sums["tis_sq"] += float((w.double() ** 2).sum())
        sums["tis_zero"] += int((w == 0).sum())
        sums["tis_at_cap"] += int((w >= tis_cap).sum()) if tis_cap is not None else 0
        sums["tis_tokens"] += int(w.numel())


def _mismatch_metrics(sums: dict) -> dict:
    out = {}
    if sums["tokens"]:
        out["mismatch/kl"] = sums["kl_sum"] / sums["tokens"]
        out["mismatch/max_abs_logprob"] = sums["max_abs"]
    if sums["tis_tokens"]:
        out["mismatch/tis_mean"] = sums["tis_sum"] / sums["tis_tokens"]
        out["mismatch/tis_clip_frac"] = sums["tis_at_cap"] / sums["tis_tokens"]
        # the off-policy weights' normalised effective sample size (sum w)^2 / (N sum w^2) and the
        # share of corrected tokens a mask left out (algos/off_policy.py)
        out["off_policy/ess"] = sums["tis_sum"] ** 2 / (sums["tis_tokens"] * sums["tis_sq"]) if sums["tis_sq"] else 0.0
        out["off_policy/masked_frac"] = sums["tis_zero"] / sums["tis_tokens"]
    return out


def microbatch_loss(model, mb: RLMicroBatch, lengths: torch.Tensor, *, algo: AlgoConfig, max_tokens: int,
                    gap: dict | None = None) -> tuple[torch.Tensor, dict]:
    """One micro-batch's forward: its loss (a weighted sum over its tokens, not yet backwarded) and
    its metric terms; adds its sampler/trainer gap to `gap` when given. `lengths` [S] are the trained
    tokens of every sequence of the mini-batch (the normalisers), indexed by `mb.seq_index`."""
    logits = token_logits(model, mb)
    logp = gather_logprobs(logits, mb.targets)
    w = token_weights(mb.seq_index, lengths, mode=algo.aggregation, max_tokens=max_tokens)
    old, is_weights = corrected_old_and_weights(logp, mb, algo.tis_cap, algo)
    if gap is not None:
        _mismatch_sums(logp, mb, is_weights, algo.tis_cap, gap)
    pg, stats = POLICY_LOSSES[algo.policy_loss](
        logp, old, mb.advantages,
        clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip,
    )
    if is_weights is not None:
        pg = pg * is_weights
    per_token = pg
    terms = {"kl": 0.0}
    if mb.ref_logprobs is not None:
        kl = kl_estimate(logp, mb.ref_logprobs, algo.kl_estimator)
        terms["kl"] = float((w * kl).detach().sum())
        if algo.kl_in == "loss":
            per_token = per_token + algo.kl_coef * kl
    if algo.entropy_coef > 0:
        ent = entropy_from_logits(logits)
        per_token = per_token - algo.entropy_coef * ent
    else:
        with torch.no_grad():
            ent = entropy_from_logits(logits)
    loss = (w * per_token).sum()
    n = mb.num_tokens
    terms.update(pg_loss=float((w * pg).detach().sum()), entropy=float((w * ent.detach()).sum()),
                 clip_frac=float(stats["clip_frac"]) * n, ratio_max=float(stats["ratio_max"]), tokens=n)
    return loss, terms


def new_sums() -> tuple[dict, dict]:
    """Empty loss sums and sampler/trainer gap sums of a mini-batch."""
    return ({"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "ratio_max": 0.0, "tokens": 0},
            {"kl_sum": 0.0, "max_abs": 0.0, "tokens": 0, "tis_sum": 0.0, "tis_sq": 0.0, "tis_zero": 0, "tis_at_cap": 0,
             "tis_tokens": 0})


def add_terms(sums: dict, loss: torch.Tensor, terms: dict) -> None:
    sums["loss"] += float(loss.detach())
    for k in ("pg_loss", "kl", "entropy", "clip_frac"):
        sums[k] += terms[k]
    sums["ratio_max"] = max(sums["ratio_max"], terms["ratio_max"])
    sums["tokens"] += terms["tokens"]


def finish_sums(sums: dict, gap: dict, measure: bool) -> dict:
    sums["clip_frac"] /= max(1, sums["tokens"])
    if measure:
        sums["mismatch"] = _mismatch_metrics(gap)
    return sums


def sequence_lengths(part: list[Sample], device) -> torch.Tensor:
    """Trained tokens [S] of each sequence of a mini-batch (at least 1), the loss normalisers."""
    return torch.tensor([max(1, sum(s.loss_mask[1:])) for s in part], dtype=torch.float32, device=device)


def _minibatch_loss(model, part: list[Sample], *, algo: AlgoConfig, max_tokens: int,
                    max_tokens_per_microbatch: int, pad_id: int, device, measure: bool = False) -> dict:
    """Accumulate one mini-batch's gradients; returns its loss sums (+ "mismatch" metrics when `measure`)."""
    lengths = sequence_lengths(part, device)
    sums, gap = new_sums()
    for mb in build_rl_microbatches(part, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                                    share_prefix=supports_shared_prefix(model)):
        loss, terms = microbatch_loss(model, mb.to(device), lengths, algo=algo, max_tokens=max_tokens,
                                      gap=gap if measure else None)
        if not torch.isfinite(loss):
            return {"nonfinite": "loss"}
        loss.backward()
        add_terms(sums, loss, terms)
    return finish_sums(sums, gap, measure)


def update_policy(model, optimizer, scheduler, samples: list[Sample], *, algo: AlgoConfig,
                  max_tokens: int, updates_per_step: int, max_tokens_per_microbatch: int, pad_id: int,
                  grad_clip: float, device, minibatch_loss=None, clip=None) -> dict:
    """Run the step's optimizer updates; returns metrics (means over updates, the mismatch/* ones
    from the first mini-batch: none when it was skipped) and `skipped` reasons.

    `minibatch_loss` (default: this process's `_minibatch_loss`) and `clip` (default
    `clip_grad_norm`) are where a distributed trainer (posttrain/train/distributed/trainer.py) shards each
    mini-batch over its ranks and clips by the global gradient norm."""
    minibatch_loss = minibatch_loss or _minibatch_loss
    clip = clip or clip_grad_norm
    model.train()
    results, skipped, mismatch = [], [], {}
    for k, part in enumerate(split_minibatches(samples, updates_per_step)):
        optimizer.zero_grad(set_to_none=True)
        out = minibatch_loss(model, part, algo=algo, max_tokens=max_tokens,
                             max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id, device=device,
                             measure=k == 0)
        mismatch = out.pop("mismatch", mismatch)
        if "nonfinite" in out:
            optimizer.zero_grad(set_to_none=True)
            skipped.append("non-finite loss")
            continue
        grad_norm = clip(model, grad_clip)
        if not math.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            skipped.append("non-finite gradient norm")
            continue
        optimizer.step()
        scheduler.step()
        out["grad_norm"] = grad_norm
        results.append(out)
    optimizer.zero_grad(set_to_none=True)
    metrics = {k: sum(r[k] for r in results) / len(results) for k in results[0] if k != "tokens"} if results else {}
    metrics.update(mismatch)
    metrics["skipped_updates"] = len(skipped)
    metrics["skip_reason"] = "; ".join(sorted(set(skipped))) if skipped else ""
    return metrics
