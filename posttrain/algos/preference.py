"""Pure preference losses: the DPO family, SimPO, ORPO, KTO and the Bradley-Terry reward-model loss.

Every loss returns a PrefLoss of [B] tensors: `loss` per pair (per example for KTO), differentiable
in the policy inputs (reference logprobs and margins are detached), and detached implicit rewards
for logging. Reduce `loss` yourself (usually .mean()); pair_metrics turns the rewards into floats.

dpo_loss (Rafailov et al. 2023) on SUMMED completion logprobs, with
    h = (pc - rc) - (pr - rr),  logits = beta * h,  eps = label_smoothing:
    "sigmoid"  -(1-eps) logsig(logits) - eps logsig(-logits)              (eps > 0: conservative DPO, cDPO)
    "robust"   (-(1-eps) logsig(logits) + eps logsig(-logits)) / (1-2eps) (Chowdhury et al. 2024; eps < 0.5)
    "ipo"      (h - 1/(2 beta))^2                                          (Azar et al. 2023)
    "hinge"    relu(1 - logits)                                            (SLiC, Zhao et al. 2023)
    rewards: beta * (pc - rc), beta * (pr - rr).
    IPO is defined on length-AVERAGED logprobs: for "ipo" the caller passes averaged logps.
simpo_loss (Meng et al. 2024), reference-free, on length-averaged logps c, r:
    logits = beta (c - r) - gamma; loss as "sigmoid" above; rewards beta*c, beta*r.
orpo_loss (Hong et al. 2024) on length-averaged logps, log p = avg logp:
    logodds(x) = x - log(1 - e^x)  (log(-expm1(x)) near 0, log1p(-exp(x)) below -ln 2)
    loss = chosen_nll - lam * logsig(logodds(c) - logodds(r)); rewards: the two log-odds.
kto_loss (Ethayarajh et al. 2024, written as in TRL) on summed logps, z0 = clamp(kl_ref, min=0) detached,
    in log-ratio units (as kto_reference_kl returns it), lr = pi - ref:
    desirable    w_d * (1 - sigmoid(beta * (lr - z0)))
    undesirable  w_u * (1 - sigmoid(beta * (z0 - lr)))
    reward = beta * lr per example, returned as BOTH chosen_reward and rejected_reward (KTO has no
    pairs: pair_metrics on it gives accuracy 0 and margin 0; log rewards by the desirable mask instead).
bradley_terry_loss (reward models; centering from Eisenstein et al. 2023 / TRL's
center_rewards_coefficient) on raw scalar rewards:
    loss = -logsig(r_c - r_r - margin) + center_coef * (r_c + r_r)^2; rewards: r_c, r_r.

Usage:
    out = dpo_loss(pc, pr, rc, rr, beta=0.1)            # all [B] summed logprobs
    out.loss.mean().backward()
    metrics = pair_metrics(out)                         # {"rewards/chosen": ..., "rewards/accuracy": ...}
    z0 = kto_reference_kl(pi_mismatched, ref_mismatched)  # all-reduce (mean) across ranks if distributed
    out = kto_loss(pi, ref, desirable, z0, beta=0.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

PAIR_LOSSES = ("sigmoid", "ipo", "hinge", "robust", "simpo", "orpo")
DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")
# ORPO: avg logps are clamped to <= this so log(1 - p) stays finite when p rounds to 1
ORPO_MAX_AVG_LOGP = -1e-12


@dataclass
class PrefLoss:
    loss: Tensor  # [B] per-pair (KTO: per-example) loss, differentiable
    chosen_reward: Tensor  # [B] detached implicit reward of the chosen completion (KTO: of each example)
    rejected_reward: Tensor  # [B] detached implicit reward of the rejected completion (KTO: same as chosen_reward)


def _check_same_1d(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(s != first for s in shapes.values()):
        raise ValueError(f"expected [B] tensors of one shape, got {shapes}")


def _check_beta(beta: float) -> None:
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")


def _smoothed_sigmoid_loss(logits: Tensor, eps: float) -> Tensor:
    loss = -F.logsigmoid(logits)
    if eps:
        loss = (1.0 - eps) * loss - eps * F.logsigmoid(-logits)
    return loss


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
) -> PrefLoss:
    """DPO-family loss [B] from summed (ipo: length-averaged) completion logprobs [B]."""
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(
            f"unknown DPO loss_type {loss_type!r}; known: {list(DPO_LOSS_TYPES)} (simpo_loss / orpo_loss for the others)"
        )
    _check_beta(beta)
    _check_same_1d(
        policy_chosen=policy_chosen, policy_rejected=policy_rejected, ref_chosen=ref_chosen, ref_rejected=ref_rejected
    )
    eps = float(label_smoothing)
    if loss_type == "sigmoid" and not 0.0 <= eps < 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1) for sigmoid DPO, got {label_smoothing}")
    if loss_type == "robust" and not 0.0 <= eps < 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5) for robust DPO, got {label_smoothing}")
    if loss_type in ("ipo", "hinge") and eps != 0.0:
        raise ValueError(f"label_smoothing is not defined for {loss_type} loss, got {label_smoothing}")
    chosen_lr = policy_chosen - ref_chosen.detach()
    rejected_lr = policy_rejected - ref_rejected.detach()
    h = chosen_lr - rejected_lr
    logits = beta * h
    if loss_type == "sigmoid":
        loss = _smoothed_sigmoid_loss(logits, eps)
    elif loss_type == "robust":
        loss = (-(1.0 - eps) * F.logsigmoid(logits) + eps * F.logsigmoid(-logits)) / (1.0 - 2.0 * eps)
    elif loss_type == "ipo":
        loss = (h - 1.0 / (2.0 * beta)) ** 2
    else:
        loss = torch.relu(1.0 - logits)
    return PrefLoss(loss, (beta * chosen_lr).detach(), (beta * rejected_lr).detach())


def simpo_loss(
    policy_chosen_avg: Tensor,
    policy_rejected_avg: Tensor,
    *,
    beta: float = 2.0,
    gamma: float = 0.5,
    label_smoothing: float = 0.0,
) -> PrefLoss:
    """Reference-free SimPO loss [B] from length-averaged completion logprobs [B]."""
    _check_beta(beta)
    _check_same_1d(policy_chosen_avg=policy_chosen_avg, policy_rejected_avg=policy_rejected_avg)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1) for SimPO, got {label_smoothing}")
    logits = beta * (policy_chosen_avg - policy_rejected_avg) - gamma
    loss = _smoothed_sigmoid_loss(logits, float(label_smoothing))
    return PrefLoss(loss, (beta * policy_chosen_avg).detach(), (beta * policy_rejected_avg).detach())


def orpo_log_odds(avg_logp: Tensor) -> Tensor:
    """log(p / (1 - p)) [B] for log p = avg_logp (clamped to <= ORPO_MAX_AVG_LOGP), computed stably in >= fp32."""
    x = avg_logp.to(torch.promote_types(avg_logp.dtype, torch.float32)).clamp(max=ORPO_MAX_AVG_LOGP)
    near_zero = x > -math.log(2.0)
    # each branch gets an argument safe for it, so neither side of torch.where produces inf/NaN gradients
    log1m_near = torch.log(-torch.expm1(torch.where(near_zero, x, torch.full_like(x, -1.0))))
    log1m_far = torch.log1p(-torch.exp(torch.where(near_zero, torch.full_like(x, -1.0), x)))
    return x - torch.where(near_zero, log1m_near, log1m_far)


def orpo_loss(policy_chosen_avg: Tensor, policy_rejected_avg: Tensor, chosen_nll: Tensor, *, lam: float = 0.1) -> PrefLoss:
    """ORPO loss [B]: the chosen SFT NLL [B] plus lam times the odds-ratio term on length-averaged logps [B]."""
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    _check_same_1d(policy_chosen_avg=policy_chosen_avg, policy_rejected_avg=policy_rejected_avg, chosen_nll=chosen_nll)
    lo_c = orpo_log_odds(policy_chosen_avg)
    lo_r = orpo_log_odds(policy_rejected_avg)
    loss = chosen_nll - lam * F.logsigmoid(lo_c - lo_r).to(chosen_nll.dtype)
    return PrefLoss(loss, lo_c.detach(), lo_r.detach())


def kto_reference_kl(policy_mismatched_logps: Tensor, ref_mismatched_logps: Tensor) -> Tensor:
    """Detached scalar z0 = clamp(mean(pi - ref), min=0) over mismatched (prompt, completion) pairs [B]."""
    _check_same_1d(policy_mismatched_logps=policy_mismatched_logps, ref_mismatched_logps=ref_mismatched_logps)
    with torch.no_grad():
        return (policy_mismatched_logps - ref_mismatched_logps).mean().clamp(min=0)


def kto_loss(
    policy_logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    kl_ref: Tensor | float,
    *,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> PrefLoss:
    """KTO loss [B] per example from summed logprobs [B], a bool desirable mask [B] and the reference point kl_ref."""
    _check_beta(beta)
    _check_same_1d(policy_logps=policy_logps, ref_logps=ref_logps, desirable=desirable)
    if desirable.dtype != torch.bool:
        raise ValueError(f"desirable must be a bool tensor, got {desirable.dtype}")
    if desirable_weight < 0 or undesirable_weight < 0:
        raise ValueError(
            f"KTO weights must be >= 0, got desirable_weight={desirable_weight}, undesirable_weight={undesirable_weight}"
        )
    if isinstance(kl_ref, Tensor):
        if kl_ref.numel() != 1:
            raise ValueError(f"kl_ref must be a scalar, got shape {tuple(kl_ref.shape)}")
        z0 = kl_ref.detach().reshape(()).to(policy_logps.dtype).clamp(min=0)
    else:
        z0 = torch.tensor(max(float(kl_ref), 0.0), dtype=policy_logps.dtype, device=policy_logps.device)
    log_ratio = policy_logps - ref_logps.detach()
    loss_d = desirable_weight * (1.0 - torch.sigmoid(beta * (log_ratio - z0)))
    loss_u = undesirable_weight * (1.0 - torch.sigmoid(beta * (z0 - log_ratio)))
    loss = torch.where(desirable, loss_d, loss_u)
    reward = (beta * log_ratio).detach()
    return PrefLoss(loss, reward, reward)


def bradley_terry_loss(
    r_chosen: Tensor, r_rejected: Tensor, *, margin: Tensor | None = None, center_coef: float = 0.0
) -> PrefLoss:
    """Reward-model loss [B] on raw scalar rewards [B]: -logsig(r_c - r_r - margin) + center_coef (r_c + r_r)^2."""
    if not center_coef >= 0:
        raise ValueError(f"center_coef must be >= 0, got {center_coef}")
    if margin is None:
        _check_same_1d(r_chosen=r_chosen, r_rejected=r_rejected)
        diff = r_chosen - r_rejected
    else:
        _check_same_1d(r_chosen=r_chosen, r_rejected=r_rejected, margin=margin)
        diff = r_chosen - r_rejected - margin.detach().to(r_chosen.dtype)
    loss = -F.logsigmoid(diff)
    if center_coef:
        loss = loss + center_coef * (r_chosen + r_rejected) ** 2
    return PrefLoss(loss, r_chosen.detach(), r_rejected.detach())


def pair_metrics(out: PrefLoss) -> dict[str, float]:
    """Batch means: rewards/chosen, rewards/rejected, rewards/accuracy (chosen > rejected; ties 0), rewards/margin."""
    c = out.chosen_reward.detach().float()
    r = out.rejected_reward.detach().float()
    if c.shape != r.shape or c.numel() == 0:
        raise ValueError(f"pair_metrics needs non-empty rewards of one shape, got {tuple(c.shape)} and {tuple(r.shape)}")
    return {
        "rewards/chosen": c.mean().item(),
        "rewards/rejected": r.mean().item(),
        "rewards/accuracy": (c > r).float().mean().item(),
        "rewards/margin": (c - r).mean().item(),
    }
