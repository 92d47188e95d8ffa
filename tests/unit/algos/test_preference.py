"""Preference losses against numbers computed by hand from the formulas, analytic gradients and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.preference import (
    PAIR_LOSSES,
    PrefLoss,
    bradley_terry_loss,
    dpo_loss,
    kto_loss,
    kto_reference_kl,
    orpo_log_odds,
    orpo_loss,
    pair_metrics,
    simpo_loss,
)

LN2 = math.log(2.0)


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def logsig(x: float) -> float:
    return -math.log(1.0 + math.exp(-x))


def t(values, dtype=torch.float64, grad=False):
    return torch.tensor(values, dtype=dtype, requires_grad=grad)


# three pairs of summed logprobs: (pc, pr, rc, rr)
PAIRS = [(-10.0, -12.0, -11.0, -11.5), (-5.0, -4.0, -5.5, -7.5), (-20.0, -20.0, -20.0, -20.0)]


def _pairs(grad=False):
    cols = list(zip(*PAIRS))
    return [t(list(c), grad=grad) for c in cols]


def _h(pc, pr, rc, rr):
    return (pc - rc) - (pr - rr)


def test_pair_losses_listed():
    assert PAIR_LOSSES == ("sigmoid", "ipo", "hinge", "robust", "simpo", "orpo")


# ---------------------------------------------------------------- DPO family: values


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_sigmoid_dpo_hand_computed(eps):
    beta = 0.1
    # h = 1.5, -3.0, 0.0 -> logits = 0.15, -0.3, 0.0
    want = []
    for p in PAIRS:
        z = beta * _h(*p)
        want.append(-(1 - eps) * logsig(z) - eps * logsig(-z))
    out = dpo_loss(*_pairs(), beta=beta, label_smoothing=eps)
    assert out.loss.tolist() == pytest.approx(want, abs=1e-6)
    # first pair, eps=0: -log sigmoid(0.15) = log(1 + e^-0.15) = 0.62096...
    if eps == 0.0:
        assert out.loss[0].item() == pytest.approx(math.log(1 + math.exp(-0.15)), abs=1e-6)
        assert out.loss[0].item() == pytest.approx(0.620957, abs=1e-6)


def test_dpo_rewards_are_beta_times_log_ratio_and_detached():
    out = dpo_loss(*_pairs(grad=True), beta=0.5)
    assert out.chosen_reward.tolist() == pytest.approx([0.5 * 1.0, 0.5 * 0.5, 0.0], abs=1e-12)
    assert out.rejected_reward.tolist() == pytest.approx([0.5 * -0.5, 0.5 * 3.5, 0.0], abs=1e-12)
    assert not out.chosen_reward.requires_grad and not out.rejected_reward.requires_grad
    assert out.loss.requires_grad


def test_sigmoid_dpo_is_log2_when_policy_equals_reference():
    x = t([-3.0, -17.5, -0.25])
    y = t([-8.0, -1.0, -40.0])
    for beta in (0.01, 0.1, 5.0):
        assert dpo_loss(x, y, x.clone(), y.clone(), beta=beta).loss.tolist() == pytest.approx([LN2] * 3, abs=1e-12)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_robust_dpo_hand_computed(eps):
    beta = 0.2
    want = []
    for p in PAIRS:
        z = beta * _h(*p)
        want.append((-(1 - eps) * logsig(z) + eps * logsig(-z)) / (1 - 2 * eps))
    out = dpo_loss(*_pairs(), beta=beta, loss_type="robust", label_smoothing=eps)
    assert out.loss.tolist() == pytest.approx(want, abs=1e-6)


def test_robust_with_no_smoothing_equals_sigmoid():
    args = _pairs()
    for beta in (0.1, 1.0):
        a = dpo_loss(*args, beta=beta, loss_type="robust", label_smoothing=0.0).loss
        b = dpo_loss(*args, beta=beta, loss_type="sigmoid").loss
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_ipo_hand_computed():
    beta = 0.25  # 1/(2 beta) = 2
    # h = 1.5, -3.0, 0.0 -> (h - 2)^2 = 0.25, 25, 4
    out = dpo_loss(*_pairs(), beta=beta, loss_type="ipo")
    assert out.loss.tolist() == pytest.approx([(1.5 - 2) ** 2, (-3.0 - 2) ** 2, (0.0 - 2) ** 2], abs=1e-6)
    assert out.loss.tolist() == pytest.approx([0.25, 25.0, 4.0], abs=1e-6)


def test_hinge_hand_computed():
    beta = 1.0
    # logits = 1.5, -3.0, 0.0 -> relu(1 - logits) = 0, 4, 1
    out = dpo_loss(*_pairs(), beta=beta, loss_type="hinge")
    assert out.loss.tolist() == pytest.approx([0.0, 4.0, 1.0], abs=1e-6)
    out = dpo_loss(*_pairs(), beta=0.1, loss_type="hinge")  # logits 0.15, -0.3, 0 -> 0.85, 1.3, 1
    assert out.loss.tolist() == pytest.approx([0.85, 1.3, 1.0], abs=1e-6)


# ---------------------------------------------------------------- DPO family: gradients


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_sigmoid_dpo_gradient_matches_analytic(eps):
    beta = 0.1
    pc, pr, rc, rr = _pairs(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=eps).loss.sum().backward()
    # d loss / d logits = -(1-eps)(1 - sig(z)) + eps sig(z); d logits / d pc = beta, d logits / d pr = -beta
    want = []
    for p in PAIRS:
        z = beta * _h(*p)
        want.append(beta * (-(1 - eps) * (1 - sig(z)) + eps * sig(z)))
    assert pc.grad.tolist() == pytest.approx(want, abs=1e-6)
    assert pr.grad.tolist() == pytest.approx([-w for w in want], abs=1e-6)
    # the reference is a constant
    assert rc.grad is None and rr.grad is None
    if eps == 0.0:
        assert pc.grad[0].item() == pytest.approx(-beta * (1 - sig(0.15)), abs=1e-6)


def test_robust_ipo_hinge_gradients_match_analytic():
    beta, eps = 0.2, 0.1
    pc, pr, rc, rr = _pairs(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=beta, loss_type="robust", label_smoothing=eps).loss.sum().backward()
    # d/dz [-(1-eps) logsig(z) + eps logsig(-z)] / (1-2eps) = (-(1-eps)(1-sig z) - eps sig z) / (1-2eps)
    want = [beta * (-(1 - eps) * (1 - sig(beta * _h(*p))) - eps * sig(beta * _h(*p))) / (1 - 2 * eps) for p in PAIRS]
    assert pc.grad.tolist() == pytest.approx(want, abs=1e-6)

    beta = 0.25
    pc, pr, rc, rr = _pairs(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=beta, loss_type="ipo").loss.sum().backward()
    want = [2 * (_h(*p) - 1 / (2 * beta)) for p in PAIRS]  # 2 (h - 2) = -1, -10, -4
    assert pc.grad.tolist() == pytest.approx(want, abs=1e-6)
    assert pr.grad.tolist() == pytest.approx([-w for w in want], abs=1e-6)

    pc, pr, rc, rr = _pairs(grad=True)
    dpo_loss(pc, pr, rc, rr, beta=1.0, loss_type="hinge").loss.sum().backward()
    # logits = 1.5 (inactive: 0), -3 (active: -beta), 0 (active: -beta)
    assert pc.grad.tolist() == pytest.approx([0.0, -1.0, -1.0], abs=1e-6)


@pytest.mark.parametrize(
    "loss_type,eps", [("sigmoid", 0.0), ("sigmoid", 0.3), ("robust", 0.2), ("ipo", 0.0), ("hinge", 0.0)]
)
def test_dpo_gradcheck(loss_type, eps):
    torch.manual_seed(0)
    pc = (torch.randn(4, dtype=torch.float64) * 3 - 10).requires_grad_()
    pr = (torch.randn(4, dtype=torch.float64) * 3 - 10).requires_grad_()
    rc, rr = torch.randn(4, dtype=torch.float64) - 10, torch.randn(4, dtype=torch.float64) - 10
    beta = 0.3
    if loss_type == "hinge":  # keep away from the kink at logits = 1
        z = beta * ((pc - rc) - (pr - rr))
        assert ((z - 1).abs() > 1e-3).all()

    def f(a, b):
        return dpo_loss(a, b, rc, rr, beta=beta, loss_type=loss_type, label_smoothing=eps).loss

    assert torch.autograd.gradcheck(f, (pc, pr))


# ---------------------------------------------------------------- SimPO


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_simpo_hand_computed_and_gradient(eps):
    beta, gamma = 2.0, 0.5
    cs, rs = [-0.8, -1.5, -2.0], [-1.2, -1.0, -2.0]
    c, r = t(cs, grad=True), t(rs, grad=True)
    out = simpo_loss(c, r, beta=beta, gamma=gamma, label_smoothing=eps)
    zs = [beta * (a - b) - gamma for a, b in zip(cs, rs)]  # 0.3, -1.5, -0.5
    assert zs == pytest.approx([0.3, -1.5, -0.5])
    want = [-(1 - eps) * logsig(z) - eps * logsig(-z) for z in zs]
    assert out.loss.tolist() == pytest.approx(want, abs=1e-6)
    assert out.chosen_reward.tolist() == pytest.approx([beta * a for a in cs], abs=1e-12)
    assert out.rejected_reward.tolist() == pytest.approx([beta * b for b in rs], abs=1e-12)
    out.loss.sum().backward()
    grad = [beta * (-(1 - eps) * (1 - sig(z)) + eps * sig(z)) for z in zs]
    assert c.grad.tolist() == pytest.approx(grad, abs=1e-6)
    assert r.grad.tolist() == pytest.approx([-g for g in grad], abs=1e-6)


def test_simpo_defaults_and_gradcheck():
    # defaults beta=2, gamma=0.5: c = r -> logits = -0.5 -> loss = log(1 + e^0.5)
    x = t([-1.0])
    assert simpo_loss(x, x.clone()).loss.item() == pytest.approx(math.log(1 + math.exp(0.5)), abs=1e-6)
    c, r = t([-0.7, -1.9, -0.2], grad=True), t([-1.1, -0.4, -3.0], grad=True)
    assert torch.autograd.gradcheck(lambda a, b: simpo_loss(a, b, beta=2.5, gamma=0.3, label_smoothing=0.1).loss, (c, r))


# ---------------------------------------------------------------- ORPO


def _log_odds(x: float) -> float:
    # log(p / (1 - p)) with p = e^x; 1 - e^x written as -expm1(x) so it is exact near x = 0
    return x - math.log(-math.expm1(x))


def test_orpo_log_odds_hand_computed():
    xs = [-0.1, -1.0, -3.0]
    want = [math.log(math.exp(x) / (1 - math.exp(x))) for x in xs]  # -0.1 -> log(0.904837/0.095163) = 2.252168
    assert orpo_log_odds(t(xs)).tolist() == pytest.approx(want, abs=1e-6)
    assert want[0] == pytest.approx(2.252168, abs=1e-6)
    # -1 -> log(0.367879 / 0.632121) = -0.541325
    assert want[1] == pytest.approx(-0.541325, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orpo_log_odds_stable_near_zero_and_very_negative(dtype):
    x = torch.tensor([-1e-8, -50.0, -0.69, -0.70, 0.0], dtype=dtype, requires_grad=True)
    lo = orpo_log_odds(x)
    assert torch.isfinite(lo).all()
    # -1e-8: p / (1 - p) ~ 1 / 1e-8 -> log-odds ~ 18.420681 ; -50: log-odds ~ -50 (1 - p = 1 - 2e-22)
    assert lo[0].item() == pytest.approx(_log_odds(-1e-8), abs=1e-5)
    assert lo[0].item() == pytest.approx(-math.log(1e-8), abs=1e-5)
    assert lo[1].item() == pytest.approx(-50.0, abs=1e-5)
    # either side of the branch switch at -ln 2
    assert lo[2].item() == pytest.approx(_log_odds(-0.69), abs=1e-5)
    assert lo[3].item() == pytest.approx(_log_odds(-0.70), abs=1e-5)
    lo.sum().backward()
    assert torch.isfinite(x.grad).all()
    # d logodds / dx = 1 / (1 - e^x)
    assert x.grad[1].item() == pytest.approx(1.0, abs=1e-6)
    assert x.grad[2].item() == pytest.approx(1 / (1 - math.exp(-0.69)), rel=1e-5)


def test_orpo_loss_hand_computed_and_gradient():
    lam = 0.1
    cs, rs, nll = [-0.5, -1.2, -2.0], [-1.5, -0.9, -2.0], [0.5, 1.2, 2.0]
    c, r, n = t(cs, grad=True), t(rs, grad=True), t(nll, grad=True)
    out = orpo_loss(c, r, n, lam=lam)
    want = [n_ - lam * logsig(_log_odds(a) - _log_odds(b)) for a, b, n_ in zip(cs, rs, nll)]
    assert out.loss.tolist() == pytest.approx(want, abs=1e-6)
    # third pair: equal logps -> nll + lam * log 2
    assert out.loss[2].item() == pytest.approx(2.0 + lam * LN2, abs=1e-6)
    assert out.chosen_reward.tolist() == pytest.approx([_log_odds(a) for a in cs], abs=1e-6)
    assert out.rejected_reward.tolist() == pytest.approx([_log_odds(b) for b in rs], abs=1e-6)
    out.loss.sum().backward()
    # d/dc = -lam (1 - sig(d)) / (1 - e^c), d/dr = +lam (1 - sig(d)) / (1 - e^r), d/dnll = 1
    ds = [_log_odds(a) - _log_odds(b) for a, b in zip(cs, rs)]
    assert c.grad.tolist() == pytest.approx([-lam * (1 - sig(d)) / (1 - math.exp(a)) for d, a in zip(ds, cs)], abs=1e-6)
    assert r.grad.tolist() == pytest.approx([lam * (1 - sig(d)) / (1 - math.exp(b)) for d, b in zip(ds, rs)], abs=1e-6)
    assert n.grad.tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)


def test_orpo_gradcheck():
    c, r = t([-0.3, -1.7, -0.05, -4.0], grad=True), t([-0.9, -0.2, -2.5, -4.5], grad=True)
    n = t([0.3, 1.7, 0.05, 4.0], grad=True)
    assert torch.autograd.gradcheck(lambda a, b, m: orpo_loss(a, b, m, lam=0.5).loss, (c, r, n))


# ---------------------------------------------------------------- KTO


def test_kto_hand_computed():
    beta, kl = 0.1, 0.5
    pis, refs, des = [-10.0, -10.0, -12.0], [-12.0, -9.0, -12.0], [True, False, True]
    out = kto_loss(t(pis), t(refs), torch.tensor(des), kl, beta=beta, desirable_weight=1.5, undesirable_weight=0.7)
    # log ratios 2, -1, 0
    want = [
        1.5 * (1 - sig(beta * (2.0 - kl))),  # desirable: 1.5 (1 - sig(0.15))
        0.7 * (1 - sig(beta * (kl - (-1.0)))),  # undesirable: 0.7 (1 - sig(0.15))
        1.5 * (1 - sig(beta * (0.0 - kl))),  # desirable: 1.5 (1 - sig(-0.05))
    ]
    assert out.loss.tolist() == pytest.approx(want, abs=1e-6)
    assert out.loss[0].item() == pytest.approx(1.5 * (1 - 1 / (1 + math.exp(-0.15))), abs=1e-6)
    assert out.chosen_reward.tolist() == pytest.approx([0.2, -0.1, 0.0], abs=1e-12)
    assert torch.equal(out.chosen_reward, out.rejected_reward)


def test_kto_reference_point_is_clamped_and_detached():
    pi, ref, d = t([-5.0, -6.0]), t([-5.0, -6.0]), torch.tensor([True, False])
    # a negative KL estimate acts as 0: log ratio 0, z0 0 -> 1 - sig(0) = 0.5 on both sides
    assert kto_loss(pi, ref, d, -3.0).loss.tolist() == pytest.approx([0.5, 0.5], abs=1e-12)
    assert kto_loss(pi, ref, d, t(-3.0)).loss.tolist() == pytest.approx([0.5, 0.5], abs=1e-12)
    kl = t(0.4, grad=True)
    pi = t([-5.0, -6.0], grad=True)
    kto_loss(pi, ref, d, kl, beta=0.2).loss.sum().backward()
    assert kl.grad is None and pi.grad is not None


def test_kto_reference_kl():
    z = kto_reference_kl(t([-3.0, -4.0, -2.0], grad=True), t([-4.0, -4.0, -4.5]))
    assert z.item() == pytest.approx((1.0 + 0.0 + 2.5) / 3, abs=1e-12)
    assert z.dim() == 0 and not z.requires_grad
    assert kto_reference_kl(t([-5.0, -5.0]), t([-3.0, -4.0])).item() == 0.0  # mean -1.5 clamped to 0


def test_kto_desirable_loss_decreases_as_policy_logp_rises():
    ref = t([-10.0] * 5)
    pi = t([-14.0, -12.0, -10.0, -8.0, -6.0])
    loss = kto_loss(pi, ref, torch.ones(5, dtype=torch.bool), 0.2, beta=0.5).loss
    assert (loss[1:] < loss[:-1]).all()
    loss_u = kto_loss(pi, ref, torch.zeros(5, dtype=torch.bool), 0.2, beta=0.5).loss
    assert (loss_u[1:] > loss_u[:-1]).all()


def test_kto_gradient_matches_analytic_and_gradcheck():
    beta, kl, wd, wu = 0.3, 0.25, 1.2, 0.8
    lrs = [1.0, -2.0, 0.5, 3.0]
    des = [True, False, False, True]
    pi = t([lr - 10.0 for lr in lrs], grad=True)
    ref = t([-10.0] * 4)
    kto_loss(pi, ref, torch.tensor(des), kl, beta=beta, desirable_weight=wd, undesirable_weight=wu).loss.sum().backward()
    want = []
    for lr, d in zip(lrs, des):
        if d:  # d/dpi w_d (1 - sig(beta (lr - z0))) = -w_d beta sig (1 - sig)
            s = sig(beta * (lr - kl))
            want.append(-wd * beta * s * (1 - s))
        else:  # d/dpi w_u (1 - sig(beta (z0 - lr))) = +w_u beta sig (1 - sig)
            s = sig(beta * (kl - lr))
            want.append(wu * beta * s * (1 - s))
    assert pi.grad.tolist() == pytest.approx(want, abs=1e-6)
    x = t([-3.0, -7.0, -1.0, -5.0], grad=True)
    assert torch.autograd.gradcheck(
        lambda a: kto_loss(a, ref, torch.tensor(des), kl, beta=beta, desirable_weight=wd, undesirable_weight=wu).loss, (x,)
    )


# ---------------------------------------------------------------- Bradley-Terry


def test_bradley_terry_hand_computed():
    rc, rr = [1.0, -0.5, 2.0], [0.0, 0.5, 2.0]
    out = bradley_terry_loss(t(rc), t(rr))
    assert out.loss.tolist() == pytest.approx([-logsig(a - b) for a, b in zip(rc, rr)], abs=1e-6)
    assert out.loss.tolist() == pytest.approx([math.log(1 + math.exp(-1.0)), math.log(1 + math.exp(1.0)), LN2], abs=1e-6)
    assert out.chosen_reward.tolist() == rc and out.rejected_reward.tolist() == rr


def test_bradley_terry_margin_shifts_the_difference():
    rc, rr, m = [1.0, -0.5, 2.0], [0.0, 0.5, 2.0], [0.5, -1.0, 3.0]
    out = bradley_terry_loss(t(rc), t(rr), margin=t(m))
    assert out.loss.tolist() == pytest.approx([-logsig(a - b - mm) for a, b, mm in zip(rc, rr, m)], abs=1e-6)
    # d - m: 0.5, 0, -3
    assert out.loss.tolist() == pytest.approx(
        [math.log(1 + math.exp(-0.5)), LN2, math.log(1 + math.exp(3.0))], abs=1e-6
    )


def test_bradley_terry_centering_adds_exactly_the_square():
    rc, rr = t([1.0, -0.5, 2.0]), t([0.0, 0.5, 2.5])
    base = bradley_terry_loss(rc, rr).loss
    centred = bradley_terry_loss(rc, rr, center_coef=0.01).loss
    assert (centred - base).tolist() == pytest.approx([0.01 * 1.0**2, 0.0, 0.01 * 4.5**2], abs=1e-12)


def test_bradley_terry_gradient_matches_analytic_and_gradcheck():
    cc = 0.05
    rcs, rrs, ms = [1.0, -0.5, 2.0], [0.0, 0.5, 2.5], [0.2, 0.0, -1.0]
    rc, rr = t(rcs, grad=True), t(rrs, grad=True)
    bradley_terry_loss(rc, rr, margin=t(ms), center_coef=cc).loss.sum().backward()
    # d/drc = -(1 - sig(d - m)) + 2 cc (rc + rr);  d/drr = (1 - sig(d - m)) + 2 cc (rc + rr)
    gc = [-(1 - sig(a - b - m)) + 2 * cc * (a + b) for a, b, m in zip(rcs, rrs, ms)]
    gr = [(1 - sig(a - b - m)) + 2 * cc * (a + b) for a, b, m in zip(rcs, rrs, ms)]
    assert rc.grad.tolist() == pytest.approx(gc, abs=1e-6)
    assert rr.grad.tolist() == pytest.approx(gr, abs=1e-6)
    a, b = t(rcs, grad=True), t(rrs, grad=True)
    assert torch.autograd.gradcheck(lambda x, y: bradley_terry_loss(x, y, margin=t(ms), center_coef=cc).loss, (a, b))


# ---------------------------------------------------------------- metrics


def test_pair_metrics_means_and_ties():
    out = PrefLoss(torch.zeros(4), t([1.0, 0.5, 2.0, -1.0]), t([0.0, 0.5, 3.0, -2.0]))
    m = pair_metrics(out)
    assert m == pytest.approx(
        {"rewards/chosen": 0.625, "rewards/rejected": 0.375, "rewards/accuracy": 0.5, "rewards/margin": 0.25}
    )
    assert all(isinstance(v, float) for v in m.values())
    # from a real DPO output: pair 1 has chosen > rejected, pair 2 the opposite, pair 3 is a tie
    assert pair_metrics(dpo_loss(*_pairs(), beta=0.1))["rewards/accuracy"] == pytest.approx(1 / 3)


# ---------------------------------------------------------------- argument checks


def test_errors():
    x = t([-1.0, -2.0])
    with pytest.raises(ValueError, match=r"unknown DPO loss_type 'simpo'; known: \['sigmoid', 'ipo', 'hinge', 'robust'\]"):
        dpo_loss(x, x, x, x, beta=0.1, loss_type="simpo")
    with pytest.raises(ValueError, match="beta must be > 0, got 0"):
        dpo_loss(x, x, x, x, beta=0.0)
    with pytest.raises(ValueError, match="beta must be > 0, got -1"):
        simpo_loss(x, x, beta=-1.0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        kto_loss(x, x, torch.tensor([True, False]), 0.0, beta=0.0)
    with pytest.raises(ValueError, match=r"label_smoothing must lie in \[0, 1\) for sigmoid DPO, got 1.0"):
        dpo_loss(x, x, x, x, beta=0.1, label_smoothing=1.0)
    with pytest.raises(ValueError, match=r"label_smoothing must lie in \[0, 1\) for sigmoid DPO, got -0.1"):
        dpo_loss(x, x, x, x, beta=0.1, label_smoothing=-0.1)
    with pytest.raises(ValueError, match=r"label_smoothing must lie in \[0, 0.5\) for robust DPO, got 0.5"):
        dpo_loss(x, x, x, x, beta=0.1, loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="label_smoothing is not defined for ipo loss"):
        dpo_loss(x, x, x, x, beta=0.1, loss_type="ipo", label_smoothing=0.1)
    with pytest.raises(ValueError, match=r"label_smoothing must lie in \[0, 1\) for SimPO"):
        simpo_loss(x, x, label_smoothing=1.5)
    with pytest.raises(ValueError, match="expected \\[B\\] tensors of one shape"):
        dpo_loss(x, t([-1.0]), x, x, beta=0.1)
    with pytest.raises(ValueError, match="expected \\[B\\] tensors of one shape"):
        dpo_loss(x.reshape(1, 2), x.reshape(1, 2), x.reshape(1, 2), x.reshape(1, 2), beta=0.1)
    with pytest.raises(ValueError, match="expected \\[B\\] tensors of one shape"):
        orpo_loss(x, x, t([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="lam must be >= 0"):
        orpo_loss(x, x, x, lam=-0.1)
    with pytest.raises(ValueError, match="desirable must be a bool tensor"):
        kto_loss(x, x, torch.tensor([1, 0]), 0.0)
    with pytest.raises(ValueError, match="kl_ref must be a scalar"):
        kto_loss(x, x, torch.tensor([True, False]), t([0.1, 0.2]))
    with pytest.raises(ValueError, match="KTO weights must be >= 0"):
        kto_loss(x, x, torch.tensor([True, False]), 0.0, undesirable_weight=-1.0)
    with pytest.raises(ValueError, match="center_coef must be >= 0"):
        bradley_terry_loss(x, x, center_coef=-0.1)
    with pytest.raises(ValueError, match="expected \\[B\\] tensors of one shape"):
        bradley_terry_loss(x, x, margin=t([0.0]))
    with pytest.raises(ValueError, match="pair_metrics needs non-empty rewards"):
        pair_metrics(PrefLoss(torch.zeros(0), torch.zeros(0), torch.zeros(0)))
