"""Reinforcement learning with verifiable rewards, written out top to bottom.

    final_dir = run(cfg)                # cfg: RLConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)   # continue exactly from the newest checkpoint

One step:
  1. temperature from the schedule (linear / cosine / constant over epochs);
  2. rollout + verify (posttrain/rl/: the step's work items): fresh tasks drawn from the
     domain mixture by weight x expected signal (quotas, breakers, curriculum levels) and replay
     groups of stored successes (`buffer.replay_ratio` of the trajectories; buffer.py says
     why and how), `samples_per_prompt` episodes each over the engine in lanes, verified,
     rewards shaped, zero-signal groups dropped and backfilled (dynamic sampling), the tail
     carried over with `scheduler.close: enough` -> `types.Group`s;
  3-5. `train_step` (train/step.py) on those groups: the reference's logprobs (only when
     kl_coef > 0: no reference model is loaded otherwise), the trainer's own when
     `recompute_old_logprobs`, advantages by the configured estimator, then PPO-clip
     (clip-higher, dual-clip), KL and entropy terms, `updates_per_step` AdamW updates; every
     logprob at the temperature each trajectory was sampled with;
  6. sync the new weights to the engine (version = step);
  7. metrics (each phase timed as time/<phase>, per-domain reward, pass rate,
     zero-variance fraction, length; what recipes/rl_audit.py records about the verifiers:
     rollout log, disagreement, reward-hacking alerts), held-out greedy pass@1 per domain every
     `eval_every` steps, and a checkpoint every `save_every` steps holding policy,
     optimizer, scheduler, replay buffer, mixture cursors, RNG states and the reference
     model's identity and the scheduler (pass rates, costs, breakers, levels, the re-queued
     items). Nothing else carries state across steps (sampling seeds derive from (seed, item
     serial), draws from (seed, step, attempt)), so with `scheduler.close: all` (the default) a
     resumed run repeats an uninterrupted one exactly.

Simplifications, said plainly: single-turn tasks only (multi-turn environments plug in
at `envs/`); the trainer and the engine live in one process and share nothing but the
weights passed at sync.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

from rich.console import Console

from posttrain.algos.temperature import temperature_at
from posttrain.rl.buffer import ReplayBuffer
from posttrain.checkpoint import load_checkpoint, resume_point, save_checkpoint
from posttrain.config.base import save_config
from posttrain.config.rl import RLConfig
from posttrain.core.errors import CheckpointError, gate_failure
from posttrain.eval.run import stop_ids
from posttrain.eval.in_loop import SuiteEvals
from posttrain.eval.evaluate import evaluate_in_loop
from posttrain.recipes.rl_audit import Auditor
from posttrain.recipes.rl_metrics import domain_metrics
from posttrain.recipes.rl_support import BadSteps, Threads, TimeCap, staleness_metrics, step_metrics, warn
from posttrain.scale import install_sandbox_for, make_engine_for
from posttrain.engine.weight_sync import make_transport, receive_and_swap
from posttrain.rl.collect import Scheduler, make_curricula
from posttrain.rl.scoring import StepContext, replay_metrics
from posttrain.tasks.mixture import build_mixture
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.telemetry.timer import PhaseTimer
from posttrain.core.hf import load_model, load_tokenizer, pick_device, resolve_dtype
from posttrain.train.policy import load_policy
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.run import export_final, seed_everything
from posttrain.train.step import train_step
from posttrain.train.weights import engine_state_dict, model_identity

console = Console(stderr=True, highlight=False, soft_wrap=True)


def engine_options(cfg: RLConfig, device) -> dict:
    """The rollout engine's options: the model's dtype and device, the batch limit under each
    engine's own name, then `rollout.engine_options` (which win)."""
    r = cfg.rollout
    base: dict = {"dtype": cfg.model.dtype, "device": device}
    if r.engine == "hf":
        base["max_batch_sequences"] = r.max_batch_sequences
    elif r.engine == "paged":
        base["max_num_seqs"] = r.max_batch_sequences
        base["weights"] = r.weights
    else:
        base = {}
    return {**base, **r.engine_options}


def build_metrics(seconds: float) -> dict[str, float]:
    """What building the domains' tasks cost (logged at step 0 and said in one line): per reasoning-gym
    domain the seconds spent generating items and the items skipped because their generator raised."""
    from posttrain.domains.reasoning_gym.build import build_report

    report = build_report()
    skipped = {d: r["skipped"] for d, r in report.items() if r["skipped"]}
    slow = sorted(report.items(), key=lambda kv: -kv[1]["seconds"])[:3]
    slowest = ", ".join(f"{d} {r['seconds']:.1f}s" for d, r in slow)
    console.print(f"tasks: built in {seconds:.1f}s" + (f"; slowest {slowest}" if slow else "")
                  + (f"; items skipped (their generator raised): {skipped}" if skipped else ""))
    out = {"time/build_tasks": seconds}
    for d, r in report.items():
        out[f"build/seconds/{d}"] = float(r["seconds"])
        out[f"build/skipped_items/{d}"] = float(r["skipped"])
    return out


def run(cfg: RLConfig, resume: bool = False) -> Path:
    with contextlib.ExitStack() as stack:  # the distributed trainer's ranks stop however the run ends
        return _run(cfg, resume, stack)


def _run(cfg: RLConfig, resume: bool, stack: contextlib.ExitStack) -> Path:
    out_dir, t = Path(cfg.out_dir), cfg.train
    ckpt = resume_point(out_dir, resume)
    seed_everything(t.seed)
    threads = Threads(t.threads)
    device = pick_device()
    dtype = resolve_dtype(cfg.model.dtype, device)

    # 1. tasks: the mixture (unknown domains fail here, naming the valid ones) and held-out eval sets
    built = time.perf_counter()
    mixture = build_mixture(cfg.tasks, task_seed=t.task_seed, seed=t.seed)
    eval_sets = {s.domain: s.eval_tasks() for s in mixture.sources}
    build = build_metrics(time.perf_counter() - built)

    # 2. models: policy (fp32 master weights), reference only when KL is on, the rollout engine
    #    (cluster.trainer ddp / fsdp2: the trainer's ranks, this process being rank 0: posttrain/train/distributed/)
    tokenizer = load_tokenizer(cfg.model.path)
    trainer = host = None
    if cfg.cluster.trainer != "single":
        from posttrain.train.distributed.rl_worker import spawn_trainer_ranks
        trainer = spawn_trainer_ranks(cfg, total_updates=t.steps * t.updates_per_step,
                                      pad_id=tokenizer.pad_token_id, device=device)
        stack.callback(trainer.close)
        policy, ref, optimizer, scheduler = trainer.model, trainer.ref, trainer.optimizer, trainer.scheduler
        if trainer.policy.kind == "fsdp2":  # rank 0's shards: a whole copy for checkpoints and export
            host = load_model(cfg.model.path, dtype="float32", device=device)
    else:
        policy, ref = load_policy(cfg, device)
        optimizer = build_optimizer(policy, cfg.optim)
        scheduler = build_scheduler(optimizer, cfg.optim, t.steps * t.updates_per_step)
    ref_id = model_identity(cfg.model.path) if ref is not None else None
    # cluster.backend=ray: rollout workers and sandbox workers are Ray actors (posttrain/scale/)
    engine = make_engine_for(cfg, tokenizer, device)
    install_sandbox_for(cfg)
    if cfg.reward.sandbox_url:  # a remote sandbox for the code verifier (sandbox/client.py: retries, then an error)
        from posttrain.sandbox.client import RemoteSandbox
        from posttrain.sandbox.default import set_sandbox

        set_sandbox(RemoteSandbox(cfg.reward.sandbox_url, retries=cfg.reward.sandbox_retries,
                                  backoff=cfg.reward.sandbox_backoff_s))

    def whole_model():
        """The policy as one plain model (FSDP2: gathered into `host`)."""
        if host is not None:
            host.load_state_dict(trainer.full_state_dict())
            return host
        return policy

    def engine_weights() -> dict:
        return trainer.full_state_dict() if host is not None else engine_state_dict(policy)
    b = cfg.buffer
    buffer = ReplayBuffer(b.capacity, b.per_domain_quota, b.min_score) if b.enabled else None
    if buffer is not None and b.load_from:
        buffer.seeded_from(b.load_from)
    save_config(cfg, out_dir)

    # 3. resume: every piece of state that crosses a step boundary
    step, bad = 0, BadSteps(t.max_bad_steps)
    auditor = Auditor(cfg, out_dir)
    suites = SuiteEvals(cfg.eval, out_dir, tokenizer, stop_ids(tokenizer))  # bad suites fail here
    if resume and ckpt is not None:
        state = load_checkpoint(ckpt, model=policy, optimizer=optimizer, scheduler=scheduler)
        if state.get("reference") != ref_id:
            raise CheckpointError(f"{ckpt}: saved with reference model {state.get('reference')}, now {ref_id}")
        step, bad.streak = state["step"], state["bad_streak"]
        if trainer is not None:  # every rank's model, optimizer and schedule
            trainer.load(ckpt / "trainer")
        auditor.load_state_dict(state["audit"], step)
        suites.load_state_dict(state.get("suites"))
        mixture.load_state_dict(state["mixture"])
        if buffer is not None:
            buffer = ReplayBuffer.load(ckpt / "replay")
        engine.update_weights(engine_weights(), step)
        console.print(f"resuming from {ckpt} (step {step})")
    ctx = StepContext(cfg, engine, tokenizer, mixture, buffer, stop_ids=tuple(stop_ids(tokenizer)), version=step)
    sched = Scheduler(ctx, make_curricula(cfg.tasks, mixture))
    if resume and ckpt is not None:
        sched.load(ckpt / "scheduler", step)
    elif sched.items_log.exists():
        sched.items_log.unlink()  # a fresh run in a used out_dir
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)
    steps_per_epoch = cfg.rollout.temperature.steps_per_epoch or max(1, math.ceil(t.steps / 10))
    staleness, sync_pause = cfg.scheduler.max_staleness, cfg.cluster.weight_sync.pause
    transport = make_transport(cfg.cluster.weight_sync, out_dir)
    schedule = cfg.rollout.temperature

    def checkpoint() -> None:
        extra = {"scheduler": sched.save, **({"replay": buffer.save} if buffer is not None else {}),
                 **({"trainer": trainer.save} if trainer is not None else {})}
        save_checkpoint(out_dir, step, model=whole_model(), tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                        state={"mixture": mixture.state_dict(), "bad_streak": bad.streak, "reference": ref_id,
                               "audit": auditor.state_dict(), "suites": suites.state_dict()},
                        config=cfg, keep_last=t.keep_last,
                        extra=extra)

    def held_out_eval(timer: PhaseTimer) -> dict:
        with timer("eval"):
            metrics = evaluate_in_loop(engine, tokenizer, eval_sets, ctx.stop_ids, cfg.rollout.max_tokens)
            metrics.update(suites.evaluate(engine, step))
            # a resumed run starts after this eval with an empty prefix cache: so does this one
            # (with bf16 / int8 rollout weights, reused prefix K/V differ in the last bits)
            reset = getattr(engine, "reset_prefix_cache", None)
            if reset is not None:
                reset()
        auditor.held_out(step, metrics.get("pass@1", 0.0))
        return metrics

    # 4. the loop: each phase timed as time/<phase>
    cap = TimeCap(t.max_seconds)
    with logger, sched, progress_bar(t.steps - step, f"rl {step}->{t.steps}", enabled=cfg.logging.progress) as bar:
        if step == 0:
            timer = PhaseTimer()
            first = held_out_eval(timer)
            suites.maybe_save_best(0, first, whole_model(), tokenizer)
            logger.log(0, {**first, **timer.metrics(), **build})
        while step < t.steps:
            timer, index = PhaseTimer(), step  # index: this step's 0-based number
            with timer("step"):
                temperature = temperature_at(step, steps_per_epoch=steps_per_epoch, total_steps=t.steps,
                                             start=schedule.start, end=schedule.end, schedule=schedule.schedule)
                ctx.verifier_errors.clear()
                threads.for_phase("rollout", index)
                # rollout + verify, timed inside; asynchronous RL rolled this step out during the last update
                batch = sched.prefetched or sched.run_step(step, temperature)
                sched.prefetched = None
                threads.for_phase("update", index)

                def update(batch=batch, version=step):
                    if trainer is not None:
                        out = trainer.train_step(batch.kept, version) if batch.kept else {"skipped_updates": 1}
                    else:
                        out = train_step(policy, ref, optimizer, scheduler, batch.kept, cfg,
                                         pad_id=tokenizer.pad_token_id, device=device, version=version)
                    transport.send(engine_weights(), version + 1)
                    return out, transport, version + 1

                if staleness > 0 and step + 1 < t.steps and not cap.reached():
                    # asynchronous: the next step's rollout (by these weights: staleness 1) overlaps this update
                    nxt = temperature_at(step + 1, steps_per_epoch=steps_per_epoch, total_steps=t.steps,
                                         start=schedule.start, end=schedule.end, schedule=schedule.schedule)
                    sched.prefetched, trained = sched.run_step_overlapped(step + 1, nxt, update, sync_pause)
                    trained.update(sched.overlap)
                    step += 1
                else:
                    trained, _, _ = update()
                    with timer("sync"):
                        step += 1
                        receive_and_swap(engine, transport, step)
                        ctx.version = step
                trained.update(staleness_metrics(batch.kept, step - 1))
                sample_stats = domain_metrics(batch.kept, batch.generated)
                audit, warnings = auditor.step(step, batch.generated, sample_stats["pass_rate"])
                out_of_time = cap.reached()
                evaluated = held_out_eval(timer) if step % t.eval_every == 0 or step == t.steps or out_of_time else {}
                verdict = suites.check(step, evaluated)
                suites.maybe_save_best(step, evaluated, whole_model(), tokenizer, verdict)
                monitored, alerts = auditor.flush()
            metrics = step_metrics(
                batch.stats, sample_stats, replay_metrics(batch.kept, step), trained,
                audit, evaluated, monitored, timer.metrics(),
                temperature=temperature, lr=scheduler.get_last_lr()[0], verifier_errors=len(ctx.verifier_errors),
                samples=sum(tr.reward is not None for g in batch.kept for tr in g.trajectories),
                unscored_samples=sum(tr.reward is None for g in batch.kept for tr in g.trajectories),
                **({"buffer/size": len(buffer), "buffer/mean_age": buffer.mean_age(step)} if buffer is not None else {}),
            )
            metrics.update(threads.record(index, metrics))
            if ctx.verifier_errors:
                warn(step, [f"{len(ctx.verifier_errors)} verifier errors, e.g. {ctx.verifier_errors[0]}"])
            warn(step, sched.events + warnings + alerts + [f"gate {r['name']} failed at step {step}" for r in verdict.failed])
            logger.log(step, metrics)
            bar.update(1, reward=metrics.get("reward", float("nan")), pass_rate=metrics.get("pass_rate", 0.0),
                       T=temperature)
            bad.observe(step, metrics, t.updates_per_step, bool(batch.kept), out_dir)
            if step % t.save_every == 0 or step == t.steps or out_of_time or verdict.action:
                checkpoint()
            if verdict.action == "stop":
                raise gate_failure(verdict.failed)
            if verdict.action == "rollback":
                final = suites.rollback()
                console.print(f"rl: gate failed at step {step}: rolled back to the best model (step "
                              f"{suites.best['step']}) in {final}")
                return final
            if out_of_time:
                console.print(f"rl: stopping at step {step}: train.max_seconds={t.max_seconds} reached")
                break

    # 5. export
    final = export_final(whole_model(), tokenizer, out_dir, dtype)
    console.print(f"rl: {step} steps; final model in {final}")
    return final
