"""Model + optimizer checkpoints through torch.distributed.checkpoint (DCP): saved on N ranks, loaded on M.

    save_dcp(path, policy, optimizer, scheduler)     # every rank calls it (a collective)
    load_dcp(path, model, optimizer, scheduler)      # N ranks, or ONE process without a process group

Layout of `path/`:
    .metadata, __<rank>_<n>.distcp   DCP: {"model": ..., "optim": ...} keyed by the HF model's own
                                     parameter names (no DDP "module." or wrapper prefix), so a
                                     plain single-process model loads it; FSDP2 ranks write their
                                     own shards, DDP's replicated tensors are written once
    scheduler.pt                     the LR scheduler's state_dict (rank 0; the same on every rank)

State dicts come from torch.distributed.checkpoint.state_dict get_state_dict / set_state_dict,
so FSDP2 DTensor shards are resharded to whatever the loading side has. A load into a fresh
optimizer initialises its state first (as the state_dict API does). Errors are one-line
CheckpointErrors naming the path.

What it does not do: the rest of a run's state (posttrain/checkpoint.py: tokenizer, config,
RNGs, extras), atomic install or rotation (write it into that checkpoint's `extra` folder).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from posttrain.core.errors import CheckpointError, one_line

SCHEDULER_FILE = "scheduler.pt"


def _model_of(policy):
    from posttrain.train.distributed.trainer import DistPolicy

    return policy.model if isinstance(policy, DistPolicy) else policy


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0




def save_dcp(path: str | os.PathLike, policy, optimizer=None, scheduler=None) -> Path:
    """Write the model (and optimizer, scheduler) to `path` (every rank calls it)."""
    path = Path(path)
    model = _model_of(policy)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if optimizer is None:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict
            state = {"model": get_model_state_dict(model)}
        else:
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optim": osd}
        dcp.save(state, checkpoint_id=str(path))
        if scheduler is not None and _rank() == 0:
            torch.save(scheduler.state_dict(), path / SCHEDULER_FILE)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
    except (OSError, RuntimeError, ValueError, dcp.api.CheckpointException) as e:
        raise CheckpointError(f"cannot write distributed checkpoint {path}: {one_line(e, None)}") from None
    return path


def load_dcp(path: str | os.PathLike, policy, optimizer=None, scheduler=None) -> None:
    """Load `path` into the model (and optimizer, scheduler) in place: on every rank of a process group,
    or in one process without one (then the model and optimizer are plain, unwrapped ones)."""
    path = Path(path)
    if not (path / ".metadata").is_file():
        why = "does not exist" if not path.exists() else "has no DCP .metadata"
        raise CheckpointError(f"distributed checkpoint {path} {why}")
    model = _model_of(policy)
    try:
        if optimizer is None:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
            state = {"model": get_model_state_dict(model)}
            dcp.load(state, checkpoint_id=str(path))
            set_model_state_dict(model, state["model"])
        else:
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=str(path))
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if scheduler is not None:
            f = path / SCHEDULER_FILE
            if not f.is_file():
                raise CheckpointError(f"distributed checkpoint {path} has no {SCHEDULER_FILE}")
            scheduler.load_state_dict(torch.load(f, weights_only=True))
    except CheckpointError:
        raise
    except (OSError, RuntimeError, ValueError, KeyError, dcp.api.CheckpointException) as e:
        raise CheckpointError(f"distributed checkpoint {path} does not fit this model/optimizer: {one_line(e, None)}") \
            from None
