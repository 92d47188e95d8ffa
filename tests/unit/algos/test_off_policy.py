"""Off-policy corrections against hand-computed weights."""

import math

import pytest
import torch

from posttrain.algos.off_policy import OFF_POLICY, effective_sample_size, off_policy_weights

# two sequences: seq 0 has 2 tokens, seq 1 has 3; log rho per token:
#   seq 0: +0.5, +0.5       (sum 1.0, mean 0.5)
#   seq 1: -0.1, +0.2, 0.0  (sum 0.1, mean 0.0333)
PROX = torch.tensor([-1.0, -2.0, -0.5, -0.3, -1.2])
SAMPLER = PROX - torch.tensor([0.5, 0.5, -0.1, 0.2, 0.0])
SEQ = torch.tensor([0, 0, 1, 1, 1])


def test_tis_truncates_each_token_ratio_at_the_cap():
    w = off_policy_weights("tis", PROX, SAMPLER, SEQ, cap=1.5)
    want = [min(math.exp(0.5), 1.5), min(math.exp(0.5), 1.5), math.exp(-0.1), math.exp(0.2), 1.0]
    assert w.tolist() == pytest.approx(want, rel=1e-6)
    assert w[0] == pytest.approx(1.5)  # e^0.5 = 1.6487 was cut


def test_decoupled_keeps_the_whole_behaviour_ratio():
    w = off_policy_weights("decoupled", PROX, SAMPLER, SEQ)
    assert w.tolist() == pytest.approx([math.exp(0.5), math.exp(0.5), math.exp(-0.1), math.exp(0.2), 1.0], rel=1e-6)


def test_sequence_mask_drops_a_sequence_whose_product_ratio_is_out_of_bounds():
    # seq 0: prod = e^1.0 = 2.718 > 2 -> masked; seq 1: e^0.1 = 1.105 -> kept
    w = off_policy_weights("seq_mask", PROX, SAMPLER, SEQ, low=0.5, high=2.0)
    assert w.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_geometric_mask_uses_the_per_token_mean_so_seq0_survives():
    # seq 0: geometric mean e^0.5 = 1.649 <= 2 -> kept; with high=1.5 it is masked
    assert off_policy_weights("geo_mask", PROX, SAMPLER, SEQ, low=0.5, high=2.0).tolist() == [1.0] * 5
    assert off_policy_weights("geo_mask", PROX, SAMPLER, SEQ, low=0.5, high=1.5).tolist() == [0, 0, 1, 1, 1]


def test_lower_bound_masks_too():
    # seq 1 scaled to log rho sum -1.0 -> e^-1 = 0.37 < 0.5
    sampler = PROX - torch.tensor([0.5, 0.5, -0.4, -0.3, -0.3])
    assert off_policy_weights("seq_mask", PROX, sampler, SEQ, low=0.5, high=3.0).tolist() == [1, 1, 0, 0, 0]


def test_weights_carry_no_gradient_and_none_is_all_ones():
    prox = PROX.clone().requires_grad_(True)
    for name in OFF_POLICY:
        w = off_policy_weights(name, prox, SAMPLER, SEQ)
        assert not w.requires_grad, name
    assert off_policy_weights("none", PROX, SAMPLER, SEQ).tolist() == [1.0] * 5


def test_effective_sample_size_by_hand():
    assert effective_sample_size(torch.ones(4)) == pytest.approx(1.0)
    assert effective_sample_size(torch.tensor([1.0, 0, 0, 0])) == pytest.approx(0.25)
    # (1 + 3)^2 / (2 * (1 + 9)) = 16 / 20
    assert effective_sample_size(torch.tensor([1.0, 3.0])) == pytest.approx(0.8)


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown off-policy correction 'x'"):
        off_policy_weights("x", PROX, SAMPLER, SEQ)
    with pytest.raises(ValueError, match="low <= 1 <= high"):
        off_policy_weights("seq_mask", PROX, SAMPLER, SEQ, low=1.5, high=2.0)
    with pytest.raises(ValueError, match="flat"):
        off_policy_weights("tis", PROX[:3], SAMPLER, SEQ)
