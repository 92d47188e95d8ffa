"""Supervised fine-tuning, written out top to bottom.

    final_dir = run(cfg)                # cfg: SFTConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)   # continue from the newest complete checkpoint

1. load chat data (JSONL / hf: / gym:), hold out eval, tokenize with loss on assistant
   tokens only, pack (first-fit decreasing into rows of `row_tokens`) and cut into
   micro-batches of at most `max_tokens_per_microbatch` tokens -- once, from the seed;
2. load the model (fp32 master weights; bf16 autocast on GPU), optional LoRA and
   gradient checkpointing;
3. each epoch visits the micro-batches in an order drawn from (seed, epoch); one optimizer
   step takes `microbatches_per_step` of them, and its loss is the token-weighted mean over
   all their loss tokens (exact gradient accumulation);
4. a non-finite loss or grad norm skips the update and says why; AdamW, warmup + decay,
   grad clipping;
5. metrics.jsonl every step, eval loss every `eval_every` steps (and at steps 0 and last),
   checkpoints every `save_every` steps and at the end with the data cursor, so a resumed
   run reproduces an uninterrupted one step for step;
6. out_dir/final: a plain HF model dir (LoRA merged) with the tokenizer.
"""

from __future__ import annotations

import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from rich.console import Console

from posttrain.algos.sft import sft_loss_sum
from posttrain.checkpoint import load_checkpoint, resume_point, save_checkpoint
from posttrain.config.base import save_config
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import CheckpointError, DataError, gate_failure
from posttrain.domains.reasoning_gym.source import sft_examples
from posttrain.eval.run import stop_ids
from posttrain.eval.in_loop import SuiteEvals
from posttrain.tasks.episode_sft import episode_demos
from posttrain.tasks.sft_data import count_spec, task_demos
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.train.data import ChatData, from_records, load_chat_examples, split_eval
from posttrain.train.lora import apply_lora, trainable_parameters
from posttrain.core.hf import load_model, load_tokenizer, pick_device, resolve_dtype
from posttrain.train.optim import build_optimizer, build_scheduler, clip_grad_norm
from posttrain.train.packing import MicroBatch, build_microbatches, loss_logits, tokenize_examples
from posttrain.train.run import export_final, seed_everything

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class SFTData:
    train: list[MicroBatch]
    eval: list[MicroBatch]
    info: dict  # counts for the first metrics line (bad_lines, truncated, ...)


def load_sft_source(source: str, skip_bad_lines: bool = False, seed: int = 0,
                    task_options: Mapping[str, Mapping[str, Any]] | None = None, tokenizer=None,
                    tool_parser: str = "auto") -> ChatData:
    """Chat examples of `data.train` / `data.eval`: a JSONL path or `hf:NAME[:SPLIT]` (train/data.py),
    `gym:DOMAIN[,DOMAIN...]:N` (reasoning-gym worked examples, seeds disjoint from eval's),
    `tasks:NAME[,NAME...]:N` (gold demonstrations of registered task sources, tasks/sft_data.py) or
    `episodes:NAME[,NAME...]:N` (oracle episodes through the episode loop as token records,
    tasks/episode_sft.py)."""
    if source.startswith("gym:"):
        domains, n = count_spec("gym", source[4:], "gym:chain_sum:1000")
        return from_records(sft_examples(domains, n, seed, options=task_options), source)
    if source.startswith("tasks:"):
        return from_records(task_demos(source[6:], seed, task_options, tokenizer), source)
    if source.startswith("episodes:"):
        records, info = episode_demos(source[9:], seed, task_options, tokenizer, tool_parser)
        dropped = f" (dropped {info['dropped']}: {info['dropped_by']})" if info["dropped"] else ""
        console.print(f"{source}: {info['kept']} of {info['episodes']} oracle episodes scored full marks{dropped}, "
                      f"played in {info['seconds']:.1f}s")
        return from_records(records, source)
    return load_chat_examples(source, skip_bad_lines)


def prepare_data(cfg: SFTConfig, tokenizer) -> SFTData:
    d, t = cfg.data, cfg.train
    train = load_sft_source(d.train, skip_bad_lines=d.skip_bad_lines, seed=d.seed, task_options=d.task_options,
                            tokenizer=tokenizer, tool_parser=d.tool_parser)
    bad_lines = train.bad_lines
    if train.bad_lines:
        console.print(f"[yellow]warning:[/] {train.bad_lines_summary()}")
    if d.eval is not None:
        held = load_sft_source(d.eval, skip_bad_lines=d.skip_bad_lines, seed=d.seed + 1,
                               task_options=d.task_options, tokenizer=tokenizer, tool_parser=d.tool_parser)
        if held.bad_lines:
            console.print(f"[yellow]warning:[/] {held.bad_lines_summary()}")
        bad_lines += held.bad_lines
        train_chats, eval_chats = train.examples, held.examples
    else:
        train_chats, eval_chats = split_eval(train.examples, d.eval_fraction, d.seed)
    train_ex, train_stats = tokenize_examples(tokenizer, train_chats, d.max_seq_len)
    eval_ex, _ = tokenize_examples(tokenizer, eval_chats, d.max_seq_len)
    if not train_ex:
        raise DataError(f"{d.train}: no example has an assistant token within max_seq_len={d.max_seq_len}")
    if train_stats.truncated:
        console.print(f"note: {train_stats.truncated} examples truncated to max_seq_len={d.max_seq_len}")
    pack = dict(packing=t.packing, row_tokens=t.row_tokens, max_tokens_per_microbatch=t.max_tokens_per_microbatch,
                pad_id=tokenizer.pad_token_id)
    info = {
        "bad_lines": bad_lines,
        "train_examples": len(train_ex),
        "eval_examples": len(eval_ex),
        "truncated": train_stats.truncated,
        "dropped_no_loss_tokens": train_stats.dropped,
    }
    return SFTData(
        train=build_microbatches(train_ex, seed=t.seed, **pack),
        eval=build_microbatches(eval_ex, seed=t.seed, **pack) if eval_ex else [],
        info=info,
    )


def epoch_order(n_microbatches: int, seed: int, epoch: int) -> list[int]:
    """The order micro-batches are visited in `epoch`: a pure function of (seed, epoch)."""
    order = list(range(n_microbatches))
    random.Random(f"sft:{seed}:{epoch}").shuffle(order)
    return order


def autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def train_step(model, optimizer, mbs: list[MicroBatch], grad_clip: float, device, dtype) -> dict:
    """Forward/backward over the step's micro-batches, then one AdamW update (or a skip)."""
    step_loss_tokens = sum(mb.n_loss_tokens for mb in mbs)
    loss_sum = 0.0
    for mb in mbs:
        with autocast(device, dtype):
            logits, targets = loss_logits(model, mb.to(device))
        part = sft_loss_sum(logits, targets)
        (part / step_loss_tokens).backward()
        loss_sum += part.item()
    loss = loss_sum / step_loss_tokens
    grad_norm = clip_grad_norm(model, grad_clip) if math.isfinite(loss) else float("nan")
    skipped = None
    if not math.isfinite(loss):
        skipped = f"loss is {loss}"
    elif not math.isfinite(grad_norm):
        skipped = f"grad norm is {grad_norm}"
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": loss,
        "grad_norm": grad_norm,
        "tokens": sum(mb.n_tokens for mb in mbs),
        "loss_tokens": step_loss_tokens,
        "skipped": skipped,
    }


@torch.no_grad()
def eval_loss(model, mbs: list[MicroBatch], device, dtype) -> float | None:
    """Token-weighted mean loss over all eval micro-batches."""
    if not mbs:
        return None
    model.eval()
    total, tokens = 0.0, 0
    for mb in mbs:
        with autocast(device, dtype):
            logits, targets = loss_logits(model, mb.to(device))
        total += sft_loss_sum(logits, targets).item()
        tokens += mb.n_loss_tokens
    model.train()
    return total / tokens


def enable_activation_checkpointing(model) -> None:
    """Recompute each layer's activations in backward (transformers 5.x name; 4.x fallback)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class SuiteEngine:
    """The paged engine the in-loop suites run on: built from the model path once, then synced to
    the trained weights (adapters merged) before each eval."""

    def __init__(self, cfg: SFTConfig, tokenizer, device):
        self.cfg, self.tokenizer, self.device, self.engine = cfg, tokenizer, device, None

    def synced(self, model, step: int):
        from posttrain.engine.registry import ENGINES
        from posttrain.train.weights import engine_state_dict

        if self.engine is None:
            self.engine = ENGINES["paged"](self.cfg.model.path, self.tokenizer, dtype=self.cfg.model.dtype,
                                           device=self.device, max_num_seqs=self.cfg.eval.batch_size)
        was_training = model.training
        self.engine.update_weights(engine_state_dict(model), step)
        model.train(was_training)
        return self.engine


def run(cfg: SFTConfig, resume: bool = False) -> Path:
    out_dir = Path(cfg.out_dir)
    t, o = cfg.train, cfg.optim
    ckpt = resume_point(out_dir, resume)
    seed_everything(t.seed)
    device = pick_device()
    dtype = resolve_dtype(cfg.model.dtype, device)

    # 1. data (before the model, so bad data fails fast)
    tokenizer = load_tokenizer(cfg.model.path)
    data = prepare_data(cfg, tokenizer)

    # 2. model
    model = load_model(cfg.model.path, dtype="float32", device=device)  # fp32 master weights
    if cfg.model.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if cfg.model.lora is not None:
        model = apply_lora(model, cfg.model.lora)
    model.train()
    steps_per_epoch = math.ceil(len(data.train) / t.microbatches_per_step)
    total_steps = t.max_steps or t.epochs * steps_per_epoch
    optimizer = build_optimizer(model, o)
    scheduler = build_scheduler(optimizer, o, total_steps)
    save_config(cfg, out_dir)

    suites = SuiteEvals(cfg.eval, out_dir, tokenizer, stop_ids(tokenizer))  # bad suites fail before training
    suite_engine = SuiteEngine(cfg, tokenizer, device)

    # 3. resume
    step, epoch, position = 0, 0, 0
    if resume and ckpt is None:
        console.print(f"note: no checkpoint in {out_dir}; starting from step 0")
    if resume and ckpt is not None:
        state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler)
        if state.get("microbatches_per_epoch") != len(data.train):
            raise CheckpointError(
                f"{ckpt}: saved with {state.get('microbatches_per_epoch')} micro-batches per epoch, the data now "
                f"gives {len(data.train)}: the data or packing config changed since the checkpoint"
            )
        step, epoch, position = state["step"], state["data"]["epoch"], state["data"]["position"]
        suites.load_state_dict(state.get("suites"))
        console.print(f"resuming from {ckpt} (step {step})")

    trainable, total = trainable_parameters(model)
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)

    def checkpoint() -> None:
        save_checkpoint(out_dir, step, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                        state={"data": {"epoch": epoch, "position": position},
                               "microbatches_per_epoch": len(data.train), "suites": suites.state_dict()},
                        config=cfg, keep_last=t.keep_last)

    # 4. train
    order = epoch_order(len(data.train), t.seed, epoch)
    bar_ctx = progress_bar(total_steps - step, f"sft {step}->{total_steps}", enabled=cfg.logging.progress)
    with logger, bar_ctx as bar:
        if step == 0:
            first = {**data.info, "trainable_params": trainable, "total_params": total, "total_steps": total_steps,
                     "microbatches_per_epoch": len(data.train)}
            if data.eval:
                first["eval_loss"] = eval_loss(model, data.eval, device, dtype)
            if suites:
                first.update(suites.evaluate(suite_engine.synced(model, 0), 0))
                suites.maybe_save_best(0, first, model, tokenizer)
            logger.log(0, first)
        while step < total_steps:
            if position >= len(order):
                epoch, position = epoch + 1, 0
                order = epoch_order(len(data.train), t.seed, epoch)
            started = time.perf_counter()
            mbs = [data.train[i] for i in order[position : position + t.microbatches_per_step]]  # collated here
            lr = scheduler.get_last_lr()[0]
            result = train_step(model, optimizer, mbs, o.grad_clip, device, dtype)
            seconds = time.perf_counter() - started
            scheduler.step()
            step, position = step + 1, position + len(mbs)
            metrics = {"loss": result["loss"], "lr": lr, "grad_norm": result["grad_norm"],
                       "tokens": result["tokens"], "loss_tokens": result["loss_tokens"],
                       "tokens_per_s": result["tokens"] / max(seconds, 1e-9), "epoch": epoch}
            if result["skipped"]:
                console.print(f"[yellow]warning:[/] step {step}: {result['skipped']}; update skipped")
                metrics["skipped_update"] = 1
            evaluating = step % t.eval_every == 0 or step == total_steps
            if data.eval and evaluating:
                metrics["eval_loss"] = eval_loss(model, data.eval, device, dtype)
            verdict = None
            if suites and evaluating:
                evaluated = suites.evaluate(suite_engine.synced(model, step), step)
                metrics.update(evaluated)
                verdict = suites.check(step, evaluated)
                suites.maybe_save_best(step, evaluated, model, tokenizer, verdict)
                for row in verdict.failed:
                    console.print(f"[yellow]warning:[/] step {step}: gate {row['name']} failed")
            if step % t.log_every == 0 or step == total_steps or "eval_loss" in metrics or evaluating:
                logger.log(step, metrics)
            bar.update(1, loss=result["loss"], lr=lr)
            if step % t.save_every == 0 or step == total_steps or (verdict and verdict.action):
                checkpoint()
            if verdict and verdict.action == "stop":
                raise gate_failure(verdict.failed)
            if verdict and verdict.action == "rollback":
                final = suites.rollback()
                console.print(f"sft: gate failed at step {step}: rolled back to the best model (step "
                              f"{suites.best['step']}) in {final}")
                return final

    # 5. export
    final = export_final(model, tokenizer, out_dir, dtype)
    console.print(f"sft: {step} steps; final model in {final}")
    return final
