"""One RL train step: the trainer's whole work on a step's groups, in one function.

    metrics = train_step(policy, ref, optimizer, scheduler, groups, cfg, pad_id=tok.pad_token_id)

`groups` are frozen `types.Group`s (picklable), `cfg` the run's `RLConfig`: the same call works in
this process, in a remote trainer actor or under torch.distributed, since nothing else is read.

1. samples: every judged trajectory of every group (a trajectory with no score is left out), each
   with its own logprob temperature (`Trajectory.sampling`), so a replayed trajectory sampled at
   T=1.0 is trained at T=1.0 whatever the schedule says now;
2. the reference's logprobs (only when a reference is given, i.e. kl_coef > 0) and the trainer's
   own recomputed old logprobs when `algo.recompute_old_logprobs` (with a truncated importance
   weight min(exp(trainer - sampler), tis_cap) for the sampler/trainer gap);
   and by default, whatever recompute_old_logprobs says, TIS for every trajectory sampled with
   inexact rollout weights (`Trajectory.sampler_weights != "exact"`: bf16 or int8 engine
   weights; `algo.tis_cap: None` turns it off, the gap is still measured, train/rl_update.py):
   - one update per step (and recompute_old_logprobs off): in the loss, with no extra forward
     pass: old logprobs := the trainer's, weight := min(exp(trainer - sampler), tis_cap)
     (`Sample.inline_tis`; its gradient equals the recomputing path's);
   - `updates_per_step > 1`: later mini-batches see moved weights, so the trainer recomputes the
     old logprobs of the inexact trajectories only (exact ones keep the sampler's) before the
     update, each with that weight;
   exact trajectories, and replayed ones (whose gap is mostly the policy's drift since they were
   stored: PPO's clip against their stored logprobs, as for exact replays), are trained exactly
   as without the correction;
3. KL folded into the reward first when `algo.kl_in == "reward"`;
4. advantages by the configured estimator over each group's shaped rewards; an anchor group's
   trajectories (`Group.anchor`: the start model's answers rehearsed, rl/anchors.py) take their
   `reward` as a fixed advantage instead, and count as replayed (no sampler/trainer gap measured);
5. `updates_per_step` AdamW updates (train/rl_update.py).
Returns the update's metrics plus `time/logprobs` and `time/update`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

import torch

from posttrain.algos.advantages import ADVANTAGES
from posttrain.algos.kl import kl_estimate
from posttrain.algos.off_policy import corrects, off_policy_options, off_policy_weights
from posttrain.config.rl import RLConfig
from posttrain.train.rl_batch import Sample, sequence_logprobs
from posttrain.train.rl_update import update_policy
from posttrain.core.types import Group


def advantages_for(rewards: Sequence[Sequence[float | None]], estimator: str) -> list[list[float]]:
    """Per-trajectory advantages of each group's rewards (None: left out of its group's statistics)."""
    k = max(len(r) for r in rewards)
    values = torch.zeros(len(rewards), k)
    valid = torch.zeros(len(rewards), k, dtype=torch.bool)
    for i, row in enumerate(rewards):
        for j, r in enumerate(row):
            if r is not None:
                values[i, j], valid[i, j] = r, True
    return ADVANTAGES[estimator](values, valid).tolist()


def is_stale(t, version: int | None) -> bool:
    """Whether some token of `t` was sampled by weights older than `version` (None: nothing is stale)."""
    if version is None:
        return False
    versions = [v for v in t.token_versions if v >= 0] or [t.policy_version]
    return min(versions) < version


def build_samples(groups: Sequence[Group], policy, ref, cfg: RLConfig, pad_id: int,
                  logprobs=sequence_logprobs, version: int | None = None) -> list[Sample]:
    """Groups -> training samples with advantages (+ reference / recomputed old logprobs, TIS).
    `logprobs`: how (model, samples) -> per-token logprobs are computed (posttrain/train/distributed shards them)."""
    a = cfg.algo
    trajs = [(i, j, t) for i, g in enumerate(groups) for j, t in enumerate(g.trajectories) if t.reward is not None]
    base = [Sample(t.token_ids, t.loss_mask, t.logprobs, 0.0, n, temperature=t.sampling.logprob_temperature,
                   fresh=j >= groups[i].replayed and not groups[i].anchor)
            for n, (i, j, t) in enumerate(trajs)]
    lp = dict(max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id)
    ref_lp = logprobs(ref, base, **lp) if ref is not None else None
    # fresh trajectories only: a replayed one's gap to the trainer is mostly the policy's drift
    # since it was stored, which PPO's clip against its stored logprobs handles as for exact replays
    # off-policy: sampled with inexact weights or, in asynchronous RL, by a version older than `version`
    # (the trainer's); each such token gets `algo.off_policy`'s weight (algos/off_policy.py)
    inexact = {n for n, (_, _, t) in enumerate(trajs)
               if base[n].fresh and (t.sampler_weights != "exact" or is_stale(t, version))}
    correct = corrects(a) and not a.recompute_old_logprobs
    inline = inexact if correct and cfg.train.updates_per_step == 1 else set()
    if a.recompute_old_logprobs:
        recompute = list(range(len(base)))
    else:
        recompute = sorted(inexact) if correct and cfg.train.updates_per_step > 1 else []
    old_lp = dict(zip(recompute, logprobs(policy, [base[n] for n in recompute], **lp))) if recompute else {}
    rewards = [[None if g.anchor else t.reward for t in g.trajectories] for g in groups]
    if ref_lp is not None and a.kl_in == "reward":  # KL penalty folded into each sequence's reward
        for n, (i, j, t) in enumerate(trajs):
            if groups[i].anchor:
                continue
            kl = kl_estimate(torch.tensor(t.logprobs), torch.tensor(ref_lp[n]), a.kl_estimator)
            rewards[i][j] = t.reward - a.kl_coef * float((kl * torch.tensor(t.loss_mask)).sum())
    adv = advantages_for(rewards, a.advantage)
    for i, g in enumerate(groups):
        if g.anchor:
            adv[i] = [t.reward for t in g.trajectories]
    samples = []
    for n, (i, j, t) in enumerate(trajs):
        old = old_lp.get(n, t.logprobs)
        weights = None
        if n in old_lp and corrects(a):
            mask = torch.tensor(t.loss_mask, dtype=torch.bool)
            w = torch.ones(len(t.loss_mask))
            w[mask] = off_policy_weights(a.off_policy, torch.tensor(old)[mask],
                                         torch.tensor(t.logprobs, dtype=torch.float32)[mask],
                                         torch.zeros(int(mask.sum()), dtype=torch.long), **off_policy_options(a))
            weights = w.tolist()
        samples.append(replace(base[n], old_logprobs=old, advantage=adv[i][j],
                               ref_logprobs=ref_lp[n] if ref_lp is not None else None, token_weights=weights,
                               sampler_logprobs=t.logprobs if n in old_lp else None, inline_tis=n in inline))
    return samples


def train_step(policy, ref, optimizer, scheduler, groups: Sequence[Group], cfg: RLConfig, *, pad_id: int,
               device=None, version: int | None = None) -> dict:
    """The trainer's work on one step's groups; returns metrics (see the module docstring)."""
    if not groups:
        return {"skipped_updates": 1, "skip_reason": "no group with signal"}
    device = device if device is not None else next(policy.parameters()).device
    started = time.perf_counter()
    samples = build_samples(groups, policy, ref, cfg, pad_id, version=version)
    logprobs_done = time.perf_counter()
    metrics = update_policy(policy, optimizer, scheduler, samples, algo=cfg.algo, max_tokens=cfg.rollout.max_tokens,
                            updates_per_step=cfg.train.updates_per_step,
                            max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id,
                            grad_clip=cfg.optim.grad_clip, device=device)
    metrics["time/logprobs"] = logprobs_done - started
    metrics["time/update"] = time.perf_counter() - logprobs_done
    return metrics
