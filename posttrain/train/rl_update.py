"""The policy update of one RL step: mini-batches of samples -> micro-batches -> loss -> AdamW.

    metrics = update_policy(model, optimizer, scheduler, samples, algo=cfg.algo, ...)

Each of `updates_per_step` mini-batches (consecutive slices of the step's samples, so a
group stays together) is one optimizer update. Its loss is written as a sum over its
tokens of `token_weights(...) x per-token loss`, so gradients accumulated over
micro-batches equal one big batch's exactly. Per-token loss:

    ppo_clip(logp, old_logp, A) x is_weight  +  kl_coef x kl(logp, ref_logp)   (KL in the loss)
    - entropy_coef x entropy

A non-finite loss or gradient norm skips the update (gradients dropped) and says why.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from posttrain.algos.kl import entropy_from_logits, kl_estimate
from posttrain.algos.policy_loss import POLICY_LOSSES, token_weights
from posttrain.config import AlgoConfig
from posttrain.train.optim import clip_grad_norm
from posttrain.train.rl_batch import (Sample, build_rl_microbatches, gather_logprobs, supports_shared_prefix,
                                      token_logits)


def split_minibatches(samples: list[Sample], n: int) -> list[list[Sample]]:
    """`n` consecutive slices of about equal size, sequences renumbered 0.. within each."""
    n = max(1, min(n, len(samples)))
    bounds = [round(i * len(samples) / n) for i in range(n + 1)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        out.append([replace(s, seq=j) for j, s in enumerate(samples[a:b])])
    return out


def _minibatch_loss(model, part: list[Sample], *, algo: AlgoConfig, max_tokens: int,
                    max_tokens_per_microbatch: int, pad_id: int, device) -> dict:
    lengths = torch.tensor([max(1, sum(s.loss_mask[1:])) for s in part], dtype=torch.float32, device=device)
    sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "ratio_max": 0.0, "tokens": 0}
    for mb in build_rl_microbatches(part, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                                    share_prefix=supports_shared_prefix(model)):
        mb = mb.to(device)
        logits = token_logits(model, mb)
        logp = gather_logprobs(logits, mb.targets)
        w = token_weights(mb.seq_index, lengths, mode=algo.aggregation, max_tokens=max_tokens)
        pg, stats = POLICY_LOSSES[algo.policy_loss](
            logp, mb.old_logprobs, mb.advantages,
            clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip,
        )
        if mb.token_weights is not None:
            pg = pg * mb.token_weights
        per_token = pg
        if mb.ref_logprobs is not None:
            kl = kl_estimate(logp, mb.ref_logprobs, algo.kl_estimator)
            sums["kl"] += float((w * kl).detach().sum())
            if algo.kl_in == "loss":
                per_token = per_token + algo.kl_coef * kl
        if algo.entropy_coef > 0:
            ent = entropy_from_logits(logits)
            per_token = per_token - algo.entropy_coef * ent
        else:
            with torch.no_grad():
                ent = entropy_from_logits(logits)
        loss = (w * per_token).sum()
        if not torch.isfinite(loss):
            return {"nonfinite": "loss"}
        loss.backward()
        n = mb.num_tokens
        sums["loss"] += float(loss.detach())
        sums["pg_loss"] += float((w * pg).detach().sum())
        sums["entropy"] += float((w * ent.detach()).sum())
        sums["clip_frac"] += float(stats["clip_frac"]) * n
        sums["ratio_max"] = max(sums["ratio_max"], float(stats["ratio_max"]))
        sums["tokens"] += n
    sums["clip_frac"] /= max(1, sums["tokens"])
    return sums


def update_policy(model, optimizer, scheduler, samples: list[Sample], *, algo: AlgoConfig,
                  max_tokens: int, updates_per_step: int, max_tokens_per_microbatch: int, pad_id: int,
                  grad_clip: float, device) -> dict:
    """Run the step's optimizer updates; returns metrics (means over updates) and `skipped` reasons."""
    model.train()
    results, skipped = [], []
    for part in split_minibatches(samples, updates_per_step):
        optimizer.zero_grad(set_to_none=True)
        out = _minibatch_loss(model, part, algo=algo, max_tokens=max_tokens,
                              max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id, device=device)
        if "nonfinite" in out:
            optimizer.zero_grad(set_to_none=True)
            skipped.append("non-finite loss")
            continue
        grad_norm = clip_grad_norm(model, grad_clip)
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
    metrics["skipped_updates"] = len(skipped)
    metrics["skip_reason"] = "; ".join(sorted(set(skipped))) if skipped else ""
    return metrics
