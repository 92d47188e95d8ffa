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
3. KL folded into the reward first when `algo.kl_in == "reward"`;
4. advantages by the configured estimator over each group's shaped rewards;
5. `updates_per_step` AdamW updates (train/rl_update.py).
Returns the update's metrics plus `time/logprobs` and `time/update`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

import torch

from posttrain.algos.advantages import ADVANTAGES
from posttrain.algos.kl import kl_estimate, truncated_is_weight
from posttrain.config import RLConfig
from posttrain.train.rl_batch import Sample, sequence_logprobs
from posttrain.train.rl_update import update_policy
from posttrain.types import Group


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


def build_samples(groups: Sequence[Group], policy, ref, cfg: RLConfig, pad_id: int) -> list[Sample]:
    """Groups -> training samples with advantages (+ reference / recomputed old logprobs)."""
    a = cfg.algo
    trajs = [(i, j, t) for i, g in enumerate(groups) for j, t in enumerate(g.trajectories) if t.reward is not None]
    base = [Sample(t.token_ids, t.loss_mask, t.logprobs, 0.0, n, temperature=t.sampling.logprob_temperature)
            for n, (_, _, t) in enumerate(trajs)]
    lp = dict(max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id)
    ref_lp = sequence_logprobs(ref, base, **lp) if ref is not None else None
    old_lp = sequence_logprobs(policy, base, **lp) if a.recompute_old_logprobs else None
    rewards = [[t.reward for t in g.trajectories] for g in groups]
    if ref_lp is not None and a.kl_in == "reward":  # KL penalty folded into each sequence's reward
        for n, (i, j, t) in enumerate(trajs):
            kl = kl_estimate(torch.tensor(t.logprobs), torch.tensor(ref_lp[n]), a.kl_estimator)
            rewards[i][j] = t.reward - a.kl_coef * float((kl * torch.tensor(t.loss_mask)).sum())
    adv = advantages_for(rewards, a.advantage)
    samples = []
    for n, (i, j, t) in enumerate(trajs):
        old = old_lp[n] if old_lp is not None else t.logprobs
        weights = None
        if old_lp is not None and a.tis_cap is not None:
            weights = truncated_is_weight(torch.tensor(old), torch.tensor(t.logprobs, dtype=torch.float32),
                                          cap=a.tis_cap).tolist()
        samples.append(replace(base[n], old_logprobs=old, advantage=adv[i][j],
                               ref_logprobs=ref_lp[n] if ref_lp is not None else None, token_weights=weights))
    return samples


def train_step(policy, ref, optimizer, scheduler, groups: Sequence[Group], cfg: RLConfig, *, pad_id: int,
               device=None) -> dict:
    """The trainer's work on one step's groups; returns metrics (see the module docstring)."""
    if not groups:
        return {"skipped_updates": 1, "skip_reason": "no group with signal"}
    device = device if device is not None else next(policy.parameters()).device
    started = time.perf_counter()
    samples = build_samples(groups, policy, ref, cfg, pad_id)
    logprobs_done = time.perf_counter()
    metrics = update_policy(policy, optimizer, scheduler, samples, algo=cfg.algo, max_tokens=cfg.rollout.max_tokens,
                            updates_per_step=cfg.train.updates_per_step,
                            max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id,
                            grad_clip=cfg.optim.grad_clip, device=device)
    metrics["time/logprobs"] = logprobs_done - started
    metrics["time/update"] = time.perf_counter() - logprobs_done
    return metrics
