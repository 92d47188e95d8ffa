"""Reinforcement learning with verifiable rewards, written out top to bottom.

    final_dir = run(cfg)                # cfg: RLConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)   # continue exactly from the newest checkpoint

One step (`_step`):
  1. temperature from the schedule (linear / cosine / constant over epochs);
  2. plan (rl/plan.py): fresh tasks drawn from the domain mixture by weight x expected signal
     (quotas, breakers, curriculum levels) and replay groups of stored successes
     (`buffer.replay_ratio` of the trajectories; rl/buffer.py says why and how);
  3. collect (rl/collect.py): `samples_per_prompt` episodes per item over the engine in lanes,
     single-turn or multi-turn (environments with tools, sandboxes: envs/), verified, rewards
     shaped, zero-signal groups dropped and backfilled (dynamic sampling), the tail carried over
     with `scheduler.close: enough` -> a StepBatch of `types.Group`s with its verifier errors;
  4. train (train/trainer.py, here or on DDP / FSDP2 ranks): the reference's logprobs (only when
     kl_coef > 0), the trainer's own when `recompute_old_logprobs`, advantages by the configured
     estimator, PPO-clip (clip-higher, dual-clip), KL and entropy terms, `updates_per_step` AdamW
     updates; every logprob at the temperature each trajectory was sampled with;
  5. sync (rl/sync.py): the new weights into the engine as version step + 1; with
     `scheduler.max_staleness >= 1` the next step's collection overlaps this update (asynchronous RL);
  6. metrics (each phase timed as time/<phase>, per-domain reward, pass rate, zero-variance
     fraction, length; what recipes/rl_audit.py records about the verifiers), held-out greedy
     pass@1 per domain and the eval suites' gates every `eval_every` steps, and a checkpoint every
     `save_every` steps holding policy, optimizer, LR schedule, replay buffer, mixture cursors, RNG
     states, the reference model's identity and the scheduler (pass rates, costs, breakers, levels,
     the re-queued items). Nothing else carries state across steps (sampling seeds derive from
     (seed, item serial), draws from (seed, step, attempt)), so with `scheduler.close: all` (the
     default) a resumed run repeats an uninterrupted one exactly.

The rollout engine is in this process or behind Ray actors (`cluster.backend: ray`, scale/); the
trainer and the engine share nothing but the weights passed at sync.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from posttrain.algos.temperature import temperature_at
from posttrain.checkpoint import load_checkpoint, resume_point, save_checkpoint
from posttrain.config.base import save_config
from posttrain.config.rl import RLConfig
from posttrain.core.errors import CheckpointError, gate_failure
from posttrain.core.hf import load_tokenizer, pick_device, resolve_dtype
from posttrain.engine.weight_sync import make_transport
from posttrain.eval.evaluate import evaluate_in_loop
from posttrain.eval.in_loop import SuiteEvals
from posttrain.eval.run import stop_ids
from posttrain.recipes.rl_audit import Auditor
from posttrain.recipes.rl_metrics import BadSteps, Threads, domain_metrics, staleness_metrics, step_record
from posttrain.rl.anchors import Anchors
from posttrain.rl.buffer import ReplayBuffer
from posttrain.rl.collect import Collector
from posttrain.rl.plan import Planner, make_curricula
from posttrain.rl.scoring import StepBatch, StepContext
from posttrain.rl.sync import WeightSync
from posttrain.scale.backend import install_sandbox_for, make_engine_for
from posttrain.tasks.mixture import build_mixture
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.telemetry.timer import PhaseTimer
from posttrain.train.run import export_final, seed_everything
from posttrain.train.trainer import Trainer, make_trainer
from posttrain.train.weights import model_identity

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Run:
    """What the loop works with; `step` is the number of steps done."""
    cfg: RLConfig
    out_dir: Path
    tokenizer: Any
    trainer: Trainer
    engine: Any
    mixture: Any
    eval_sets: dict
    buffer: ReplayBuffer | None
    ctx: StepContext
    planner: Planner
    collector: Collector
    sync: WeightSync
    auditor: Auditor
    suites: SuiteEvals
    logger: MetricsLogger
    threads: Threads
    bad: BadSteps
    ref_id: str | None
    deadline: float | None  # train.max_seconds as a perf_counter time
    build: dict  # what building the tasks cost (logged at step 0)
    device: Any
    anchors: Anchors | None = None  # the start model's answers rehearsed each step (rl/anchors.py)
    step: int = 0
    prefetched: StepBatch | None = None  # asynchronous RL: the next step's batch, rolled out, not trained

    def temperature(self, step: int) -> float:
        s, t = self.cfg.rollout.temperature, self.cfg.train
        return temperature_at(step, steps_per_epoch=s.steps_per_epoch or max(1, math.ceil(t.steps / 10)),
                              total_steps=t.steps, start=s.start, end=s.end, schedule=s.schedule)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


def run(cfg: RLConfig, resume: bool = False) -> Path:
    with contextlib.ExitStack() as stack:  # the distributed trainer's ranks stop however the run ends
        r = _build(cfg, resume, stack)
        t = cfg.train
        with r.logger, r.collector, progress_bar(t.steps - r.step, f"rl {r.step}->{t.steps}",
                                                 enabled=cfg.logging.progress) as bar:
            if r.step == 0:
                timer = PhaseTimer()
                first = _held_out_eval(r, timer)
                r.suites.maybe_save_best(0, first, r.trainer.full_model(), r.tokenizer)
                r.logger.log(0, {**first, **timer.metrics(), **r.build})
            while r.step < t.steps:
                stop = _step(r, bar)
                if isinstance(stop, Path):
                    return stop
                if stop:
                    break
        final = export_final(r.trainer.full_model(), r.tokenizer, r.out_dir, resolve_dtype(cfg.model.dtype, r.device))
        console.print(f"rl: {r.step} steps; final model in {final}")
        return final


def _step(r: Run, bar) -> bool | Path:
    """One step: plan -> collect -> train -> sync -> metrics, eval, checkpoint. True: stop here (out
    of time); a Path: the model a failed gate rolled back to."""
    cfg, t, timer, index = r.cfg, r.cfg.train, PhaseTimer(), r.step
    version = r.step + 1  # what the weights become
    with timer("step"):
        temperature = r.temperature(r.step)
        r.threads.for_phase("rollout", index)  # (asynchronous RL rolled this step out during the last update)
        batch, r.prefetched = r.prefetched or r.collector.collect(r.planner.plan(r.step), temperature), None
        r.threads.for_phase("update", index)
        if cfg.scheduler.max_staleness > 0 and version < t.steps and not r.out_of_time():
            rollout = r.collector.collecting(r.planner.plan(version), r.temperature(version))  # by these weights
            r.prefetched, trained = r.sync.overlapped(lambda: r.trainer.train_step(_trained(r, batch, index), index),
                                                      r.trainer.engine_weights, version, rollout)
        else:
            trained = r.trainer.train_step(_trained(r, batch, index), index)
            weights = r.trainer.engine_weights()
            with timer("sync"):
                r.sync.push(weights, version)
        r.step = version
        sample_stats = domain_metrics(batch.kept, batch.generated)
        audit, warnings = r.auditor.step(r.step, batch.generated, sample_stats["pass_rate"])
        out_of_time = r.out_of_time()
        evaluated = _held_out_eval(r, timer) if r.step % t.eval_every == 0 or r.step == t.steps or out_of_time else {}
        verdict = r.suites.check(r.step, evaluated)
        r.suites.maybe_save_best(r.step, evaluated, r.trainer.full_model(), r.tokenizer, verdict)
        monitored, alerts = r.auditor.flush()
    metrics = step_record(r.step, batch, sample_stats, trained, staleness_metrics(batch.kept, index), audit,
                          evaluated, monitored, timer.metrics(), buffer=r.buffer, temperature=temperature,
                          lr=r.trainer.scheduler.get_last_lr()[0])
    metrics.update(r.threads.record(index, metrics))
    errors = [f"{len(batch.verifier_errors)} verifier errors, e.g. {batch.verifier_errors[0]}"] if batch.verifier_errors else []
    warn(r.step, errors + list(batch.events) + warnings + alerts
         + [f"gate {row['name']} failed at step {r.step}" for row in verdict.failed])
    r.logger.log(r.step, metrics)
    bar.update(1, reward=metrics.get("reward", float("nan")), pass_rate=metrics.get("pass_rate", 0.0), T=temperature)
    r.bad.observe(r.step, metrics, t.updates_per_step, bool(batch.kept), r.out_dir)
    if r.step % t.save_every == 0 or r.step == t.steps or out_of_time or verdict.action:
        _checkpoint(r)
    if verdict.action == "stop":
        raise gate_failure(verdict.failed)
    if verdict.action == "rollback":
        final = r.suites.rollback()
        console.print(f"rl: gate failed at step {r.step}: rolled back to the best model (step "
                      f"{r.suites.best['step']}) in {final}")
        return final
    if out_of_time:
        console.print(f"rl: stopping at step {r.step}: train.max_seconds={t.max_seconds} reached")
    return out_of_time


def _trained(r: Run, batch: StepBatch, index: int) -> list:
    """The groups step `index` trains: the batch's, plus its anchors when it has any group to train."""
    kept = list(batch.kept)
    return kept + r.anchors.for_step(index) if kept and r.anchors is not None else kept


def _build(cfg: RLConfig, resume: bool, stack: contextlib.ExitStack) -> Run:
    """Tasks, models, engine, scheduler; with `resume` every piece of state that crosses a step
    boundary, from the newest checkpoint."""
    out_dir, t = Path(cfg.out_dir), cfg.train
    ckpt = resume_point(out_dir, resume)
    seed_everything(t.seed)
    threads = Threads(t.threads)
    device = pick_device()
    # tasks: the mixture (unknown domains fail here, naming the valid ones) and held-out eval sets
    built = time.perf_counter()
    mixture = build_mixture(cfg.tasks, task_seed=t.task_seed, seed=t.seed)
    eval_sets = {s.domain: s.eval_tasks() for s in mixture.sources}
    build = build_metrics(time.perf_counter() - built)
    # models: policy (fp32 master weights) and reference only when KL is on, here or on the
    # distributed trainer's ranks (this process being rank 0); the rollout engine (scale/: Ray or here)
    tokenizer = load_tokenizer(cfg.model.path)
    trainer = make_trainer(cfg, pad_id=tokenizer.pad_token_id, device=device)
    stack.callback(trainer.close)
    ref_id = model_identity(cfg.model.path) if trainer.ref is not None else None
    engine = make_engine_for(cfg, tokenizer, device)
    install_sandbox_for(cfg)
    if cfg.reward.sandbox_url:  # a remote sandbox for the code verifier (sandbox/client.py: retries, then an error)
        from posttrain.sandbox.client import RemoteSandbox
        from posttrain.sandbox.default import set_sandbox

        set_sandbox(RemoteSandbox(cfg.reward.sandbox_url, retries=cfg.reward.sandbox_retries,
                                  backoff=cfg.reward.sandbox_backoff_s))
    b = cfg.buffer
    buffer = ReplayBuffer(b.capacity, b.per_domain_quota, b.min_score) if b.enabled else None
    if buffer is not None and b.load_from:
        buffer.seeded_from(b.load_from)
    save_config(cfg, out_dir)

    step, bad = 0, BadSteps(t.max_bad_steps)
    auditor = Auditor(cfg, out_dir)
    suites = SuiteEvals(cfg.eval, out_dir, tokenizer, stop_ids(tokenizer))  # bad suites fail here
    resuming = resume and ckpt is not None
    if resuming:
        state = load_checkpoint(ckpt, model=trainer.model, optimizer=trainer.optimizer, scheduler=trainer.scheduler)
        if state.get("reference") != ref_id:
            raise CheckpointError(f"{ckpt}: saved with reference model {state.get('reference')}, now {ref_id}")
        step, bad.streak = state["step"], state["bad_streak"]
        if trainer.has_state:  # every rank's model, optimizer and schedule
            trainer.load(ckpt / "trainer")
        auditor.load_state_dict(state["audit"], step)
        suites.load_state_dict(state.get("suites"))
        mixture.load_state_dict(state["mixture"])
        if buffer is not None:
            buffer = ReplayBuffer.load(ckpt / "replay")
    ctx = StepContext(cfg, engine, tokenizer, mixture, buffer, stop_ids=tuple(stop_ids(tokenizer)))
    planner = Planner(ctx, make_curricula(cfg.tasks, mixture))
    collector = Collector(ctx, planner)
    sync = WeightSync(ctx, collector, make_transport(cfg.cluster.weight_sync, out_dir), cfg.cluster.weight_sync.pause)
    stack.callback(sync.close)
    prefetched, anchors = None, None
    if cfg.anchor.tasks:  # before any update: the engine holds the start weights
        anchors = (Anchors.load(out_dir, cfg.anchor, t.seed) if resuming else
                   Anchors.build(cfg.anchor, engine, tokenizer, stop_ids(tokenizer), cfg.rollout.max_tokens, t.seed,
                                 out_dir))
        build.update(anchors.summary())
    if resuming:
        sync.load(trainer.engine_weights(), step)
        console.print(f"resuming from {ckpt} (step {step})")
        prefetched = planner.load(ckpt / "scheduler", step)
    else:
        planner.ledger.fresh_run()
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)
    deadline = None if t.max_seconds is None else time.perf_counter() + t.max_seconds
    return Run(cfg, out_dir, tokenizer, trainer, engine, mixture, eval_sets, buffer, ctx, planner, collector, sync,
               auditor, suites, logger, threads, bad, ref_id, deadline, build, device, anchors, step, prefetched)


def _checkpoint(r: Run) -> None:
    def scheduler(directory: Path) -> None:
        r.collector.drain()  # in-flight items re-queued: the saved state is whole
        r.planner.save(directory, r.prefetched)

    extra = {"scheduler": scheduler, **({"replay": r.buffer.save} if r.buffer is not None else {}),
             **({"trainer": r.trainer.save} if r.trainer.has_state else {})}
    save_checkpoint(r.out_dir, r.step, model=r.trainer.full_model(), tokenizer=r.tokenizer,
                    optimizer=r.trainer.optimizer, scheduler=r.trainer.scheduler,
                    state={"mixture": r.mixture.state_dict(), "bad_streak": r.bad.streak, "reference": r.ref_id,
                           "audit": r.auditor.state_dict(), "suites": r.suites.state_dict()},
                    config=r.cfg, keep_last=r.cfg.train.keep_last, extra=extra)


def _held_out_eval(r: Run, timer: PhaseTimer) -> dict:
    with timer("eval"):
        metrics = evaluate_in_loop(r.engine, r.tokenizer, r.eval_sets, r.ctx.stop_ids, r.cfg.rollout.max_tokens)
        metrics.update(r.suites.evaluate(r.engine, r.step))
        # a resumed run starts after this eval with an empty prefix cache: so does this one
        # (with bf16 / int8 rollout weights, reused prefix K/V differ in the last bits)
        reset = getattr(r.engine, "reset_prefix_cache", None)
        if reset is not None:
            reset()
    r.auditor.held_out(r.step, metrics.get("pass@1", 0.0))
    return metrics


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


def warn(step: int, lines: list[str]) -> None:
    for line in lines:
        console.print(f"[yellow]warning:[/] step {step}: {line}", highlight=False)
