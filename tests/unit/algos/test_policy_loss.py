"""PPO clip / clip-higher / dual-clip losses and step-exact token weights, checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.policy_loss import AGGREGATIONS, POLICY_LOSSES, get_policy_loss, ppo_clip, token_weights


def run(ratios, advs, **kw):
    """Loss, d loss / d logprobs and stats for tokens with the given ratios (old logprobs 0)."""
    logp = torch.tensor([math.log(r) for r in ratios], dtype=torch.float64, requires_grad=True)
    loss, stats = ppo_clip(logp, torch.zeros_like(logp), torch.tensor(advs, dtype=torch.float64), **kw)
    loss.sum().backward()
    return loss.detach().tolist(), logp.grad.tolist(), stats


def test_on_policy_token_is_plain_policy_gradient():
    # r = 1, A = 2: loss -A*r = -2 ; d/dlogp (-A * exp(logp - old)) = -A*r = -2
    loss, grad, stats = run([1.0], [2.0])
    assert loss == pytest.approx([-2.0]) and grad == pytest.approx([-2.0])
    assert stats["clip_frac"].item() == 0.0 and stats["ratio_mean"].item() == pytest.approx(1.0)


def test_clip_higher_asymmetry():
    # r = 1.25, A = 1. clip_high 0.28: clamp(1.25, 0.8, 1.28) = 1.25 -> loss -1.25, grad -1.25 (unclipped)
    loss, grad, stats = run([1.25], [1.0], clip_high=0.28)
    assert loss == pytest.approx([-1.25]) and grad == pytest.approx([-1.25]) and stats["clip_frac"].item() == 0.0
    # clip_high 0.2: clamp -> 1.2; max(-1.25, -1.2) = -1.2, constant in logp -> grad 0, counted clipped
    loss, grad, stats = run([1.25], [1.0], clip_high=0.2)
    assert loss == pytest.approx([-1.2]) and grad == [0.0] and stats["clip_frac"].item() == 1.0


def test_lower_clip_only_binds_negative_advantages():
    # r = 0.5, A = -1: max(0.5, 0.8) = 0.8 (clipped, grad 0)
    # r = 0.5, A = +1: max(-0.5, -0.8) = -0.5 (unclipped, grad -A*r = -0.5)
    loss, grad, stats = run([0.5, 0.5], [-1.0, 1.0])
    assert loss == pytest.approx([0.8, -0.5]) and grad == pytest.approx([0.0, -0.5])
    assert stats["clip_frac"].item() == 0.5


def test_dual_clip_acts_only_on_negative_advantages():
    # r = 5, A = -1  : L_clip = max(5, 1.28) = 5 -> min(5, 3 * 1) = 3 (dual-clipped, grad 0)
    # r = 5, A = +1  : L_clip = max(-5, -1.28) = -1.28 (ordinary clip; dual clip does not apply)
    # r = 2, A = -1  : L_clip = 2 < 3 -> 2, grad -A*r = 2
    # r = 10, A = -0.5: L_clip = 5 -> min(5, 3 * 0.5) = 1.5
    loss, grad, stats = run([5.0, 5.0, 2.0, 10.0], [-1.0, 1.0, -1.0, -0.5])
    assert loss == pytest.approx([3.0, -1.28, 2.0, 1.5]) and grad == pytest.approx([0.0, 0.0, 2.0, 0.0])
    assert stats["dual_clip_frac"].item() == pytest.approx(0.5)  # tokens 0 and 3
    assert stats["clip_frac"].item() == pytest.approx(0.25)  # token 1
    # without dual clip the bad action's loss is unbounded: 5, grad -A*r = 5
    loss, grad, stats = run([5.0], [-1.0], dual_clip=None)
    assert loss == pytest.approx([5.0]) and grad == pytest.approx([5.0]) and stats["dual_clip_frac"].item() == 0.0


def test_stats_hand_computed():
    # tokens (r, A): (1, 1) plain ; (1.25, 1) inside clip_high 0.28 ; (5, -1) dual ; (0.5, -1) lower clip
    _, grad, stats = run([1.0, 1.25, 5.0, 0.5], [1.0, 1.0, -1.0, -1.0])
    assert grad == pytest.approx([-1.0, -1.25, 0.0, 0.0])
    assert stats["clip_frac"].item() == pytest.approx(0.25)
    assert stats["dual_clip_frac"].item() == pytest.approx(0.25)
    assert stats["ratio_mean"].item() == pytest.approx((1 + 1.25 + 5 + 0.5) / 4)  # 1.9375
    assert stats["ratio_max"].item() == pytest.approx(5.0)
    assert all(not v.requires_grad and v.dim() == 0 for v in stats.values())


def test_no_gradient_into_old_logprobs_or_advantages():
    logp = torch.zeros(2, requires_grad=True)
    old = torch.zeros(2, requires_grad=True)
    adv = torch.ones(2, requires_grad=True)
    ppo_clip(logp, old, adv)[0].sum().backward()
    assert old.grad is None and adv.grad is None and logp.grad.tolist() == [-1.0, -1.0]


def test_ppo_clip_bad_input_raises():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match="one shape"):
        ppo_clip(z, torch.zeros(2), z)
    with pytest.raises(ValueError, match="one shape"):
        ppo_clip(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip(z, z, z, dual_clip=1.0)
    with pytest.raises(ValueError, match="clip_low"):
        ppo_clip(z, z, z, clip_low=1.5)
    with pytest.raises(ValueError, match="unknown policy loss 'dpo'"):
        get_policy_loss("dpo")
    assert POLICY_LOSSES["ppo_clip"] is ppo_clip
    loss, stats = ppo_clip(torch.zeros(0), torch.zeros(0), torch.zeros(0))
    assert loss.numel() == 0 and all(math.isfinite(v.item()) for v in stats.values())


# One step: S = 3 sequences with 2, 3, 1 trained tokens; split into two micro-batches
# mb1 = seq0 tokens 0-1 + seq1 tokens 0-1 ; mb2 = seq1 token 2 + seq2 token 0.
SEQ_LENGTHS = torch.tensor([2, 3, 1])
STEP_INDEX = torch.tensor([0, 0, 1, 1, 1, 2])
MB_INDEX = (torch.tensor([0, 0, 1, 1]), torch.tensor([1, 2]))
LOSSES = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


def test_token_weights_hand_computed():
    # token_mean: 1 / (2 + 3 + 1) = 1/6 everywhere
    w = token_weights(STEP_INDEX, SEQ_LENGTHS, mode="token_mean", max_tokens=4)
    torch.testing.assert_close(w, torch.full((6,), 1 / 6))
    # seq_mean: 1 / (len * 3): seq0 1/6, seq1 1/9, seq2 1/3
    w = token_weights(STEP_INDEX, SEQ_LENGTHS, mode="seq_mean", max_tokens=4)
    torch.testing.assert_close(w, torch.tensor([1 / 6, 1 / 6, 1 / 9, 1 / 9, 1 / 9, 1 / 3]))
    # seq_sum_norm: 1 / (max_tokens * S) = 1 / 12 everywhere
    w = token_weights(STEP_INDEX, SEQ_LENGTHS, mode="seq_sum_norm", max_tokens=4)
    torch.testing.assert_close(w, torch.full((6,), 1 / 12))


def test_token_weights_sum_properties():
    w = token_weights(STEP_INDEX, SEQ_LENGTHS, mode="token_mean", max_tokens=4)
    assert w.sum().item() == pytest.approx(1.0)
    w = token_weights(STEP_INDEX, SEQ_LENGTHS, mode="seq_mean", max_tokens=4)
    for s in range(3):
        assert w[STEP_INDEX == s].sum().item() == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("token_mean", 21 / 6),  # (1+..+6) / 6 = 3.5
        ("seq_mean", (1.5 + 4.0 + 6.0) / 3),  # per-seq means (1+2)/2, (3+4+5)/3, 6 -> 3.8333
        ("seq_sum_norm", 21 / 12),  # 21 / (4 * 3) = 1.75
    ],
)
def test_split_micro_batches_give_the_same_step_loss(mode, expected):
    whole = (token_weights(STEP_INDEX, SEQ_LENGTHS, mode=mode, max_tokens=4) * LOSSES).sum()
    split = sum(
        (token_weights(idx, SEQ_LENGTHS, mode=mode, max_tokens=4) * part).sum()
        for idx, part in zip(MB_INDEX, (LOSSES[:4], LOSSES[4:]))
    )
    assert whole.item() == pytest.approx(expected) and split.item() == pytest.approx(expected)


def test_gradient_accumulation_over_micro_batches_is_exact():
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 0.5])
    old = torch.randn(6) * 0.1
    p = torch.randn(3, requires_grad=True)

    def step_loss(rows, idx):
        loss, _ = ppo_clip(x[rows] @ p, old[rows], adv[rows])
        return (token_weights(idx, SEQ_LENGTHS, mode="seq_mean", max_tokens=4) * loss).sum()

    step_loss(slice(0, 6), STEP_INDEX).backward()
    g_whole = p.grad.clone()
    p.grad = None
    step_loss(slice(0, 4), MB_INDEX[0]).backward()
    step_loss(slice(4, 6), MB_INDEX[1]).backward()
    torch.testing.assert_close(p.grad, g_whole)


def test_token_weights_bad_input_raises():
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'mean'"):
        token_weights(STEP_INDEX, SEQ_LENGTHS, mode="mean", max_tokens=4)
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        token_weights(torch.tensor([0, 3]), SEQ_LENGTHS, mode="seq_mean", max_tokens=4)
    with pytest.raises(ValueError, match="integer"):
        token_weights(torch.tensor([0.0]), SEQ_LENGTHS, mode="seq_mean", max_tokens=4)
    with pytest.raises(ValueError, match="> 0"):
        token_weights(STEP_INDEX, torch.tensor([2, 0, 1]), mode="token_mean", max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens"):
        token_weights(STEP_INDEX, SEQ_LENGTHS, mode="seq_sum_norm", max_tokens=0)
    with pytest.raises(ValueError, match=r"\[N\]"):
        token_weights(STEP_INDEX.view(2, 3), SEQ_LENGTHS, mode="token_mean", max_tokens=4)
    assert AGGREGATIONS == ("token_mean", "seq_mean", "seq_sum_norm")
