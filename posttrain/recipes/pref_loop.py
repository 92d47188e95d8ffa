"""What `posttrain rm` and `posttrain dpo` share: the data split, the step order, the loop; and the
paired-loss step offline and online DPO share (`PairStep`, `logps_of`, `BothFallAlert`).

    split = prepare_pairs(cfg.data, tokenizer, unpaired=False)     # train / eval pairs, bad-line counts
    final = run_loop(cfg, model, tokenizer, split, step_fn, eval_fn, export=...)

The loop (one optimizer step = `train.pairs_per_step` pairs, visited in an order drawn from
(seed, epoch)):
1. `step_fn(indices)` does the forward/backward over the step's pairs (chunked by token budget
   inside, gradients accumulated exactly) and returns its metrics with "loss";
2. a non-finite loss or grad norm skips the update and says why; grad clipping, AdamW, warmup +
   decay (the shared train/optim.py);
3. metrics.jsonl every `log_every` steps, `eval_fn()` at step 0, every `eval_every` steps and
   at the last; checkpoints every `save_every` steps and at the end with the data cursor, so a
   resumed run repeats an uninterrupted one step for step;
4. `export(model, tokenizer)` writes the final model (out_dir/final).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from collections import deque
from typing import Callable

import torch
from rich.console import Console

from posttrain.algos import preference as P
from posttrain.checkpoint import load_checkpoint, resume_point, save_checkpoint
from posttrain.config.base import save_config
from posttrain.config.pref import DPOConfig, PrefAlgoConfig
from posttrain.core.errors import CheckpointError, DataError
from posttrain.recipes.sft import autocast
from posttrain.tasks.preferences import preference_records
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.progress import progress_bar
from posttrain.train.lora import trainable_parameters
from posttrain.train.optim import build_optimizer, build_scheduler, clip_grad_norm
from posttrain.train.pair_forward import completion_logps, pair_items, token_chunks
from posttrain.train.pairs import load_pairs

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Setup:
    device: torch.device
    dtype: torch.dtype  # autocast dtype (fp32 master weights)
    tokenizer: object
    pad_id: int


def start(cfg) -> Setup:
    """Seed, pick the device and dtype, load the tokenizer (first thing in rm and dpo)."""
    from posttrain.core.hf import load_tokenizer, pick_device, resolve_dtype
    from posttrain.train.run import seed_everything

    seed_everything(cfg.train.seed)
    device = pick_device()
    tokenizer = load_tokenizer(cfg.model.path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return Setup(device, resolve_dtype(cfg.model.dtype, device), tokenizer, pad_id)


def trainable(model, model_cfg, *, modules_to_save: list[str] | None = None):
    """Activation checkpointing and LoRA as `model_cfg` asks (`modules_to_save` train in full)."""
    from posttrain.recipes.sft import enable_activation_checkpointing
    from posttrain.train.lora import apply_lora

    if model_cfg.gradient_checkpointing:
        enable_activation_checkpointing(model)
    if model_cfg.lora is not None:
        model = apply_lora(model, model_cfg.lora, modules_to_save=modules_to_save)
    return model


@dataclass
class PrefSplit:
    train: list  # TokenPair (or TokenExample for unpaired data)
    eval: list
    info: dict  # counts for the first metrics line


def prepare_pairs(data_cfg, tokenizer, *, unpaired: bool = False) -> PrefSplit:
    """Load, check and tokenize the preference data; hold out the eval set."""
    def load(spec: str, seed: int):
        got = load_pairs(spec, tokenizer, max_prompt_len=data_cfg.max_prompt_len, max_len=data_cfg.max_len,
                         skip_bad_lines=data_cfg.skip_bad_lines,
                         records=preference_records(spec, seed, data_cfg.task_options))
        summary = got.bad_lines_summary()
        if summary:
            console.print(f"[yellow]warning:[/] {summary}")
        for issue in got.template_issues:
            console.print(f"[yellow]warning:[/] chat template: {issue}")
        items = got.examples if unpaired else got.pairs
        if not items:
            kind = "unpaired (prompt/completion/label)" if unpaired else "paired (prompt/chosen/rejected)"
            raise DataError(f"{spec}: no {kind} records" + (" (the file holds the other kind)"
                                                           if (got.pairs if unpaired else got.examples) else ""))
        return items, got

    train, got = load(data_cfg.train, data_cfg.seed)
    info = {"bad_lines": len(got.bad_lines), "template_issues": len(got.template_issues)}
    if data_cfg.eval is not None:
        held, _ = load(data_cfg.eval, data_cfg.seed + 1_000_000)
    else:
        order = list(range(len(train)))
        random.Random(f"pref-split:{data_cfg.seed}").shuffle(order)
        n_eval = int(len(train) * data_cfg.eval_fraction)
        held = [train[i] for i in sorted(order[:n_eval])]
        train = [train[i] for i in sorted(order[n_eval:])]
    if not train:
        raise DataError(f"{data_cfg.train}: nothing left to train on after holding out the eval set")
    info.update(train_pairs=len(train), eval_pairs=len(held))
    return PrefSplit(train, held, info)


def epoch_batches(n: int, per_step: int, seed: int, epoch: int) -> list[list[int]]:
    """The steps of one epoch: indices 0..n-1 in an order drawn from (seed, epoch), `per_step` at
    a time (the last step of an epoch may be smaller)."""
    order = list(range(n))
    random.Random(f"pref:{seed}:{epoch}").shuffle(order)
    return [order[i:i + per_step] for i in range(0, n, per_step)]


def run_loop(cfg, model, tokenizer, split: PrefSplit, step_fn: Callable[[list[int]], dict],
             eval_fn: Callable[[], dict], *, name: str, export: Callable[[], Path], resume: bool = False,
             on_metrics: Callable[[int, dict], None] | None = None, extra_first: dict | None = None) -> Path:
    """Train `model` over `split.train` with `step_fn`; returns what `export` returns."""
    out_dir, t, o = Path(cfg.out_dir), cfg.train, cfg.optim
    ckpt = resume_point(out_dir, resume)
    steps_per_epoch = math.ceil(len(split.train) / t.pairs_per_step)
    total_steps = t.max_steps or t.epochs * steps_per_epoch
    optimizer = build_optimizer(model, o)
    scheduler = build_scheduler(optimizer, o, total_steps)
    save_config(cfg, out_dir)

    step, epoch, position = 0, 0, 0
    if resume and ckpt is None:
        console.print(f"note: no checkpoint in {out_dir}; starting from step 0")
    if resume and ckpt is not None:
        state = load_checkpoint(ckpt, model=model, optimizer=optimizer, scheduler=scheduler)
        if state.get("train_pairs") != len(split.train):
            raise CheckpointError(f"{ckpt}: saved with {state.get('train_pairs')} training pairs, the data now gives "
                                  f"{len(split.train)}: the data changed since the checkpoint")
        step, epoch, position = state["step"], state["data"]["epoch"], state["data"]["position"]
        console.print(f"resuming from {ckpt} (step {step})")

    trainable, total = trainable_parameters(model)
    logger = MetricsLogger(out_dir, tensorboard=cfg.logging.tensorboard, wandb=cfg.logging.wandb,
                           wandb_project=cfg.logging.wandb_project, config=cfg.model_dump(mode="json"),
                           resume_from_step=step)

    def checkpoint() -> None:
        save_checkpoint(out_dir, step, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                        state={"data": {"epoch": epoch, "position": position}, "train_pairs": len(split.train)},
                        config=cfg, keep_last=t.keep_last)

    batches = epoch_batches(len(split.train), t.pairs_per_step, t.seed, epoch)
    bar_ctx = progress_bar(total_steps - step, f"{name} {step}->{total_steps}", enabled=cfg.logging.progress)
    with logger, bar_ctx as bar:
        if step == 0:
            first = {**split.info, **(extra_first or {}), "trainable_params": trainable, "total_params": total,
                     "total_steps": total_steps}
            if split.eval:
                first.update(eval_fn())
            logger.log(0, first)
        while step < total_steps:
            if position >= len(batches):
                epoch, position = epoch + 1, 0
                batches = epoch_batches(len(split.train), t.pairs_per_step, t.seed, epoch)
            started = time.perf_counter()
            lr = scheduler.get_last_lr()[0]
            model.train()
            metrics = step_fn(batches[position])
            loss = metrics["loss"]
            grad_norm = clip_grad_norm(model, o.grad_clip) if math.isfinite(loss) else float("nan")
            skipped = (f"loss is {loss}" if not math.isfinite(loss)
                       else f"grad norm is {grad_norm}" if not math.isfinite(grad_norm) else None)
            if skipped is None:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            step, position = step + 1, position + 1
            metrics.update(lr=lr, grad_norm=grad_norm, epoch=epoch, step_seconds=time.perf_counter() - started)
            if skipped:
                console.print(f"[yellow]warning:[/] step {step}: {skipped}; update skipped")
                metrics["skipped_update"] = 1
            evaluating = split.eval and (step % t.eval_every == 0 or step == total_steps)
            if evaluating:
                metrics.update(eval_fn())
            if on_metrics is not None:
                on_metrics(step, metrics)
            if step % t.log_every == 0 or step == total_steps or evaluating:
                logger.log(step, metrics)
            bar.update(1, loss=loss, lr=lr)
            if step % t.save_every == 0 or step == total_steps:
                checkpoint()
    final = export()
    console.print(f"{name}: {step} steps; final model in {final}")
    return final


@torch.no_grad()
def no_grad_eval(model, fn):
    """Run `fn()` with the model in eval mode and no autograd, then restore train mode."""
    was = model.training
    model.eval()
    try:
        return fn()
    finally:
        model.train(was)


# ---------------------------------------------------------------- paired steps (dpo, dpo_online)


def item_lengths(items) -> list[int]:
    return [len(p) + len(c) for p, c in items]


def pair_loss(algo: PrefAlgoConfig, pc, pr, nc, nr, rc=None, rr=None) -> P.PrefLoss:
    """The configured paired loss from summed logps `pc`/`pr` (policy), `rc`/`rr` (reference) and
    completion token counts `nc`/`nr`; IPO, SimPO and ORPO work on length-averaged logps. With
    `algo.sft_coef` (RPO) each pair's loss also has coef x the chosen answer's mean NLL."""
    ac, ar = pc / nc.clamp_min(1), pr / nr.clamp_min(1)
    if algo.loss in ("sigmoid", "robust", "hinge"):
        out = P.dpo_loss(pc, pr, rc, rr, beta=algo.beta, loss_type=algo.loss, label_smoothing=algo.label_smoothing)
    elif algo.loss == "ipo":
        out = P.dpo_loss(ac, ar, rc / nc.clamp_min(1), rr / nr.clamp_min(1), beta=algo.beta, loss_type="ipo")
    elif algo.loss == "simpo":
        out = P.simpo_loss(ac, ar, beta=algo.beta, gamma=algo.simpo_gamma, label_smoothing=algo.label_smoothing)
    elif algo.loss == "orpo":
        out = P.orpo_loss(ac, ar, -ac, lam=algo.orpo_lambda)
    else:
        raise ValueError(f"algo.loss={algo.loss!r} is not a paired loss")
    if algo.sft_coef:
        out = P.PrefLoss(out.loss - algo.sft_coef * ac, out.chosen_reward, out.rejected_reward)
    return out


def pair_lengths(items) -> list[int]:
    """Tokens of each pair of interleaved pair items (the prompt once): how a step chunks pairs."""
    return [len(items[k][0]) + len(items[k][1]) + len(items[k + 1][1]) for k in range(0, len(items), 2)]


@torch.no_grad()
def logps_of(model, items, *, max_tokens: int, pad_id: int, share_prompt: bool = True, paired: bool = False):
    """Summed completion logps and completion token counts of `items`, chunked, no grad ([N] each).
    `paired`: the items are interleaved pairs, chunked by pair exactly as a step chunks them, so a
    pass over the same pairs in the same order lays them out identically (at step 0 the held-out
    rewards are then exactly 0, not float noise)."""
    sums, counts = torch.zeros(len(items)), torch.zeros(len(items))
    if paired:
        chunks = [[i for k in c for i in (2 * k, 2 * k + 1)] for c in token_chunks(pair_lengths(items), max_tokens)]
    else:
        chunks = token_chunks(item_lengths(items), max_tokens)
    for chunk in chunks:
        s, n = completion_logps(model, [items[i] for i in chunk], max_tokens_per_microbatch=max_tokens,
                                pad_id=pad_id, share_prefix=None if share_prompt else False)
        sums[chunk], counts[chunk] = s.detach().float().cpu(), n.float().cpu()
    return sums, counts


class BothFallAlert:
    """Warns once when the mean chosen and rejected logps of the last `window` steps have both
    fallen more than `nats` below those of the first `window` steps."""

    def __init__(self, nats: float, window: int = 10):
        self.nats, self.window = nats, window
        self.first: list[tuple[float, float]] = []
        self.recent: deque = deque(maxlen=window)
        self.fired = False

    def __call__(self, step: int, metrics: dict) -> None:
        if "logps/chosen" not in metrics:
            return
        pair = (metrics["logps/chosen"], metrics["logps/rejected"])
        if len(self.first) < self.window:
            self.first.append(pair)
        self.recent.append(pair)
        if len(self.first) < self.window or len(self.recent) < self.window:
            return
        drop = [sum(a[k] for a in self.first) / self.window - sum(b[k] for b in self.recent) / self.window
                for k in (0, 1)]
        metrics["alert/both_fall"] = float(min(drop) > self.nats)
        if min(drop) > self.nats and not self.fired:
            self.fired = True
            console.print(f"[yellow]alert:[/] step {step}: chosen and rejected logprobs both fell (by {drop[0]:.1f} "
                          f"and {drop[1]:.1f} nats a sequence over the first {self.window} steps' means): the margin "
                          f"grows by pushing both down; lower the learning rate or raise beta")


def summarise(out: P.PrefLoss, pc, pr, prefix: str = "") -> dict[str, float]:
    m = P.pair_metrics(out)
    m.update({"logps/chosen": float(pc.mean()), "logps/rejected": float(pr.mean())})
    return {f"{prefix}{k}": v for k, v in m.items()}


class PairStep:
    """Forward/backward of one step of paired losses; `evaluate` the same on held-out pairs."""

    def __init__(self, cfg: DPOConfig, model, pairs, ref, device, dtype, pad_id: int):
        self.cfg, self.model, self.pairs, self.ref = cfg, model, pairs, ref  # ref: (sums [2N], counts) or None
        self.device, self.dtype, self.pad_id = device, dtype, pad_id

    def _forward(self, chunk: list[int]):
        items = pair_items([self.pairs[i] for i in chunk])
        with autocast(self.device, self.dtype):
            sums, counts = completion_logps(self.model, items, max_tokens_per_microbatch=self.cfg.train.max_tokens_per_microbatch,
                                            pad_id=self.pad_id, share_prefix=None if self.cfg.train.packing else False)
        sums, counts = sums.float().cpu(), counts.float().cpu()
        rc = rr = None
        if self.ref is not None:
            idx = torch.tensor(chunk)
            rc, rr = self.ref[0][2 * idx], self.ref[0][2 * idx + 1]
        pc, pr, nc, nr = sums[0::2], sums[1::2], counts[0::2], counts[1::2]
        return pair_loss(self.cfg.algo, pc, pr, nc, nr, rc, rr), pc, pr

    def _run(self, indices: list[int], train: bool) -> tuple[P.PrefLoss, torch.Tensor, torch.Tensor]:
        lengths = pair_lengths(pair_items([self.pairs[i] for i in indices]))
        parts = []
        for chunk in token_chunks(lengths, self.cfg.train.max_tokens_per_microbatch):
            out, pc, pr = self._forward([indices[k] for k in chunk])
            if train:
                (out.loss.sum() / len(indices)).backward()
            parts.append((out.loss.detach(), out.chosen_reward, out.rejected_reward, pc.detach(), pr.detach()))
        cat = [torch.cat([p[k] for p in parts]) for k in range(5)]
        return P.PrefLoss(cat[0], cat[1], cat[2]), cat[3], cat[4]

    def __call__(self, indices: list[int]) -> dict:
        out, pc, pr = self._run(indices, train=True)
        return {"loss": float(out.loss.mean()), **summarise(out, pc, pr), "pairs": len(indices)}

    def evaluate(self) -> dict:
        out, pc, pr = no_grad_eval(self.model, lambda: self._run(list(range(len(self.pairs))), train=False))
        return {"eval/loss": float(out.loss.mean()), **summarise(out, pc, pr, "eval/")}
