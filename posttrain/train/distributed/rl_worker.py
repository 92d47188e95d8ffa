"""The RL trainer on N ranks, driven from the main process (rank 0): train/trainer.py DistTrainer.

    trainer = spawn_trainer_ranks(cfg, total_updates=steps * updates_per_step, pad_id=tok.pad_token_id)
    metrics = trainer.train_step(groups)        # the Trainer protocol of train/trainer.py
    state = trainer.engine_weights()            # full_state_dict() under FSDP2; full_model() for checkpoints
    trainer.save(path) / trainer.load(path)     # model + optimizer + LR schedule through DCP
    trainer.close()

Ranks 1..N-1 are spawned processes; each loads the policy from `cfg.model.path` (the same
init on every rank; LoRA when cfg.model.lora), the reference when kl_coef > 0, wraps the
policy for `cfg.cluster.trainer` (ddp | fsdp2) and builds its own optimizer and LR schedule,
then waits for commands broadcast by rank 0 (broadcast_object_list): a step (the groups
follow, posttrain/train/distributed/trainer.py), a full state dict, a DCP save or load, stop. Rank 0 is
the calling process, which keeps doing rollouts, weight sync, logging and checkpoints.
A rank that fails makes the next call raise one TrainingError line naming it.

What it does not do: several hosts; a merged LoRA state for the engine under FSDP2
(`full_state_dict` returns the peft model's own keys; DDP's `model` is the plain peft model,
so train/weights.py engine_state_dict works on it).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from posttrain.train.distributed.checkpoint import load_dcp, save_dcp
from posttrain.train.distributed.group import free_port, init_group, rank_device, spawn_ranks, teardown
from posttrain.train.distributed.trainer import dist_train_step, wrap_policy
from posttrain.core.errors import ConfigError, TrainingError
from posttrain.core.hf import load_model
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.policy import load_policy
from posttrain.train.weights import engine_state_dict


def build_parts(cfg, total_updates: int, device) -> tuple:
    """(policy: DistPolicy, ref or None, optimizer, scheduler) of this rank, same init on every rank."""
    model, ref = load_policy(cfg, device)
    policy = wrap_policy(model, cfg.cluster.trainer)
    optimizer = build_optimizer(policy.model, cfg.optim)
    return policy, ref, optimizer, build_scheduler(optimizer, cfg.optim, total_updates)


def _command(cmd: tuple | None = None) -> tuple:
    box = [cmd]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def full_state_dict(policy) -> dict[str, torch.Tensor]:
    """The full weights on rank 0 (CPU under FSDP2; {} on the other ranks); a collective under FSDP2."""
    if policy.kind == "ddp":
        return {k: v.detach() for k, v in policy.model.state_dict().items()} if dist.get_rank() == 0 else {}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(policy.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _rank_main(rank: int, world: int, cfg, total_updates: int, pad_id: int) -> None:
    """A worker rank: build its parts, then serve rank 0's commands until "stop"."""
    device = rank_device()
    policy, ref, optimizer, scheduler = build_parts(cfg, total_updates, device)
    while True:
        cmd = _command()
        if cmd[0] == "stop":
            return
        if cmd[0] == "step":
            dist_train_step(policy, ref, optimizer, scheduler, None, cfg, pad_id=pad_id, device=device, version=cmd[1])
        elif cmd[0] == "state":
            full_state_dict(policy)
        elif cmd[0] == "save":
            save_dcp(cmd[1], policy, optimizer, scheduler)
        elif cmd[0] == "load":
            load_dcp(cmd[1], policy, optimizer, scheduler)
        else:
            raise TrainingError(f"trainer rank {rank}: unknown command {cmd[0]!r}")


class DistTrainer:
    """Rank 0's handle on the distributed trainer (see the module docstring)."""

    has_state = True  # every rank's model, optimizer and schedule, through DCP (a checkpoint's trainer/)

    def __init__(self, cfg, ranks, parts, pad_id: int, device):
        self.cfg, self.ranks, self.pad_id, self.device = cfg, ranks, pad_id, device
        self.policy, self.ref, self.optimizer, self.scheduler = parts
        self.closed = False
        # FSDP2: rank 0 holds shards; a whole plain copy for checkpoints and export
        self.host = load_model(cfg.model.path, dtype="float32", device=device) if self.policy.kind == "fsdp2" else None

    @property
    def model(self):
        """Rank 0's HF model: DDP: the full current weights; FSDP2: DTensor shards (use full_state_dict)."""
        return self.policy.model

    def _call(self, cmd: tuple, fn):
        if self.closed:
            raise TrainingError("the distributed trainer is closed")
        self.ranks.check()
        try:
            _command(cmd)
            return fn()
        except (RuntimeError, dist.DistBackendError) as e:
            self.ranks.check()  # a worker died: name it
            raise TrainingError(f"trainer rank 0: {' '.join(str(e).split())[:300]}") from None

    def train_step(self, groups, version: int | None = None) -> dict:
        """dist_train_step on `groups` over all ranks; the global metrics (no groups: no update)."""
        if not groups:
            return {"skipped_updates": 1}
        return self._call(("step", version), lambda: dist_train_step(
            self.policy, self.ref, self.optimizer, self.scheduler, groups, self.cfg, pad_id=self.pad_id,
            device=self.device, version=version))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The full current weights (for engine.update_weights, save_pretrained)."""
        if self.policy.kind == "ddp":  # rank 0 holds them: no collective needed
            return full_state_dict(self.policy)
        return self._call(("state",), lambda: full_state_dict(self.policy))

    def engine_weights(self) -> dict[str, torch.Tensor]:
        """What the rollout engine gets at sync: the full weights (train/weights.py's form under DDP)."""
        return self.full_state_dict() if self.host is not None else engine_state_dict(self.policy.model)

    def full_model(self):
        """The policy as one plain model (FSDP2: gathered into the host copy)."""
        if self.host is not None:
            self.host.load_state_dict(self.full_state_dict())
            return self.host
        return self.policy.model

    def save(self, path) -> None:
        """Model + optimizer + LR schedule of every rank to `path` (DCP, posttrain/train/distributed/checkpoint.py)."""
        self._call(("save", str(path)), lambda: save_dcp(path, self.policy, self.optimizer, self.scheduler))

    def load(self, path) -> None:
        self._call(("load", str(path)), lambda: load_dcp(path, self.policy, self.optimizer, self.scheduler))

    def close(self) -> None:
        """Stop the worker ranks and leave the process group (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.ranks.failure() is None:
                _command(("stop",))
                self.ranks.wait(timeout_s=60)
        finally:
            self.ranks.terminate()
            teardown()

    def __enter__(self) -> "DistTrainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def spawn_trainer_ranks(cfg, *, total_updates: int, pad_id: int, device=None, port: int | None = None,
                        timeout_s: float = 300.0) -> DistTrainer:
    """Start ranks 1..world_size-1, join the group as rank 0 here, build rank 0's parts."""
    world = cfg.cluster.world_size
    if cfg.cluster.trainer not in ("ddp", "fsdp2") or world < 2:
        raise ConfigError(f"cluster.trainer={cfg.cluster.trainer} with cluster.world_size={world}: "
                          "a distributed trainer needs ddp or fsdp2 and world_size >= 2")
    if dist.is_initialized():
        raise TrainingError("a torch.distributed process group already exists in this process")
    port = port or free_port()
    ranks = spawn_ranks(_rank_main, list(range(1, world)), world, port, cfg, total_updates, pad_id,
                        timeout_s=timeout_s)
    try:
        init_group(0, world, port, timeout_s=timeout_s)
        device = device if device is not None else rank_device()
        parts = build_parts(cfg, total_updates, device)
    except BaseException:
        failed = ranks.failure()
        ranks.terminate()
        teardown()
        if failed is not None:
            raise TrainingError(failed) from None
        raise
    return DistTrainer(cfg, ranks, parts, pad_id, device)
