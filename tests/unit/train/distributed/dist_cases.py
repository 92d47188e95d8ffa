"""Rank functions for the distributed tests (spawned processes import them from here), and the
synthetic step they train on: groups of real token ids from the tiny tokenizer's range, sampler
logprobs, rewards, one trajectory per group marked as sampled with bf16 weights (inline TIS)."""

from __future__ import annotations

import os
import random

import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

from posttrain.config.rl import RLConfig  # noqa: E402
from posttrain.core.types import Group, Task, Trajectory  # noqa: E402


def make_groups(n_groups: int = 4, k: int = 4, seed: int = 3, vocab: int = 400) -> list[Group]:
    rng = random.Random(seed)
    groups = []
    for gi in range(n_groups):
        prompt = [rng.randrange(1, vocab) for _ in range(rng.randint(3, 7))]
        trajs = []
        for j in range(k):
            comp = [rng.randrange(1, vocab) for _ in range(rng.randint(3, 11))]
            ids = prompt + comp
            mask = [0] * len(prompt) + [1] * len(comp)
            lp = [0.0] * len(prompt) + [-rng.uniform(0.5, 6.0) for _ in comp]
            trajs.append(Trajectory(f"t{gi}", ids, mask, lp, len(prompt), reward=float(j % 2 == gi % 2),
                                    sampler_weights="bfloat16" if j == 1 else "exact"))
        task = Task(f"t{gi}", "d", ({"role": "user", "content": "x"},), None)
        groups.append(Group(task, tuple(trajs), tuple(t.reward for t in trajs)))
    return groups


def make_cfg(algo: dict | None = None, train: dict | None = None, world_size: int = 1,
             trainer: str = "single") -> RLConfig:
    return RLConfig.model_validate({
        "model": {"path": "unused"}, "algo": algo or {}, "train": train or {},
        "optim": {"lr": 1e-3, "warmup_steps": 0, "schedule": "constant", "grad_clip": 0.5},
        "cluster": {"trainer": trainer, "world_size": world_size}})


def load(model_dir: str):
    from posttrain.core.hf import load_model
    return load_model(model_dir, dtype="float32", device=torch.device("cpu"))


def single_step(model_dir, groups, cfg, pad_id, steps: int = 1):
    """The 1-rank reference: train_step on all the groups."""
    from posttrain.train.optim import build_optimizer, build_scheduler
    from posttrain.train.step import train_step
    model = load(model_dir)
    ref = load(model_dir).eval().requires_grad_(False) if cfg.algo.kl_coef > 0 else None
    opt = build_optimizer(model, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, 10)
    metrics = [train_step(model, ref, opt, sched, groups, cfg, pad_id=pad_id) for _ in range(steps)]
    return model, opt, metrics


def full_state(policy) -> dict:
    """Every rank's full (unsharded) parameters, on the CPU (a collective under FSDP2)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    sd = get_model_state_dict(policy.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.detach().clone() for k, v in sd.items()}


def train_rank(rank, world, model_dir, groups, cfg, kind, pad_id, out_dir, steps=1, save_dcp_to=None,
               param_dtype=None):
    """One rank of a distributed step: wrap, dist_train_step (`steps` times), write the full weights
    (rank 0) and, with `save_dcp_to`, a DCP checkpoint plus rank 0's full optimizer state."""
    from posttrain.train.distributed.trainer import dist_train_step, wrap_policy
    from posttrain.train.optim import build_optimizer, build_scheduler
    model = load(model_dir)
    ref = load(model_dir).eval().requires_grad_(False) if cfg.algo.kl_coef > 0 else None
    policy = wrap_policy(model, kind, param_dtype=param_dtype)
    opt = build_optimizer(policy.model, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, 10)
    metrics = [dist_train_step(policy, ref, opt, sched, groups if rank == 0 else None, cfg, pad_id=pad_id)
               for _ in range(steps)]
    state = full_state(policy)
    local_shapes = {n: tuple(getattr(p, "to_local", lambda: p)().shape) for n, p in policy.model.named_parameters()}
    if save_dcp_to is not None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
        from posttrain.train.distributed.checkpoint import save_dcp
        save_dcp(save_dcp_to, policy, opt, sched)
        full_opt = get_optimizer_state_dict(policy.model, opt,
                                            options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(full_opt, os.path.join(out_dir, "optim_full.pt"))
    if rank == 0:
        torch.save(state, os.path.join(out_dir, "weights.pt"))
    return {"metrics": metrics, "local_shapes": local_shapes}


def failing_rank(rank, world, bad_rank):
    """A step in which one rank raises: the launcher must name it."""
    import torch.distributed as dist
    if rank == bad_rank:
        raise ValueError(f"boom on purpose in rank {rank}")
    dist.barrier()  # the healthy rank waits here for the one that died
    return "done"


def reduce_dtype_rank(rank, world, model_dir, groups, cfg, pad_id):
    """bf16 compute, default reduction: the dtypes the gradient collectives actually carry.
    FSDP2: param_dtype=bf16 (fp32 masters); DDP: a bf16 model. Records each collective's input dtype."""
    import torch.distributed as dist
    from posttrain.train.distributed.trainer import dist_train_step, wrap_policy
    from posttrain.train.optim import build_optimizer, build_scheduler
    seen = {"fsdp2": set(), "ddp": set()}
    kind = ["fsdp2"]
    real_rs, real_ar = dist.reduce_scatter_single, dist.all_reduce

    def rs(*args, **kw):
        seen[kind[0]].add(str(kw.get("input", args[1] if len(args) > 1 else None).dtype))
        return real_rs(*args, **kw)

    def ar(tensor, *args, **kw):
        if tensor.numel() > 64:  # gradient buckets, not the step's small metric / count reductions
            seen[kind[0]].add(str(tensor.dtype))
        return real_ar(tensor, *args, **kw)

    dist.reduce_scatter_single, dist.all_reduce = rs, ar
    out = {}
    for k, model, param_dtype in (("fsdp2", load(model_dir), torch.bfloat16),
                                  ("ddp", load(model_dir).to(torch.bfloat16), None)):
        kind[0] = k
        policy = wrap_policy(model, k, param_dtype=param_dtype)
        opt = build_optimizer(policy.model, cfg.optim)
        metrics = dist_train_step(policy, None, opt, build_scheduler(opt, cfg.optim, 10),
                                  groups if rank == 0 else None, cfg, pad_id=pad_id)
        grads_dtype = sorted({str(p.dtype) for p in policy.model.parameters()})
        out[k] = {"collective_dtypes": sorted(seen[k]), "param_dtypes": grads_dtype,
                  "reduce_dtype": str(policy.reduce_dtype), "skipped": metrics["skipped_updates"]}
    return out


def listening_sockets(rank: int, world_size: int) -> list[str]:
    """Inside a joined group: every TCP socket listening on this machine now ("addr:port", hex as in
    /proc/net/tcp*): the test compares them with those listening before the job started."""
    import torch.distributed as dist

    dist.barrier()
    found = sorted(listening())
    dist.barrier()
    return found


def listening() -> set[str]:
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                out.add(fields[1])
    return out
