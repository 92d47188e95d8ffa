"""Configuration of scale-out: where rollout, environments and the trainer run, and how weights move.

    cluster:
      backend: local            # local (default: one process, the debugging path) | ray
      address: null             # ray: an existing cluster's address; null starts a local one
      rollout_workers: 2        # ray: rollout-worker actors, each with its own engine
      trainer: single           # single | ddp | fsdp2 (torch.distributed, gloo on CPU, nccl on GPUs)
      world_size: 1             # trainer ranks (ddp / fsdp2)
      weight_sync:
        transport: inprocess    # inprocess | directory | dist
        pause: abort            # in-flight requests at a sync: finish (on the old weights) | abort
                                # (and re-queue: recomputed on the new ones) | continue (on the new ones)
        dir: null               # directory transport: where versions are written (default RUN_DIR/weights)

Only the parts that exist are here; each field names the module that reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from posttrain.config.base import Strict


class WeightSyncConfig(Strict):
    transport: Literal["inprocess", "directory", "dist"] = "inprocess"  # engine/weight_sync.py
    pause: Literal["finish", "abort", "continue"] = "abort"  # engine/client.py AsyncEngine.sync_weights
    dir: str | None = None


class ClusterConfig(Strict):
    backend: Literal["local", "ray"] = "local"  # posttrain/scale/
    address: str | None = None  # ray: "host:port" of a running cluster (ray://... for Ray Client); None: local
    rollout_workers: int = Field(1, gt=0)
    trainer: Literal["single", "ddp", "fsdp2"] = "single"  # posttrain/train/distributed/
    world_size: int = Field(1, gt=0)
    weight_sync: WeightSyncConfig = WeightSyncConfig()

    @model_validator(mode="after")
    def _check(self) -> "ClusterConfig":
        if self.trainer == "single" and self.world_size != 1:
            raise ValueError(f"cluster.world_size={self.world_size} needs cluster.trainer=ddp or fsdp2")
        if self.address is not None and self.backend != "ray":
            raise ValueError("cluster.address is for cluster.backend=ray")
        return self
