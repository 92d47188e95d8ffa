"""Advantage estimators: hand-computed values, masking, degenerate groups."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.advantages import (
    ADVANTAGES,
    GROUP_RELATIVE,
    dr_grpo,
    get_estimator,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
)

NAN = float("nan")
T, F = True, False
# group 0: rewards 1,0,1,0           (all valid)
# group 1: rewards 1,2,3 + padding   (last slot invalid, value must be ignored)
# group 2: one valid sample          (no baseline -> 0 for group-relative estimators)
# group 3: all equal                 (-> 0, no NaN)
REWARDS = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 2.0, 3.0, 100.0], [5.0, NAN, NAN, NAN], [0.7, 0.7, 0.7, 0.7]])
VALID = torch.tensor([[T, T, T, T], [T, T, T, F], [T, F, F, F], [T, T, T, T]])


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a, torch.tensor(b, dtype=a.dtype), atol=tol, rtol=0)


def test_grpo_hand_computed_population_std():
    # g0: mean 0.5, population std sqrt((4 * 0.25) / 4) = 0.5 -> (+-0.5) / 0.5 = +-1
    #     (the unbiased std sqrt(1/3) = 0.577 would give +-0.866 instead)
    # g1: mean 2, var (1 + 0 + 1) / 3 = 2/3, std 0.816497 -> (-1, 0, 1) / 0.816497 = -1.224745, 0, 1.224745
    A = grpo(REWARDS, VALID)
    close(A, [[1, -1, 1, -1], [-1.224745, 0, 1.224745, 0], [0, 0, 0, 0], [0, 0, 0, 0]])


def test_dr_grpo_hand_computed():
    # g0: r - 0.5; g1: r - 2
    close(dr_grpo(REWARDS, VALID), [[0.5, -0.5, 0.5, -0.5], [-1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])


def test_rloo_hand_computed():
    # g0: r=1 -> others {0,1,0} mean 1/3 -> 2/3 ; r=0 -> others {1,0,1} mean 2/3 -> -2/3
    # g1: r=1 -> others {2,3} mean 2.5 -> -1.5 ; r=2 -> {1,3} mean 2 -> 0 ; r=3 -> {1,2} mean 1.5 -> 1.5
    t = 2 / 3
    close(rloo(REWARDS, VALID), [[t, -t, t, -t], [-1.5, 0, 1.5, 0], [0, 0, 0, 0], [0, 0, 0, 0]])


def test_reinforce_pp_hand_computed_uses_batch_stats_and_single_samples():
    # valid rewards 1, 3, 5 (the lone sample of group 1 counts: no group baseline here)
    # batch mean 3, population var (4 + 0 + 4) / 3 = 8/3, std 1.632993 -> -2/1.632993 = -1.224745
    rewards = torch.tensor([[1.0, 3.0], [5.0, NAN]])
    valid = torch.tensor([[T, T], [T, F]])
    close(reinforce_pp(rewards, valid), [[-1.224745, 0], [1.224745, 0]])


def test_reinforce_pp_baseline_hand_computed():
    # group means: g0 (1,3) -> 2 ; g1 single valid -> excluded ; g2 (0,4) -> 2
    # centred: -1, 1, -2, 2 -> batch mean 0, var (1 + 1 + 4 + 4) / 4 = 2.5, std 1.581139
    # -> -0.632456, 0.632456, -1.264911, 1.264911
    rewards = torch.tensor([[1.0, 3.0], [5.0, NAN], [0.0, 4.0]])
    valid = torch.tensor([[T, T], [T, F], [T, T]])
    expected = [[-0.632456, 0.632456], [0, 0], [-1.264911, 1.264911]]
    close(reinforce_pp_baseline(rewards, valid), expected)
    # the excluded lone sample does not move the batch statistics
    rewards[1, 0] = 1000.0
    close(reinforce_pp_baseline(rewards, valid), expected)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_invalid_samples_get_zero_and_do_not_affect_others(name):
    fn = ADVANTAGES[name]
    base = fn(REWARDS, VALID)
    assert torch.isfinite(base).all()
    assert (base[~VALID] == 0).all()
    for junk in (-1e9, 1e9, NAN, float("inf")):
        r = REWARDS.clone()
        r[~VALID] = junk
        torch.testing.assert_close(fn(r, VALID), base)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_all_equal_rewards_give_zero_without_nan(name):
    A = ADVANTAGES[name](torch.full((3, 4), 0.25), torch.ones(3, 4, dtype=torch.bool))
    assert torch.equal(A, torch.zeros(3, 4))


@pytest.mark.parametrize("name", sorted(GROUP_RELATIVE))
def test_group_with_one_valid_sample_gets_zero(name):
    rewards = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    valid = torch.tensor([[T, F, F], [T, T, F]])
    A = ADVANTAGES[name](rewards, valid)
    assert A[0].tolist() == [0.0, 0.0, 0.0]
    assert A[1, 0] > 0 > A[1, 1]


def test_group_relative_set_and_registry():
    assert GROUP_RELATIVE == {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"}
    assert get_estimator("rloo") is rloo
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        get_estimator("ppo")


def test_bad_shapes_and_values_raise():
    with pytest.raises(ValueError, match=r"\[G, K\]"):
        grpo(torch.zeros(4), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="valid shape"):
        rloo(torch.zeros(2, 3), torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="finite"):
        dr_grpo(torch.tensor([[NAN, 1.0]]), torch.tensor([[T, T]]))


def test_int_rewards_and_float64_kept():
    assert grpo(torch.tensor([[1, 0]]), torch.tensor([[T, T]])).dtype == torch.float32
    A = dr_grpo(torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([[T, T]]))
    assert A.dtype == torch.float64 and A.tolist() == [[0.5, -0.5]]
    assert not math.isnan(grpo(torch.zeros(0, 4), torch.zeros(0, 4, dtype=torch.bool)).sum().item())
