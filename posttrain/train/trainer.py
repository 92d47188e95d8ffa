"""The RL trainer behind one protocol, whether it runs here or on torch.distributed ranks.

    trainer = make_trainer(cfg, pad_id=tok.pad_token_id, device=device)   # cluster.trainer: single | ddp | fsdp2
    metrics = trainer.train_step(groups, version)   # train/step.py's update (on every rank)
    state = trainer.engine_weights()                # what the rollout engine gets at sync
    model = trainer.full_model()                    # one plain HF model: checkpoints, export, best model
    trainer.model, .ref, .optimizer, .scheduler     # what checkpoint.py saves and loads (rank 0's)
    trainer.save(path); trainer.load(path)          # state beyond rank 0's model (DCP), else nothing
    trainer.close()

`LocalTrainer` holds the policy (fp32 master weights, LoRA when `model.lora`), the reference model
(only when kl_coef > 0), AdamW and the LR schedule in this process. `DistTrainer`
(train/distributed/rl_worker.py) is rank 0's handle on N ranks under DDP or FSDP2; under FSDP2 it
gathers the full weights into a host copy for `full_model`.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from posttrain.core.types import Group
from posttrain.train.distributed.rl_worker import spawn_trainer_ranks
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.policy import load_policy
from posttrain.train.step import train_step
from posttrain.train.weights import engine_state_dict


class Trainer(Protocol):
    model: Any
    ref: Any
    optimizer: Any
    scheduler: Any
    has_state: bool  # save/load write and read state of their own (a checkpoint's trainer/)

    def train_step(self, groups: Sequence[Group], version: int) -> dict: ...

    def engine_weights(self) -> dict: ...

    def full_model(self) -> Any: ...

    def save(self, path) -> None: ...

    def load(self, path) -> None: ...

    def close(self) -> None: ...


class LocalTrainer:
    """The trainer in this process (see the module docstring)."""

    has_state = False  # checkpoint.py saves its model, optimizer and schedule itself

    def __init__(self, cfg, *, pad_id: int, device, total_updates: int):
        self.cfg, self.pad_id, self.device = cfg, pad_id, device
        self.model, self.ref = load_policy(cfg, device)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, total_updates)

    def train_step(self, groups: Sequence[Group], version: int) -> dict:
        return train_step(self.model, self.ref, self.optimizer, self.scheduler, groups, self.cfg,
                          pad_id=self.pad_id, device=self.device, version=version)

    def engine_weights(self) -> dict:
        return engine_state_dict(self.model)

    def full_model(self) -> Any:
        return self.model

    def save(self, path) -> None:
        pass

    def load(self, path) -> None:
        pass

    def close(self) -> None:
        pass


def make_trainer(cfg, *, pad_id: int, device) -> Trainer:
    """The trainer `cluster.trainer` names: single (LocalTrainer) or ddp | fsdp2 (DistTrainer, this
    process being rank 0)."""
    total = cfg.train.steps * cfg.train.updates_per_step
    if cfg.cluster.trainer != "single":
        return spawn_trainer_ranks(cfg, total_updates=total, pad_id=pad_id, device=device)
    return LocalTrainer(cfg, pad_id=pad_id, device=device, total_updates=total)
