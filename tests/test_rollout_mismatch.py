"""Honest rollout numerics: the sampler/trainer gap is measured and, for trajectories sampled with
inexact weights (bf16 / int8 rollout), corrected by truncated importance sampling by default.

- unit: samples whose sampler logprobs are the model's own minus known shifts d: mismatch/kl is
  the mean of exp(d) - d - 1, TIS weights are min(exp(d), cap), exact samples keep weight 1 and
  exactly the loss they had without the feature;
- one update per step: the inline correction's gradient equals the explicit path's
  (recompute_old_logprobs=True) on the same groups;
- more updates per step: only the inexact trajectories' old logprobs are recomputed;
- tis_cap None: no correction, the gap still measured;
- rollout records the engine's weights precision, and old pickles load as "exact";
- end to end: RL on the toy task learns with bf16 rollout weights as with fp32 ones.
"""

from __future__ import annotations

import math
import pickle
import random
import time
from dataclasses import replace

import pytest
import torch

from posttrain.config.base import load_config
from posttrain.config.rl import AlgoConfig, RLConfig
from posttrain.engine.paged import quant
from posttrain.train.rl_batch import Sample, build_rl_microbatches, gather_logprobs, sequence_logprobs, token_logits
from posttrain.train.rl_update import corrected_old_and_weights, update_policy
from posttrain.train.step import build_samples
from posttrain.core.types import Group, Task, Trajectory
from tests.unit.train.test_rl_update import GradRecorder, NoSchedule, base_model, model, sampled  # noqa: F401 (fixtures)

PAD = 0
CPU = torch.device("cpu")
MAX_TOKENS = 40
CAP = 2.0


def scripted(model, n: int, seed: int, shift: float | None = None) -> tuple[list[Sample], list[list[float]]]:
    """n sampled sequences; old (= sampler) logprobs = the model's own minus a known shift d per
    trained token (d cycles through values on both sides of 0 and past log(CAP)). Returns the
    samples and the shifts d ([T] each, 0 where untrained)."""
    rng = random.Random(seed)
    cycle = [0.3, -0.2, 0.9, 0.05, -0.6, 1.2]  # exp(0.9), exp(1.2) > CAP
    raw, shifts = [], []
    for k in range(n):
        prompt = [rng.randrange(1, 400) for _ in range(rng.randint(2, 5))]
        ids = sampled(model, prompt, rng.randint(4, 9), seed + k)
        mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
        raw.append(Sample(ids, mask, [0.0] * len(ids), 0.0, k))
        shifts.append([(shift if shift is not None else cycle[(t + k) % len(cycle)]) if m else 0.0
                       for t, m in enumerate(mask)])
    lp = sequence_logprobs(model, raw, max_tokens_per_microbatch=4096, pad_id=PAD)
    samples = [replace(s, old_logprobs=[a - d for a, d in zip(lp[k], shifts[k])]) for k, s in enumerate(raw)]
    return samples, shifts


def run(model, samples, algo: AlgoConfig, updates: int = 1):
    rec = GradRecorder(model)
    metrics = update_policy(model, rec, NoSchedule(), samples, algo=algo, max_tokens=MAX_TOKENS,
                            updates_per_step=updates, max_tokens_per_microbatch=4096, pad_id=PAD,
                            grad_clip=1e9, device=CPU)
    return metrics, rec.grads


def trained(values_per_sample, samples) -> list[float]:
    return [v for vals, s in zip(values_per_sample, samples) for v, m in zip(vals, s.loss_mask) if m]


# ---------------------------------------------------------------- unit: measured and corrected


def test_mismatch_kl_is_the_k3_of_the_known_shift(model):
    samples, shifts = scripted(model, 4, seed=1)
    samples = [replace(s, advantage=a) for s, a in zip(samples, [1.0, -1.0, 0.5, -0.5])]
    metrics, _ = run(model, samples, AlgoConfig(tis_cap=None))
    d = trained(shifts, samples)  # r = trainer - sampler = d
    by_hand = sum(math.exp(x) - x - 1 for x in d) / len(d)
    assert metrics["mismatch/kl"] == pytest.approx(by_hand, rel=1e-4)
    assert metrics["mismatch/max_abs_logprob"] == pytest.approx(max(abs(x) for x in d), abs=1e-5)
    assert "mismatch/tis_mean" not in metrics  # nothing corrected: no sample is inexact and tis_cap is None

    small, _ = scripted(model, 3, seed=2, shift=1e-3)  # a bf16-sized gap: k3 ~ d^2 / 2 = 5e-7
    m, _ = run(model, small, AlgoConfig())
    assert m["mismatch/kl"] == pytest.approx(math.exp(1e-3) - 1e-3 - 1, rel=2e-2)


def test_replayed_tokens_are_not_measured(model):
    samples, _ = scripted(model, 4, seed=3)
    exact, _ = scripted(model, 4, seed=3, shift=0.0)
    mixed = [exact[0], exact[1], *[replace(s, fresh=False) for s in samples[2:]]]  # gaps only on "replayed" ones
    metrics, _ = run(model, mixed, AlgoConfig())
    assert metrics["mismatch/kl"] < 1e-9 and metrics["mismatch/max_abs_logprob"] < 1e-5


def test_tis_weights_and_old_logprobs_in_the_loss(model):
    samples, shifts = scripted(model, 4, seed=4)
    samples = [replace(s, inline_tis=k % 2 == 1) for k, s in enumerate(samples)]  # 1, 3 inexact; 0, 2 exact
    (mb,) = build_rl_microbatches(samples, max_tokens_per_microbatch=4096, pad_id=PAD)
    with torch.no_grad():
        logp = gather_logprobs(token_logits(model, mb), mb.targets)
    old, weights = corrected_old_and_weights(logp, mb, CAP)
    d = torch.tensor([shifts[s][t] for s, t in zip(mb.seq_index.tolist(), mb.token_pos.tolist())])
    inline = mb.inline_tis
    assert inline.any() and (~inline).any()
    assert torch.allclose(weights[inline], torch.clamp(d[inline].exp(), max=CAP), atol=1e-5)
    assert (weights[inline] == CAP).any() and (weights[inline] < CAP).any()
    assert torch.equal(old[inline], logp[inline])  # PPO ratio 1
    assert torch.equal(weights[~inline], torch.ones(int((~inline).sum())))
    assert torch.equal(old[~inline], mb.old_logprobs[~inline])  # exact: the sampler's, untouched

    metrics, _ = run(model, samples, AlgoConfig(tis_cap=CAP))
    w = [min(math.exp(x), CAP) for k, s in enumerate(samples) if k % 2 for x, m in zip(shifts[k], s.loss_mask) if m]
    assert metrics["mismatch/tis_mean"] == pytest.approx(sum(w) / len(w), rel=1e-5)
    assert metrics["mismatch/tis_clip_frac"] == pytest.approx(sum(x == CAP for x in w) / len(w))


def test_exact_samples_keep_their_loss_and_inexact_ones_get_the_tis_loss(model):
    """seq_sum_norm weighs every token 1 / (max_tokens x S), so each sample's loss is its own term.
    Exact samples (with a stale-looking gap, so a wrongly applied correction would change them) next
    to inexact samples whose advantage is 0: loss and gradients bit-equal to the feature absent."""
    samples, shifts = scripted(model, 4, seed=5)
    algo = AlgoConfig(aggregation="seq_sum_norm", tis_cap=CAP)
    exact = [replace(s, advantage=a) for s, a in zip(samples[:2], [1.0, -1.0])]
    inexact = [replace(s, inline_tis=True, advantage=0.0) for s in samples[2:]]
    with_feature, g_with = run(model, exact + inexact, algo)
    without, g_without = run(model, exact + [replace(s, inline_tis=False) for s in inexact], algo.model_copy(
        update={"tis_cap": None}))
    assert with_feature["loss"] == without["loss"] and with_feature["pg_loss"] == without["pg_loss"]
    assert all(torch.equal(g_with[0][n], g_without[0][n]) for n in g_without[0])

    # an inexact sample's own term: -A x sum(min(exp(d), cap)) / (max_tokens x S) (ratio 1)
    pushed, _ = run(model, exact + [replace(inexact[0], advantage=1.0), inexact[1]], algo)
    w = [min(math.exp(x), CAP) for x, m in zip(shifts[2], samples[2].loss_mask) if m]
    assert pushed["loss"] - with_feature["loss"] == pytest.approx(-sum(w) / (MAX_TOKENS * 4), rel=1e-5)


# ---------------------------------------------------------------- build_samples: which path corrects


TASK = Task(id="t/1", domain="t", prompt=({"role": "user", "content": "x"},), reference="x")


def groups_of(samples: list[Sample], rewards: list[float], sampler_weights: list[str], k: int = 4) -> list[Group]:
    trajs = [Trajectory(task_id=TASK.id, token_ids=tuple(s.token_ids), loss_mask=tuple(s.loss_mask),
                        logprobs=tuple(s.old_logprobs), prompt_len=s.loss_mask.index(1), reward=r, sampler_weights=w)
             for s, r, w in zip(samples, rewards, sampler_weights)]
    return [Group(TASK, tuple(trajs[i:i + k]), tuple(rewards[i:i + k])) for i in range(0, len(trajs), k)]


def cfg(updates: int = 1, **algo) -> RLConfig:
    return RLConfig.model_validate({"model": {"path": "unused"}, "algo": algo,
                                    "train": {"updates_per_step": updates, "max_tokens_per_microbatch": 4096}})


def step_grads(model, groups, c: RLConfig):
    samples = build_samples(groups, model, None, c, PAD)
    metrics, grads = run(model, samples, c.algo, updates=c.train.updates_per_step)
    return samples, metrics, grads


def test_inline_gradient_equals_the_recomputed_path(model):
    samples, _ = scripted(model, 8, seed=6)
    groups = groups_of(samples, [1, 0, 0, 1, 1, 1, 0, 0.5], ["bfloat16"] * 8)
    inline_s, inline_m, (g_inline,) = step_grads(model, groups, cfg())
    explicit_s, explicit_m, (g_explicit,) = step_grads(model, groups, cfg(recompute_old_logprobs=True))
    assert all(s.inline_tis and s.token_weights is None for s in inline_s)  # no extra forward pass
    assert all(not s.inline_tis and s.token_weights is not None for s in explicit_s)
    biggest = max(float(g.abs().max()) for g in g_explicit.values())
    assert biggest > 1e-3
    for n in g_explicit:
        assert torch.allclose(g_inline[n], g_explicit[n], rtol=0, atol=1e-6), n
    assert inline_m["mismatch/tis_mean"] == pytest.approx(explicit_m["mismatch/tis_mean"], abs=1e-6)
    assert inline_m["mismatch/kl"] == pytest.approx(explicit_m["mismatch/kl"], rel=1e-5)

    # the correction matters here: the sampler's logprobs as PPO's old ones give another gradient
    _, _, (g_raw,) = step_grads(model, groups, cfg(tis_cap=None))
    assert max(float((g_raw[n] - g_explicit[n]).abs().max()) for n in g_raw) > 100 * 1e-6


def test_exact_trajectories_are_untouched_and_several_updates_recompute_the_inexact_only(model):
    samples, _ = scripted(model, 8, seed=7)
    kinds = ["exact", "bfloat16"] * 4
    groups = groups_of(samples, [1, 0, 0, 1, 1, 1, 0, 0.5], kinds)
    one = build_samples(groups, model, None, cfg(), PAD)
    assert [s.inline_tis for s in one] == [k != "exact" for k in kinds]
    assert all(s.token_weights is None and s.sampler_logprobs is None for s in one)
    for s, traj in zip(one, [t for g in groups for t in g.trajectories]):
        assert tuple(s.old_logprobs) == traj.logprobs  # replaced only inside the loss

    two = build_samples(groups, model, None, cfg(updates=2), PAD)
    truth = sequence_logprobs(model, samples, max_tokens_per_microbatch=4096, pad_id=PAD)
    for s, traj, k, lp in zip(two, [t for g in groups for t in g.trajectories], kinds, truth):
        assert not s.inline_tis
        if k == "exact":
            assert tuple(s.old_logprobs) == traj.logprobs and s.token_weights is None and s.sampler_logprobs is None
        else:
            assert s.old_logprobs == pytest.approx(lp, abs=1e-5) and tuple(s.sampler_logprobs) == traj.logprobs
            expect = [min(math.exp(a - b), CAP) if m else 1.0 for a, b, m in zip(lp, traj.logprobs, traj.loss_mask)]
            assert trained([s.token_weights], [s]) == pytest.approx(trained([expect], [s]), rel=1e-5)
    metrics, grads = run(model, two, cfg(updates=2).algo, updates=2)
    assert len(grads) == 2 and metrics["mismatch/kl"] > 1e-3 and 0 < metrics["mismatch/tis_clip_frac"] < 1


def test_tis_cap_none_turns_the_correction_off_but_still_measures(model):
    samples, _ = scripted(model, 4, seed=8)
    groups = groups_of(samples, [1, 0, 0, 1], ["int8"] * 4)
    for updates in (1, 2):
        built = build_samples(groups, model, None, cfg(updates=updates, tis_cap=None), PAD)
        assert all(not s.inline_tis and s.token_weights is None and s.sampler_logprobs is None for s in built)
        metrics, _ = run(model, built, AlgoConfig(tis_cap=None), updates=updates)
        assert metrics["mismatch/kl"] > 1e-3 and "mismatch/tis_mean" not in metrics


# ---------------------------------------------------------------- the trajectory records its sampler


def test_rollout_records_the_engines_weights_precision(tiny_model_dir):
    from posttrain.envs.rollout import rollout
    from posttrain.engine.protocol import SamplingParams
    from posttrain.engine.hf import HFEngine
    from posttrain.core.hf import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    task = Task(id="t/2", domain="t", prompt=({"role": "user", "content": "Calculate 1 + 2."},), reference="3")
    params = SamplingParams(max_tokens=3)
    fp32 = HFEngine.from_pretrained(tiny_model_dir, "float32", tokenizer=tok)
    bf16 = HFEngine.from_pretrained(tiny_model_dir, "bfloat16", tokenizer=tok)
    assert (fp32.weights_precision, bf16.weights_precision) == ("exact", "bfloat16")
    assert rollout(fp32, tok, [task], [2], params, [0], 0)[0][0].sampler_weights == "exact"
    assert rollout(bf16, tok, [task], [2], params, [0], 0)[0][1].sampler_weights == "bfloat16"

    class Silent:  # an engine that does not say counts as exact
        def generate(self, prompts, ps):
            return fp32.generate(prompts, ps)

    assert rollout(Silent(), tok, [task], [1], params, [0], 0)[0][0].sampler_weights == "exact"


def test_trajectories_pickled_before_the_field_load_as_exact():
    new = Trajectory(task_id="t", token_ids=(1, 2), loss_mask=(0, 1), logprobs=(0.0, -1.0), prompt_len=1,
                     sampler_weights="int8")
    old = object.__new__(Trajectory)  # what an older buffer file holds: the state without the field
    old.__dict__.update({k: v for k, v in new.__dict__.items() if k != "sampler_weights"})
    blob = pickle.dumps(old, protocol=5)
    assert b"sampler_weights" not in blob
    assert pickle.loads(blob).sampler_weights == "exact"
    assert pickle.loads(pickle.dumps(new)).sampler_weights == "int8"


# ---------------------------------------------------------------- end to end

# rollout settings: RL overrides and whether the engine's weights equal the trainer's fp32 masters.
STEPS = 32
ROLLOUTS = {
    "fp32": ({"model.dtype": "float32"}, True),
    "bf16": ({"model.dtype": "bfloat16"}, False),
    "bf16-weights": ({"rollout.weights": "bf16"}, False),
    "int8": ({"rollout.weights": "int8"}, False),
}


def run_toy(tmp_path, model_dir, overrides: dict) -> dict:
    """The toy RL task (tests/recipes/rl_toy.py), 32 steps (~2.5 s); returns the per-step metrics and facts.
    Over 6 seeds, 16 steps ended at 0.76-0.95 either way (too noisy to compare runs), 24 at 0.96-1.0 on an
    Intel AMX machine; on an AMD Zen 4 (avx512_bf16) the bf16 run was still at 0.82 after 24 (exact 0.96),
    and every setting reached 1.0 by 32."""
    import posttrain.train.trainer as trainer_mod
    from posttrain.recipes import rl
    from posttrain.engine.registry import ENGINES
    from posttrain.telemetry.metrics import read_metrics
    from tests.recipes.rl_toy import overrides as toy_overrides, write_tasks

    seen: dict = {"engines": [], "trainer_dtypes": set()}
    make, step = ENGINES["paged"], trainer_mod.train_step

    def paged(*args, **kw):
        engine = make(*args, **kw)
        seen["engines"].append(engine)
        return engine

    def recording_step(policy, *args, **kw):
        seen["trainer_dtypes"] |= {p.dtype for p in policy.parameters()}
        return step(policy, *args, **kw)

    tasks = write_tasks(tmp_path / "tasks.jsonl")
    settings = {"train.steps": STEPS, "train.eval_every": STEPS, "train.save_every": STEPS, "optim.lr": 1e-2,
                "rollout.samples_per_prompt": 8, **overrides}
    config = load_config(RLConfig, None, toy_overrides(model_dir, tasks, tmp_path / "run", **settings))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(ENGINES, "paged", paged)
        mp.setattr(trainer_mod, "train_step", recording_step)
        started = time.perf_counter()
        rl.run(config)
        seconds = time.perf_counter() - started
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    return {"steps": steps, "seconds": seconds, "first": sum(r["score"] for r in steps[:3]) / 3,
            "last": sum(r["score"] for r in steps[-3:]) / 3, **seen}


@pytest.fixture(scope="module")
def exact_run(tmp_path_factory, tiny_model_dir):
    return run_toy(tmp_path_factory.mktemp("exact"), tiny_model_dir, ROLLOUTS["fp32"][0])


@pytest.mark.parametrize("setting", sorted(ROLLOUTS))
def test_rl_learns_with_inexact_rollout_weights_as_with_exact_ones(setting, exact_run, tmp_path, tiny_model_dir):
    overrides, exact = ROLLOUTS[setting]
    if setting == "bf16-weights" and not quant.native_bf16():
        pytest.skip("rollout.weights=bf16 falls back to exact weights on a CPU without bf16 instructions")
    result = exact_run if setting == "fp32" else run_toy(tmp_path, tiny_model_dir, overrides)
    steps = result["steps"]
    updated = [r for r in steps if "mismatch/kl" in r]  # a saturated step can keep no group with signal
    kl = [r["mismatch/kl"] for r in updated]
    print(f"{setting}: score {result['first']:.3f} -> {result['last']:.3f} in {result['seconds']:.1f}s; "
          f"mismatch/kl first {kl[0]:.3g} max {max(kl):.3g}; exact run {exact_run['first']:.3f} -> "
          f"{exact_run['last']:.3f}")
    assert result["trainer_dtypes"] == {torch.float32}  # fp32 masters whatever the rollout computes in
    assert len(steps) == STEPS and len(updated) >= STEPS - 10  # once at 1.0, groups carry no signal
    assert all(r["skipped_updates"] == 0 for r in updated) and all("non-finite" not in r["skip_reason"] for r in steps)
    assert result["first"] < 0.75 and result["last"] > result["first"] + 0.25, (result["first"], result["last"])
    assert abs(result["last"] - exact_run["last"]) < 0.1, (result["last"], exact_run["last"])
    if exact:
        assert max(kl) < 1e-4 and all("mismatch/tis_mean" not in r for r in updated)
    else:
        assert all(e.weights_precision != "exact" for e in result["engines"])
        exact_kl = [r["mismatch/kl"] for r in exact_run["steps"] if "mismatch/kl" in r]
        assert min(kl) > 0 and sum(kl) / len(kl) > 100 * max(sum(exact_kl) / len(exact_kl), 1e-12)
        assert all("mismatch/tis_mean" in r for r in updated)  # corrected by default
        assert all(0.5 < r["mismatch/tis_mean"] < CAP for r in updated)

