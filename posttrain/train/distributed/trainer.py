"""The RL train step under torch.distributed: DDP or FSDP2, the same update as one process.

    policy = wrap_policy(model, "ddp" | "fsdp2")          # before building the optimizer
    optimizer = build_optimizer(policy.model, cfg.optim)
    metrics = dist_train_step(policy, ref, optimizer, scheduler, groups, cfg, pad_id=...)

Every rank calls `dist_train_step`; rank 0's `groups` are broadcast (broadcast_object_list),
so the others may pass None. Then every rank builds the SAME step-wide list of samples
(advantages are per group, computed from rewards on every rank), while the forward passes are
sharded: the reference's and recomputed old logprobs of contiguous slices of the samples
(all-gathered), and in the update each mini-batch (the 1-rank split, unchanged) is cut into
`world_size` contiguous slices, one per rank. The loss normalisers (trained tokens per sequence,
sequence count of the mini-batch) are those of the whole mini-batch, and gradients are SUMMED
over ranks, so 2 ranks x b give the update of 1 rank x 2b up to float summation order.

- DDP: DistributedDataParallel around the token-logits forward; a comm hook all-reduces each
  bucket with SUM in `reduce_dtype` (float32 by default, whatever the parameters' dtype), only
  after a mini-batch's last micro-batch (`no_sync` before it).
- FSDP2: `fully_shard` on every decoder layer, then on the root (embeddings, final norm, head:
  tied weights stay in one unit); MixedPrecisionPolicy(param_dtype, reduce_dtype=float32);
  reduce-scatter with SUM (divide factor 1) after every micro-batch. Parameters, gradients and
  AdamW state are DTensor shards (Shard(0) over the ranks).
Ranks run the same number of forwards (collectives inside FSDP2 need it): a rank with fewer
micro-batches runs zero-weighted copies. Gradient clipping uses the global norm. Metrics are
global sums / maxima over ranks, the same on every rank.

What it does not do: tensor or pipeline parallelism, several hosts, CPU offload.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn

from posttrain.config.rl import RLConfig
from posttrain.core.errors import ConfigError
from posttrain.train.rl_batch import _base, build_rl_microbatches, supports_shared_prefix, token_logits, gather_logprobs
from posttrain.train.rl_update import (add_terms, finish_sums, microbatch_loss, new_sums, sequence_lengths,
                                       update_policy)
from posttrain.train.step import build_samples
from posttrain.core.types import Group

TRAINERS = ("ddp", "fsdp2")


class RLForward(nn.Module):
    """The policy's token-logits forward as a module's forward, so DDP / FSDP2 hooks run around it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, mb):
        return token_logits(self.model, mb)


class DistPolicy:
    """What the train code sees of a wrapped policy: the HF model's config (packing decisions), its
    parameters (FSDP2: DTensor shards), and every forward routed through the wrapper."""

    def __init__(self, model: nn.Module, wrapped: nn.Module, kind: str, reduce_dtype: torch.dtype,
                 param_dtype: torch.dtype | None):
        self.model, self.wrapped, self.kind = model, wrapped, kind
        self.reduce_dtype, self.param_dtype = reduce_dtype, param_dtype

    def routed_token_logits(self, mb):
        return self.wrapped(mb)

    def get_base_model(self):
        return _base(self.model)

    def train(self, mode: bool = True) -> "DistPolicy":
        self.wrapped.train(mode)
        return self

    def eval(self) -> "DistPolicy":
        return self.train(False)

    def parameters(self):
        return self.model.parameters()

    def named_parameters(self):
        return self.model.named_parameters()

    def accumulate(self, last: bool):
        """Context of one micro-batch's backward: DDP reduces only at a mini-batch's last one."""
        if self.kind == "ddp" and not last:
            return self.wrapped.no_sync()
        return contextlib.nullcontext()


def _sum_hook(reduce_dtype: torch.dtype):
    def hook(state, bucket):
        buf = bucket.buffer()
        out = buf.to(reduce_dtype) if buf.dtype != reduce_dtype else buf
        work = dist.all_reduce(out, op=dist.ReduceOp.SUM, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0].to(buf.dtype))
    return hook


def wrap_policy(model: nn.Module, kind: str, *, reduce_dtype: torch.dtype = torch.float32,
                param_dtype: torch.dtype | None = None) -> DistPolicy:
    """Wrap `model` (every rank: the same weights) for `kind` ddp | fsdp2 in the current process group.
    `param_dtype` (FSDP2 only): the dtype of the gathered parameters in forward/backward (None: as stored)."""
    if kind not in TRAINERS:
        raise ConfigError(f"cluster.trainer: expected one of {list(TRAINERS)} for a distributed trainer, got {kind!r}")
    if not dist.is_initialized():
        raise ConfigError(f"cluster.trainer={kind} needs a torch.distributed process group (posttrain.train.distributed.group)")
    root = RLForward(model)
    if kind == "ddp":
        if param_dtype is not None:
            raise ConfigError("param_dtype is for cluster.trainer=fsdp2; DDP trains the parameters as stored")
        device = next(model.parameters()).device
        wrapped = nn.parallel.DistributedDataParallel(
            root, device_ids=[device] if device.type == "cuda" else None, forward_sync_buffers=False)
        wrapped.register_comm_hook(None, _sum_hook(reduce_dtype))
        return DistPolicy(model, wrapped, kind, reduce_dtype, None)
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    layers = getattr(_base(model).get_decoder(), "layers", None)
    if layers is None:
        raise ConfigError(f"cluster.trainer=fsdp2: {type(model).__name__} has no decoder .layers to shard")
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(root, mp_policy=policy)
    for m in root.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)  # gradients are summed: the loss is already normalised globally
            m.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no PREMUL_SUM)
    return DistPolicy(model, root, kind, reduce_dtype, param_dtype)


# ---------------------------------------------------------------- collectives


def _rank_world() -> tuple[int, int]:
    return dist.get_rank(), dist.get_world_size()


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rank `rank`'s contiguous slice [lo, hi) of n items (sizes differ by at most one)."""
    return round(rank * n / world), round((rank + 1) * n / world)


def _max_count(n: int, device) -> int:
    t = torch.tensor([n], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


def _comm_device(policy) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def broadcast_groups(groups: Sequence[Group] | None, src: int = 0) -> list[Group]:
    """Rank `src`'s groups on every rank."""
    box = [list(groups) if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def sharded_logprobs(model, samples, *, max_tokens_per_microbatch: int, pad_id: int,
                     share_prefix: bool | None = None) -> list[list[float]]:
    """`sequence_logprobs` with each rank computing a contiguous slice of `samples`, all-gathered:
    the same list on every rank. A wrapped policy runs as many forwards on every rank."""
    rank, world = _rank_world()
    if share_prefix is None:
        share_prefix = supports_shared_prefix(model)
    lo, hi = shard_bounds(len(samples), rank, world)
    numbered = [replace(samples[k], seq=k) for k in range(lo, hi)]
    opts = dict(max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id, share_prefix=share_prefix)
    mbs = build_rl_microbatches(numbered, **opts)
    runs = _max_count(len(mbs), _comm_device(model)) if isinstance(model, DistPolicy) else len(mbs)
    device = next(model.parameters()).device
    mine: dict[int, dict[int, float]] = {}
    with torch.no_grad():
        for i in range(runs):
            if i >= len(mbs):  # keep step with the other ranks' collectives; result unused
                token_logits(model, build_rl_microbatches([replace(samples[0], seq=0)], **opts)[0].to(device))
                continue
            mb = mbs[i].to(device)
            lp = gather_logprobs(token_logits(model, mb), mb.targets).tolist()
            for value, s, t in zip(lp, mb.seq_index.tolist(), mb.token_pos.tolist()):
                mine.setdefault(s, {})[t] = value
    parts: list = [None] * world
    dist.all_gather_object(parts, mine)
    out = [[0.0] * len(s.token_ids) for s in samples]
    for part in parts:
        for s, row in part.items():
            for t, value in row.items():
                out[s][t] = value
    return out


# ---------------------------------------------------------------- update

_MAXED = ("ratio_max", "max_abs")  # every other loss / gap sum is summed over ranks


def _reduce_sums(sums: dict, gap: dict, nonfinite: bool, device) -> bool:
    """Sums over ranks (maxima for ratio_max / max_abs), in place, whatever keys rl_update's sums
    hold (ints stay ints); whether any rank saw a non-finite loss."""
    keys = [(d, k) for d in (sums, gap) for k in sorted(d) if k not in _MAXED]
    maxed = [(d, k) for d in (sums, gap) for k in _MAXED if k in d]
    summed_t = torch.tensor([float(d[k]) for d, k in keys] + [float(nonfinite)], dtype=torch.float64, device=device)
    maxed_t = torch.tensor([float(d[k]) for d, k in maxed], dtype=torch.float64, device=device)
    dist.all_reduce(summed_t, op=dist.ReduceOp.SUM)
    dist.all_reduce(maxed_t, op=dist.ReduceOp.MAX)
    values = summed_t.tolist()
    for (d, k), v in zip(keys + maxed, values[:-1] + maxed_t.tolist()):
        d[k] = int(round(v)) if isinstance(d[k], int) else v
    return values[-1] > 0


def dist_minibatch_loss(model: DistPolicy, part, *, algo, max_tokens: int, max_tokens_per_microbatch: int,
                        pad_id: int, device, measure: bool = False) -> dict:
    """`_minibatch_loss` over this rank's slice of the mini-batch `part` (normalisers of the whole
    `part`); gradients summed over ranks, loss sums global."""
    rank, world = _rank_world()
    lengths = sequence_lengths(part, device)
    lo, hi = shard_bounds(len(part), rank, world)
    opts = dict(max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                share_prefix=supports_shared_prefix(model))
    mbs = build_rl_microbatches(part[lo:hi], **opts)
    runs = _max_count(len(mbs), _comm_device(model))
    sums, gap = new_sums()
    nonfinite = False
    for i in range(runs):
        real = i < len(mbs)
        mb = mbs[i] if real else build_rl_microbatches(part[:1], **opts)[0]  # zero-weighted stand-in
        with model.accumulate(last=i == runs - 1):
            loss, terms = microbatch_loss(model, mb.to(device), lengths, algo=algo, max_tokens=max_tokens,
                                          gap=gap if measure and real else None)
            if not torch.isfinite(loss):
                nonfinite = True  # keep going: the other ranks' collectives need this rank's backward
            if real:
                add_terms(sums, loss, terms)
            else:
                loss = loss * 0.0
            loss.backward()
    if _reduce_sums(sums, gap, nonfinite, _comm_device(model)):
        return {"nonfinite": "loss"}
    return finish_sums(sums, gap, measure)


def global_clip(model, max_norm: float) -> float:
    """Clip by the norm of the whole (summed) gradient; returns it before clipping.
    DDP: every rank holds it; FSDP2: computed from the DTensor shards."""
    params = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


def dist_train_step(policy: DistPolicy, ref, optimizer, scheduler, groups: Sequence[Group] | None, cfg: RLConfig,
                    *, pad_id: int, device=None, src: int = 0, version: int | None = None) -> dict:
    """`train_step` on every rank (rank `src`'s groups); returns the global metrics on every rank.
    `version`: the trainer's policy version (fresh tokens older than it are corrected off-policy)."""
    import time

    groups = broadcast_groups(groups, src)
    if not groups:
        return {"skipped_updates": 1, "skip_reason": "no group with signal"}
    device = device if device is not None else next(policy.model.parameters()).device
    started = time.perf_counter()
    samples = build_samples(groups, policy, ref, cfg, pad_id, logprobs=sharded_logprobs, version=version)
    logprobs_done = time.perf_counter()
    metrics = update_policy(policy, optimizer, scheduler, samples, algo=cfg.algo, max_tokens=cfg.rollout.max_tokens,
                            updates_per_step=cfg.train.updates_per_step,
                            max_tokens_per_microbatch=cfg.train.max_tokens_per_microbatch, pad_id=pad_id,
                            grad_clip=cfg.optim.grad_clip, device=device,
                            minibatch_loss=dist_minibatch_loss, clip=global_clip)
    metrics["time/logprobs"] = logprobs_done - started
    metrics["time/update"] = time.perf_counter() - logprobs_done
    return metrics
