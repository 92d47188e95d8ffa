"""KL estimators, entropy and TIS weights against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.kl import KL_KINDS, entropy_from_logits, kl_estimate, truncated_is_weight

LN2 = math.log(2.0)


def test_kl_estimators_hand_computed():
    # token 0: logp = ln .5, logr = ln .25 -> d = ln 2 = 0.693147
    #   k1 = 0.693147 ; k2 = 0.5 * 0.480453 = 0.240227 ; k3 = exp(-ln2) + ln2 - 1 = 0.5 + 0.693147 - 1 = 0.193147
    # token 1: reversed -> d = -ln 2
    #   k1 = -0.693147 ; k2 = 0.240227 ; k3 = exp(ln2) - ln2 - 1 = 2 - 0.693147 - 1 = 0.306853
    # token 2: equal -> all 0
    logp = torch.tensor([math.log(0.5), math.log(0.25), -1.3])
    logr = torch.tensor([math.log(0.25), math.log(0.5), -1.3])
    expected = {
        "k1": [0.693147, -0.693147, 0.0],
        "k2": [0.240227, 0.240227, 0.0],
        "k3": [0.193147, 0.306853, 0.0],
    }
    for kind, want in expected.items():
        assert kl_estimate(logp, logr, kind).tolist() == pytest.approx(want, abs=1e-6), kind


def test_k1_and_k3_are_unbiased_on_a_two_token_distribution():
    # pi = (.5, .5), ref = (.25, .75): KL = .5 ln(.5/.25) + .5 ln(.5/.75) = .5 (0.693147 - 0.405465) = 0.143841
    # E[k3] = .5 (0.193147) + .5 (1.5 - ln 1.5 - 1 = 0.094535) = 0.143841 ; k2 is biased: .5 * .5 (0.480453 + 0.164402)
    logp = torch.tensor([math.log(0.5), math.log(0.5)])
    logr = torch.tensor([math.log(0.25), math.log(0.75)])
    assert kl_estimate(logp, logr, "k1").mean().item() == pytest.approx(0.143841, abs=1e-6)
    assert kl_estimate(logp, logr, "k3").mean().item() == pytest.approx(0.143841, abs=1e-6)
    assert kl_estimate(logp, logr, "k2").mean().item() == pytest.approx(0.161214, abs=1e-6)


def grad_of(kind, logp_value, logr_value):
    logp = torch.tensor([logp_value], dtype=torch.float64, requires_grad=True)
    kl_estimate(logp, torch.tensor([logr_value], dtype=torch.float64), kind).sum().backward()
    return logp.grad.item()


def test_gradients_wrt_logprobs():
    # at logp == logr: d k1 = 1 ; d k2 = d = 0 ; d k3 = 1 - exp(logr - logp) = 0
    assert grad_of("k1", -1.0, -1.0) == pytest.approx(1.0)
    assert grad_of("k2", -1.0, -1.0) == pytest.approx(0.0)
    assert grad_of("k3", -1.0, -1.0) == pytest.approx(0.0)
    # at d = ln 2: d k2 = 0.693147 ; d k3 = 1 - 0.5 = 0.5
    assert grad_of("k2", math.log(0.5), math.log(0.25)) == pytest.approx(LN2)
    assert grad_of("k3", math.log(0.5), math.log(0.25)) == pytest.approx(0.5)


def test_ref_gets_no_gradient_and_k3_is_clamped():
    logp = torch.tensor([0.0, -1000.0], requires_grad=True)
    logr = torch.tensor([-1000.0, 0.0], requires_grad=True)
    k3 = kl_estimate(logp, logr, "k3")
    # log-ratio -1000 -> -20: exp(-20) + 20 - 1 = 19.000000002 ; +1000 -> 20: exp(20) - 21 = 485165174.4
    assert k3[0].item() == pytest.approx(19.0, abs=1e-6)
    assert k3[1].item() == pytest.approx(math.exp(20) - 21, rel=1e-5)
    k3.sum().backward()
    assert logr.grad is None and torch.isfinite(logp.grad).all()


def test_kl_bad_input_raises():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(z, z, "k4")
    with pytest.raises(ValueError, match="shape"):
        kl_estimate(z, torch.zeros(2), "k1")
    assert KL_KINDS == ("k1", "k2", "k3")


def test_entropy_hand_computed():
    # uniform over 4: ln 4 = 1.386294
    # logits (0, ln 3): p = (.25, .75): H = .25 ln 4 + .75 ln(4/3) = 0.346574 + 0.215762 = 0.562335
    # logits (0, -inf, 0): masked entry contributes 0 -> ln 2 = 0.693147 (not NaN)
    logits = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, math.log(3.0), -math.inf, -math.inf], [0.0, -math.inf, 0.0, -math.inf]])
    logits.requires_grad_(True)
    H = entropy_from_logits(logits)
    assert H.tolist() == pytest.approx([1.386294, 0.562335, 0.693147], abs=1e-6)
    H.sum().backward()
    assert torch.isfinite(logits.grad).all()
    h16 = entropy_from_logits(torch.zeros(2, 8, dtype=torch.bfloat16))
    assert h16.dtype == torch.float32 and h16.tolist() == pytest.approx([math.log(8)] * 2, abs=1e-6)
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        entropy_from_logits(torch.zeros(2, 3, 4))


def test_tis_weight_hand_computed_capped_and_detached():
    # trainer - sampler: ln 1.5 -> 1.5 ; ln 3 -> 3 capped to 2 ; -ln 2 -> 0.5 ; 0 -> 1 ; 100 -> capped 2 (no inf)
    trainer = torch.tensor([math.log(1.5), math.log(3.0), -LN2, -0.7, 100.0], requires_grad=True)
    sampler = torch.tensor([0.0, 0.0, 0.0, -0.7, 0.0])
    w = truncated_is_weight(trainer, sampler, cap=2.0)
    assert w.tolist() == pytest.approx([1.5, 2.0, 0.5, 1.0, 2.0], abs=1e-6)
    assert not w.requires_grad and w.grad_fn is None
    assert truncated_is_weight(trainer, sampler, cap=1.0).tolist() == pytest.approx([1.0, 1.0, 0.5, 1.0, 1.0], abs=1e-6)
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weight(trainer, sampler, cap=0.0)
    with pytest.raises(ValueError, match="shape"):
        truncated_is_weight(trainer, torch.zeros(2))
