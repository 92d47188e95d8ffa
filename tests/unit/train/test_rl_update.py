"""The RL policy update on the tiny model: the sign of the advantage moves a sequence's logprob the
right way, gradients equal a hand-written full-batch loss however micro-batches split the step,
a non-finite loss skips the update without touching the weights, mini-batches renumber sequences."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import replace

import pytest
import torch

from posttrain.algos.kl import entropy_from_logits, kl_estimate
from posttrain.algos.policy_loss import AGGREGATIONS, ppo_clip
from posttrain.config.rl import AlgoConfig
from posttrain.core.hf import load_model
from posttrain.train.rl_batch import Sample, build_rl_microbatches, sequence_logprobs
from posttrain.train.rl_update import split_minibatches, update_policy

PAD = 0
CPU = torch.device("cpu")
MAX_TOKENS = 40  # the rollout's max_tokens (seq_sum_norm divides by it)


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    return load_model(tiny_model_dir, dtype="float32", device=CPU)


@pytest.fixture
def model(base_model):
    return copy.deepcopy(base_model)


@torch.no_grad()
def sampled(model, prompt: list[int], n_new: int, seed: int) -> list[int]:
    """A completion sampled from the model (T=1), so the update acts on a real sample."""
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    model.eval()
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        ids.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=g)))
    return ids


def make_samples(model, n: int, seed: int, temperature: float = 1.0) -> list[Sample]:
    """n sampled sequences of different lengths, old logprobs = the model's own (ratio 1 at the start)."""
    rng = random.Random(seed)
    raw = []
    for k in range(n):
        prompt = [rng.randrange(1, 400) for _ in range(rng.randint(2, 6))]
        ids = sampled(model, prompt, rng.randint(3, 14), seed + k)
        mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
        raw.append(Sample(ids, mask, [0.0] * len(ids), 0.0, k))
    raw = [replace(s, temperature=temperature) for s in raw]
    lp = sequence_logprobs(model, raw, max_tokens_per_microbatch=4096, pad_id=PAD)
    return [replace(s, old_logprobs=lp[k]) for k, s in enumerate(raw)]


def with_advantages(samples, advs):
    return [replace(s, advantage=a) for s, a in zip(samples, advs)]


def run_update(model, samples, *, algo=None, optimizer=None, budget=4096, updates=1):
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0) if isinstance(
        optimizer, torch.optim.Optimizer) else NoSchedule()
    return update_policy(model, optimizer, scheduler, samples, algo=algo or AlgoConfig(),
                         max_tokens=MAX_TOKENS, updates_per_step=updates, max_tokens_per_microbatch=budget,
                         pad_id=PAD, grad_clip=1e9, device=CPU)


def seq_logprob(model, s: Sample) -> float:
    return sum(sequence_logprobs(model, [s], max_tokens_per_microbatch=4096, pad_id=PAD)[0])


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_advantage_sign_moves_the_sequence_logprob(model, advantage):
    (s,) = with_advantages(make_samples(model, 1, seed=3), [advantage])
    before = seq_logprob(model, s)
    assert before == pytest.approx(sum(s.old_logprobs), abs=1e-5)
    metrics = run_update(model, [s])
    after = seq_logprob(model, s)
    assert metrics["skipped_updates"] == 0 and metrics["skip_reason"] == ""
    assert metrics["grad_norm"] > 0 and math.isfinite(metrics["loss"])
    assert (after - before) * advantage > 0.05, (before, after)


# ---------------------------------------------------------------- exact gradient accumulation


class GradRecorder:
    """Stands in for the optimizer: records the gradients update_policy would step with."""

    def __init__(self, model):
        self.model, self.grads = model, []

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.grads.append({n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None})


class NoSchedule:
    def step(self):
        pass


def reference_grads(model, samples, algo: AlgoConfig, temperature: float) -> dict[str, torch.Tensor]:
    """The step loss written out directly: one plain forward per sequence, aggregation by its formula."""
    model.zero_grad(set_to_none=True)
    model.train()
    per_seq, lengths = [], []
    for s in samples:
        logits = model(input_ids=torch.tensor([list(s.token_ids)]), use_cache=False).logits[0].float() / temperature
        pos = [t - 1 for t in range(1, len(s.token_ids)) if s.loss_mask[t]]
        nxt = torch.tensor([s.token_ids[t + 1] for t in pos])
        lg = logits[pos]
        logp = torch.log_softmax(lg, -1).gather(-1, nxt[:, None]).squeeze(-1)
        old = torch.tensor([s.old_logprobs[t + 1] for t in pos])
        loss, _ = ppo_clip(logp, old, torch.full_like(logp, s.advantage), clip_low=algo.clip_low,
                           clip_high=algo.clip_high, dual_clip=algo.dual_clip)
        ref = torch.tensor([s.ref_logprobs[t + 1] for t in pos])
        loss = loss + algo.kl_coef * kl_estimate(logp, ref, algo.kl_estimator)
        loss = loss - algo.entropy_coef * entropy_from_logits(lg)
        per_seq.append(loss)
        lengths.append(len(pos))
    S = len(samples)
    if algo.aggregation == "token_mean":
        total = torch.cat(per_seq).sum() / sum(lengths)
    elif algo.aggregation == "seq_mean":
        total = sum(l.mean() for l in per_seq) / S
    else:
        total = torch.cat(per_seq).sum() / (MAX_TOKENS * S)
    total.backward()
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def max_rel_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    scale = max(float(v.abs().max()) for v in b.values())
    return max(float((a[k] - b[k]).abs().max()) for k in a) / scale


@pytest.fixture(scope="module")
def step_samples(base_model):
    samples = make_samples(base_model, 6, seed=11, temperature=0.8)
    rng = random.Random(5)
    out = []
    for k, s in enumerate(samples):
        # old logprobs off by up to +-0.4 so that some ratios leave the clip range; a reference model nearby
        old = [v + rng.uniform(-0.4, 0.4) if m else 0.0 for v, m in zip(s.old_logprobs, s.loss_mask)]
        ref = [v + rng.uniform(-0.3, 0.3) if m else 0.0 for v, m in zip(s.old_logprobs, s.loss_mask)]
        out.append(replace(s, old_logprobs=old, advantage=[1.0, -0.5, 0.3, -1.2, 0.8, -0.1][k], seq=k, ref_logprobs=ref))
    return out


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_gradients_match_full_batch_loss_however_split(model, step_samples, aggregation):
    algo = AlgoConfig(aggregation=aggregation, kl_coef=0.05, kl_estimator="k3", entropy_coef=0.01)
    expected = reference_grads(model, step_samples, algo, temperature=0.8)
    longest = max(len(s.token_ids) for s in step_samples)
    count = lambda b: len(build_rl_microbatches(step_samples, max_tokens_per_microbatch=b, pad_id=PAD))  # noqa: E731
    assert (count(4096), count(24), count(longest)) == (1, 3, 6)
    for budget in (4096, 24, longest):  # all in one row / two sequences / one sequence per micro-batch
        rec = GradRecorder(model)
        metrics = run_update(model, step_samples, algo=algo, optimizer=rec, budget=budget)
        assert metrics["skipped_updates"] == 0 and len(rec.grads) == 1
        assert max_rel_diff(rec.grads[0], expected) < 1e-5, (aggregation, budget)
    assert 0 < metrics["clip_frac"] < 1  # the clip branch was exercised


def test_aggregation_modes_differ(model, step_samples):
    grads = {}
    for aggregation in AGGREGATIONS:
        rec = GradRecorder(model)
        run_update(model, step_samples, algo=AlgoConfig(aggregation=aggregation), optimizer=rec, budget=24)
        grads[aggregation] = rec.grads[0]
    assert max_rel_diff(grads["token_mean"], grads["seq_mean"]) > 1e-2
    assert max_rel_diff(grads["token_mean"], grads["seq_sum_norm"]) > 1e-2


# ---------------------------------------------------------------- non-finite steps, mini-batches


def test_nan_advantage_skips_the_update(model, step_samples):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bad = with_advantages(step_samples, [1.0, float("nan"), 0.3, -1.2, 0.8, -0.1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    metrics = run_update(model, bad, optimizer=opt, budget=24)
    assert metrics["skipped_updates"] == 1 and "non-finite" in metrics["skip_reason"]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not opt.state  # AdamW never stepped
    assert all(p.grad is None for p in model.parameters())
    # two mini-batches, the NaN in the first: the second one still trains
    metrics = run_update(model, bad, optimizer=opt, budget=24, updates=2)
    assert metrics["skipped_updates"] == 1 and math.isfinite(metrics["loss"])
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_split_minibatches_renumbers_sequences():
    samples = [Sample([k, k + 1], [0, 1], [0.0, -1.0], float(k), 10 + k) for k in range(5)]
    parts = split_minibatches(samples, 2)
    assert [[s.seq for s in p] for p in parts] == [[0, 1], [0, 1, 2]]
    assert [s.token_ids for p in parts for s in p] == [s.token_ids for s in samples]  # order and data kept
    assert [s.advantage for p in parts for s in p] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [[s.seq for s in p] for p in split_minibatches(samples, 9)] == [[0]] * 5
    assert [[s.seq for s in p] for p in split_minibatches(samples, 0)] == [[0, 1, 2, 3, 4]]
