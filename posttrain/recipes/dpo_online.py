"""Online / iterative DPO: the policy makes its own pairs, a verifier or a reward model ranks them.

    final_dir = run_online(cfg)         # cfg: DPOConfig with `online` set (posttrain dpo ... online.rounds=4)

Each round r of `online.rounds`:
1. the engine (the built-in paged one, synced to the current weights) samples, through the episode
   loop every caller shares (envs/rollout.py), `samples_per_prompt` completions for each of
   `prompts_per_round` tasks of `online.tasks`
   (a task mixture exactly as `rl` takes it: reasoning-gym, sources, JSONL; a domain whose
   verifiers name `reward_model` is ranked by a trained reward model = RLHF-style DPO);
2. each task's verifiers score them (the raw task score, verifiers/registry.py); the best and the
   worst completion become a pair when their scores differ (a task whose samples all agree gives
   none);
3. the reference for the round's pairs is the policy at the start of the round (iterative DPO:
   the reference moves with the policy, so no second model is held), its logprobs computed once;
4. `steps_per_round` optimizer steps of the configured paired loss on those pairs
   (`train.pairs_per_step` a step, cycling), as in offline DPO;
5. a checkpoint at the end of every round; `--resume` continues at the next round.

Metrics per step are those of offline DPO, plus per round online/pairs, online/score (the mean
raw score of every sample: the policy's own reward, rising as it learns) and online/pass_rate.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from posttrain.checkpoint import load_checkpoint, resume_point, save_checkpoint
from posttrain.config.base import save_config
from posttrain.config.pref import DPOConfig
from posttrain.eval.run import CORRECT, stop_ids
from posttrain.recipes.pref_loop import BothFallAlert, PairStep, console, epoch_batches, logps_of, start, trainable
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.core.hf import load_model
from posttrain.train.optim import build_optimizer, build_scheduler, clip_grad_norm
from posttrain.train.pair_forward import pair_items
from posttrain.train.pairs import TokenPair
from posttrain.train.run import export_final
from posttrain.core.types import SamplingParams
from posttrain.envs.rollout import rollout
from posttrain.verifiers.registry import run_verifiers_many, task_score


def sample_pairs(engine, tokenizer, tasks, *, samples: int, max_tokens: int, temperature: float, seed: int,
                 stops: list[int], version: int = 0) -> tuple[list[TokenPair], dict]:
    """Sample (the episode loop, envs/rollout.py: sample k of task i seeded seed * 1_000_003 + i * samples + k),
    score and pair: (pairs, round metrics). A pair is two one-turn completions of a task (the prompt shared)."""
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, stop_token_ids=tuple(stops))
    seeds = [seed * 1_000_003 + i * samples for i in range(len(tasks))]
    groups = rollout(engine, tokenizer, tasks, [samples] * len(tasks), params, seeds, version)
    pairs, scores = [], []
    for task, trajs in zip(tasks, groups):
        judged = [task_score(s, task) if t.token_ids and t.turns == 1 else None
                  for t, (s, _) in zip(trajs, run_verifiers_many(task, trajs))]
        ranked = [(v, k) for k, v in enumerate(judged) if v is not None]
        scores += [v for v, _ in ranked]
        if len(ranked) < 2:
            continue
        best, worst = max(ranked), min(ranked, key=lambda x: (x[0], -x[1]))
        if best[0] > worst[0]:
            b, w = trajs[best[1]], trajs[worst[1]]
            pairs.append(TokenPair(tuple(b.token_ids[:b.prompt_len]), tuple(b.token_ids[b.prompt_len:]),
                                   tuple(w.token_ids[w.prompt_len:]), where=f"{task.id}#{best[1]}>{worst[1]}"))
    mean = sum(scores) / len(scores) if scores else 0.0
    return pairs, {"online/pairs": len(pairs), "online/score": mean,
                   "online/pass_rate": sum(s >= CORRECT for s in scores) / max(len(scores), 1)}


def run_online(cfg: DPOConfig, resume: bool = False) -> Path:
    from posttrain.engine.registry import ENGINES
    from posttrain.tasks.mixture import build_mixture
    from posttrain.train.weights import engine_state_dict

    on, t, o = cfg.online, cfg.train, cfg.optim
    if cfg.algo.loss == "kto":
        raise ValueError("online DPO makes pairs: algo.loss=kto needs offline unpaired data")
    out_dir = Path(cfg.out_dir)
    ckpt = resume_point(out_dir, resume)
    s = start(cfg)
    device, dtype, tokenizer, pad_id = s.device, s.dtype, s.tokenizer, s.pad_id
    mixture = build_mixture(on.tasks, task_seed=on.task_seed, seed=t.seed)  # bad task config fails first
    model = trainable(load_model(cfg.model.path, dtype="float32", device=device), cfg.model)
    total_steps = on.rounds * on.steps_per_round
    optimizer = build_optimizer(model, o)
    scheduler = build_scheduler(optimizer, o, total_steps)
    save_config(cfg, out_dir)
    start_round = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler)
        start_round = state["round"] + 1
        mixture.load_state_dict(state["mixture"])
        console.print(f"resuming from {ckpt} (round {start_round} of {on.rounds})")
    engine = ENGINES["paged"](cfg.model.path, tokenizer, dtype=cfg.model.dtype, device=device,
                              max_num_seqs=on.prompts_per_round * on.samples_per_prompt)
    stops = stop_ids(tokenizer)
    alert = BothFallAlert(cfg.alert_both_fall)
    step = start_round * on.steps_per_round
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)
    bar_ctx = progress_bar(total_steps - step, f"dpo online {step}->{total_steps}", enabled=cfg.logging.progress)
    with logger, bar_ctx as bar:
        for r in range(start_round, on.rounds):
            engine.update_weights(engine_state_dict(model), r)
            tasks = mixture.sample(on.prompts_per_round, r)
            pairs, round_metrics = sample_pairs(engine, tokenizer, tasks, samples=on.samples_per_prompt,
                                                max_tokens=on.max_tokens, temperature=on.temperature,
                                                seed=t.seed * 7919 + r, stops=stops, version=r)
            if not pairs:
                console.print(f"[yellow]warning:[/] round {r}: every task's samples scored alike; no pairs, no update")
            else:
                ref = (None if cfg.algo.reference_free else
                       logps_of(model, pair_items(pairs), max_tokens=t.max_tokens_per_microbatch, pad_id=pad_id,
                                share_prompt=t.packing, paired=True))
                step_fn = PairStep(cfg, model, pairs, ref, device, dtype, pad_id)
                batches = [b for e in range(math.ceil(on.steps_per_round * t.pairs_per_step / len(pairs)) + 1)
                           for b in epoch_batches(len(pairs), t.pairs_per_step, t.seed + r, e)]
            for k in range(on.steps_per_round):
                metrics = dict(round_metrics, round=r)
                if pairs:
                    started = time.perf_counter()
                    model.train()
                    metrics.update(step_fn(batches[k]))
                    grad_norm = clip_grad_norm(model, o.grad_clip) if math.isfinite(metrics["loss"]) else float("nan")
                    if math.isfinite(grad_norm):
                        optimizer.step()
                    else:
                        metrics["skipped_update"] = 1
                    optimizer.zero_grad(set_to_none=True)
                    metrics.update(grad_norm=grad_norm, step_seconds=time.perf_counter() - started)
                metrics["lr"] = scheduler.get_last_lr()[0]
                scheduler.step()
                step += 1
                alert(step, metrics)
                logger.log(step, metrics)
                bar.update(1, loss=metrics.get("loss", float("nan")))
            save_checkpoint(out_dir, step, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                            state={"round": r, "mixture": mixture.state_dict()}, config=cfg, keep_last=t.keep_last)
    final = export_final(model, tokenizer, out_dir, dtype)
    console.print(f"dpo online: {on.rounds} rounds, {step} steps; final model in {final}")
    return final
