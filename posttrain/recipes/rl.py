"""Reinforcement learning with verifiable rewards, written out top to bottom.

    final_dir = run(cfg)                # cfg: RLConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)   # continue exactly from the newest checkpoint

One step:
  1. temperature from the schedule (linear / cosine / constant over epochs);
  2. collect groups (recipes/rl_groups.py): replayed + fresh tasks from the domain mixture,
     `samples_per_prompt` completions each from the engine, verified, rewards shaped,
     zero-signal groups dropped and backfilled (dynamic sampling);
  3. logprobs the update needs besides the sampler's: the frozen reference's (only when
     kl_coef > 0: no reference model is loaded otherwise), and the trainer's own when
     `recompute_old_logprobs` (with a truncated importance weight for the sampler gap);
  4. advantages by the configured estimator over each group's shaped rewards (KL in the
     reward is subtracted first when configured);
  5. update (train/rl_update.py): PPO-clip (clip-higher, dual-clip) with token- or
     sequence-level aggregation, KL and entropy terms, `updates_per_step` AdamW updates;
  6. sync the new weights to the engine (version = step);
  7. metrics (each phase timed as time/<phase>, per-domain reward, pass rate,
     zero-variance fraction, length; what recipes/rl_audit.py records about the verifiers:
     rollout log, disagreement, reward-hacking alerts), held-out greedy pass@1 per domain every
     `eval_every` steps, and a checkpoint every `save_every` steps holding policy,
     optimizer, scheduler, replay buffer, mixture cursors, RNG states and the reference
     model's identity. Nothing else carries state across steps (sampling seeds derive
     from (seed, step, attempt)), so a resumed run repeats an uninterrupted one exactly.

Simplifications, said plainly: single-turn tasks only (multi-turn environments plug in
at `envs/`); the trainer and the engine live in one process and share nothing but the
weights passed at sync.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from posttrain.algos.advantages import ADVANTAGES
from posttrain.algos.kl import kl_estimate, truncated_is_weight
from posttrain.algos.temperature import temperature_at
from posttrain.buffer import ReplayBuffer
from posttrain.checkpoint import latest_checkpoint, load_checkpoint, resume_point, save_checkpoint
from posttrain.config import RLConfig, save_config
from posttrain.errors import CheckpointError, TrainingError
from posttrain.eval.harness import stop_ids
from posttrain.recipes.rl_audit import Auditor
from posttrain.recipes.rl_eval import evaluate, domain_metrics
from posttrain.recipes.rl_groups import ScoredGroup, StepContext, collect_groups
from posttrain.recipes.sft import export_final, seed_everything
from posttrain.rollout.engine import ENGINES
from posttrain.tasks.mixture import build_mixture
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.train.lora import apply_lora
from posttrain.train.model import load_model, load_tokenizer, pick_device, resolve_dtype
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.rl_batch import Sample, sequence_logprobs
from posttrain.train.rl_update import update_policy
from posttrain.train.threads import ThreadTuner
from posttrain.train.weights import engine_state_dict, model_identity

console = Console(stderr=True, highlight=False, soft_wrap=True)


def advantages_for(groups: list[ScoredGroup], estimator: str) -> list[list[float]]:
    k = max(len(g.trajectories) for g in groups)
    rewards = torch.zeros(len(groups), k)
    valid = torch.zeros(len(groups), k, dtype=torch.bool)
    for i, g in enumerate(groups):
        for j, t in enumerate(g.trajectories):
            if t.reward is not None:
                rewards[i, j], valid[i, j] = t.reward, True
    return ADVANTAGES[estimator](rewards, valid).tolist()


def build_samples(groups: list[ScoredGroup], policy, ref, cfg: RLConfig, temperature: float, pad_id: int) -> list[Sample]:
    """Scored groups -> training samples with advantages (+ reference / recomputed logprobs)."""
    a = cfg.algo
    trajs = [(i, j, t) for i, g in enumerate(groups) for j, t in enumerate(g.trajectories) if t.reward is not None]
    base = [Sample(t.token_ids, t.loss_mask, t.logprobs, 0.0, n) for n, (_, _, t) in enumerate(trajs)]
    lp = dict(temperature=temperature, max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id)
    ref_lp = sequence_logprobs(ref, base, **lp) if ref is not None else None
    old_lp = sequence_logprobs(policy, base, **lp) if a.recompute_old_logprobs else None
    if ref_lp is not None and a.kl_in == "reward":  # KL penalty folded into each sequence's reward
        for n, (i, j, t) in enumerate(trajs):
            sampled = torch.tensor(t.logprobs), torch.tensor(ref_lp[n])
            kl = float((kl_estimate(*sampled, a.kl_estimator) * torch.tensor(t.loss_mask)).sum())
            groups[i].trajectories[j] = replace(t, reward=t.reward - a.kl_coef * kl)
    adv = advantages_for(groups, a.advantage)
    samples = []
    for n, (i, j, t) in enumerate(trajs):
        old = old_lp[n] if old_lp is not None else t.logprobs
        weights = None
        if old_lp is not None and a.tis_cap is not None:
            weights = truncated_is_weight(torch.tensor(old), torch.tensor(t.logprobs, dtype=torch.float32),
                                          cap=a.tis_cap).tolist()
        samples.append(Sample(t.token_ids, t.loss_mask, old, adv[i][j], n,
                              ref_lp[n] if ref_lp is not None else None, weights))
    return samples


def engine_options(cfg: RLConfig, device) -> dict:
    """The rollout engine's options: the model's dtype and device, the batch limit under each
    engine's own name, then `rollout.engine_options` (which win)."""
    r = cfg.rollout
    base: dict = {"dtype": cfg.model.dtype, "device": device}
    if r.engine == "hf":
        base["max_batch_sequences"] = r.max_batch_sequences
    elif r.engine == "paged":
        base["max_num_seqs"] = r.max_batch_sequences
    else:
        base = {}
    return {**base, **r.engine_options}


def run(cfg: RLConfig, resume: bool = False) -> Path:
    out_dir, t = Path(cfg.out_dir), cfg.train
    ckpt = resume_point(out_dir, resume)
    seed_everything(t.seed)
    # threads "auto": rollout and update each get the thread count measured faster for them (small
    # decode batches often run faster on one thread; the update's matmuls on two)
    tuner, rollout_tuner = (ThreadTuner(), ThreadTuner()) if t.threads == "auto" else (None, None)
    if isinstance(t.threads, int):
        torch.set_num_threads(t.threads)
    device = pick_device()
    dtype = resolve_dtype(cfg.model.dtype, device)

    # 1. tasks: the mixture (unknown domains fail here, naming the valid ones) and held-out eval sets
    mixture = build_mixture(cfg.tasks, task_seed=t.task_seed, seed=t.seed)
    eval_sets = {s.domain: s.eval_tasks() for s in mixture.sources}

    # 2. models: policy (fp32 master weights), reference only when KL is on, the rollout engine
    tokenizer = load_tokenizer(cfg.model.path)
    policy = load_model(cfg.model.path, dtype="float32", device=device)
    if cfg.model.lora is not None:
        policy = apply_lora(policy, cfg.model.lora)
    ref = None
    if cfg.algo.kl_coef > 0:
        ref = load_model(cfg.model.path, dtype="float32", device=device).eval().requires_grad_(False)
    ref_id = model_identity(cfg.model.path) if ref is not None else None
    engine = ENGINES[cfg.rollout.engine](cfg.model.path, tokenizer, **engine_options(cfg, device))
    optimizer = build_optimizer(policy, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, t.steps * t.updates_per_step)
    b = cfg.buffer
    buffer = ReplayBuffer(b.capacity, b.per_domain_quota, b.min_score) if b.enabled else None
    save_config(cfg, out_dir)

    # 3. resume: every piece of state that crosses a step boundary
    step, bad_streak = 0, 0
    auditor = Auditor(cfg, out_dir)
    if resume and ckpt is not None:
        state = load_checkpoint(ckpt, model=policy, optimizer=optimizer, scheduler=scheduler)
        if state.get("reference") != ref_id:
            raise CheckpointError(f"{ckpt}: saved with reference model {state.get('reference')}, now {ref_id}")
        step, bad_streak = state["step"], state["bad_streak"]
        auditor.load_state_dict(state["audit"], step)
        mixture.load_state_dict(state["mixture"])
        if buffer is not None:
            buffer = ReplayBuffer.load(ckpt / "replay")
        engine.update_weights(engine_state_dict(policy), step)
        console.print(f"resuming from {ckpt} (step {step})")
    ctx = StepContext(cfg, engine, tokenizer, mixture, buffer, stop_ids=tuple(stop_ids(tokenizer)), version=step)
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)
    steps_per_epoch = cfg.rollout.temperature.steps_per_epoch or max(1, math.ceil(t.steps / 10))

    def checkpoint() -> None:
        save_checkpoint(out_dir, step, model=policy, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                        state={"mixture": mixture.state_dict(), "bad_streak": bad_streak, "reference": ref_id,
                               "audit": auditor.state_dict()},
                        config=cfg, keep_last=t.keep_last,
                        extra={"replay": buffer.save} if buffer is not None else None)

    def held_out_eval() -> dict:
        started = time.perf_counter()
        metrics = evaluate(engine, tokenizer, eval_sets, ctx.stop_ids, cfg.rollout.max_tokens)
        return {**metrics, "time/eval": time.perf_counter() - started}

    # 4. the loop
    started_run = time.perf_counter()
    with logger, progress_bar(t.steps - step, f"rl {step}->{t.steps}", enabled=cfg.logging.progress) as bar:
        if step == 0:
            first = held_out_eval()
            auditor.held_out(0, first.get("pass@1", 0.0))
            logger.log(0, first)
        while step < t.steps:
            started = time.perf_counter()
            index = step  # this step's 0-based index (step counts finished steps below)
            rollout_threads = rollout_tuner.start(index) if rollout_tuner is not None else torch.get_num_threads()
            temperature = temperature_at(step, steps_per_epoch=steps_per_epoch, total_steps=t.steps,
                                         start=cfg.rollout.temperature.start, end=cfg.rollout.temperature.end,
                                         schedule=cfg.rollout.temperature.schedule)
            ctx.verifier_errors.clear()
            groups, metrics = collect_groups(ctx, step, temperature)
            threads = tuner.start(index) if tuner is not None else torch.get_num_threads()
            generated = metrics.pop("all_groups")
            metrics.update(domain_metrics(groups, generated))
            if not groups:
                skipped = {"skipped_updates": 1, "skip_reason": "no group with signal"}
            else:
                t0 = time.perf_counter()
                samples = build_samples(groups, policy, ref, cfg, temperature, tokenizer.pad_token_id)
                t1 = time.perf_counter()
                skipped = update_policy(policy, optimizer, scheduler, samples, algo=cfg.algo,
                                        temperature=temperature, max_tokens=cfg.rollout.max_tokens,
                                        updates_per_step=t.updates_per_step,
                                        max_tokens_per_microbatch=t.max_tokens_per_microbatch,
                                        pad_id=tokenizer.pad_token_id, grad_clip=cfg.optim.grad_clip, device=device)
                metrics.update({"time/logprobs": t1 - t0, "time/update": time.perf_counter() - t1})
            t2 = time.perf_counter()
            step += 1
            engine.update_weights(engine_state_dict(policy), step)
            ctx.version = step
            audit, warnings = auditor.step(step, generated, metrics["pass_rate"])
            metrics.update(skipped)
            metrics.update(audit)
            metrics.update({"time/sync": time.perf_counter() - t2, "temperature": temperature,
                            "lr": scheduler.get_last_lr()[0], "verifier_errors": len(ctx.verifier_errors),
                            "samples": sum(tr.reward is not None for g in groups for tr in g.trajectories),
                            "unscored_samples": sum(tr.reward is None for g in groups for tr in g.trajectories)})
            if buffer is not None:
                metrics.update({"buffer/size": len(buffer), "buffer/mean_age": buffer.mean_age(step)})
            if ctx.verifier_errors:
                console.print(f"[yellow]warning:[/] step {step}: {len(ctx.verifier_errors)} verifier errors, "
                              f"e.g. {ctx.verifier_errors[0]}")
            all_skipped = metrics["skipped_updates"] >= t.updates_per_step and groups
            bad_streak = bad_streak + 1 if all_skipped and "non-finite" in metrics["skip_reason"] else 0
            out_of_time = t.max_seconds is not None and time.perf_counter() - started_run > t.max_seconds
            if step % t.eval_every == 0 or step == t.steps or out_of_time:
                metrics.update(held_out_eval())
                auditor.held_out(step, metrics.get("pass@1", 0.0))
            monitored, alerts = auditor.flush()
            metrics.update(monitored)
            for line in warnings + alerts:
                console.print(f"[yellow]warning:[/] step {step}: {line}", highlight=False)
            metrics["time/step"] = time.perf_counter() - started
            metrics["threads"], metrics["rollout_threads"] = threads, rollout_threads
            if tuner is not None:
                rollout_tuner.record(index, rollout_threads, metrics["time/rollout"])
                tuner.record(index, threads, metrics["time/step"] - metrics.get("time/eval", 0.0) - metrics["time/rollout"])
            logger.log(step, metrics)
            bar.update(1, reward=metrics.get("reward", float("nan")), pass_rate=metrics.get("pass_rate", 0.0),
                       T=temperature)
            if bad_streak:
                console.print(f"[yellow]warning:[/] step {step}: update skipped: {metrics['skip_reason']}")
            if bad_streak >= t.max_bad_steps:
                last = latest_checkpoint(out_dir)
                raise TrainingError(f"{bad_streak} steps in a row had a non-finite loss or gradient "
                                    f"({metrics['skip_reason']}); stopped at step {step}. Last checkpoint: {last}")
            if step % t.save_every == 0 or step == t.steps or out_of_time:
                checkpoint()
            if out_of_time:
                console.print(f"rl: stopping at step {step}: train.max_seconds={t.max_seconds} reached")
                break

    # 5. export
    final = export_final(policy, tokenizer, out_dir, dtype)
    console.print(f"rl: {step} steps; final model in {final}")
    return final
