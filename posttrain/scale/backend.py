"""What the RL recipe calls for `cluster.backend`: its rollout engine and its sandbox (local or Ray)."""

from __future__ import annotations

from typing import Any

from posttrain.engine.options import engine_options
from posttrain.engine.registry import ENGINES

DEFAULT_SANDBOX_WORKERS = 2


def make_engine_for(cfg: Any, tokenizer: Any, device: Any) -> Any:
    """The rollout engine of an RL config: `ENGINES[cfg.rollout.engine]` in this process (backend
    local), or a `RayEngine` over `cfg.cluster.rollout_workers` actors (backend ray; connects first).
    On a CUDA driver each worker asks Ray for one GPU and builds its engine on "cuda"."""
    options = engine_options(cfg.rollout, dtype=cfg.model.dtype, device=device)
    if cfg.cluster.backend != "ray":
        return ENGINES[cfg.rollout.engine](cfg.model.path, tokenizer, **options)
    from posttrain.scale.ray_init import connect

    connect(cfg.cluster)  # before anything imports ray (it reads its environment at import)
    from posttrain.scale.engine import RayEngine

    workers = cfg.cluster.rollout_workers
    cuda = str(options.get("device", "cpu")).startswith("cuda")
    if "device" in options:
        options["device"] = "cuda" if cuda else str(options["device"])  # the worker's own (Ray-assigned) GPU
    return RayEngine(cfg.rollout.engine, cfg.model.path, tokenizer, options, workers=workers,
                     num_cpus=cpu_share(workers + DEFAULT_SANDBOX_WORKERS), num_gpus=1 if cuda else 0)


def cpu_share(actors: int) -> float:
    """Ray CPUs per actor so that `actors` of them fit the cluster at once: 1, or the cluster's CPU
    count / actors when smaller (on a 2-core machine 2 rollout + 2 sandbox workers get 0.5 each;
    Ray's CPUs only place actors, they do not limit what an actor uses)."""
    import ray

    return min(1.0, float(ray.cluster_resources().get("CPU", 1)) / max(1, actors))


def install_sandbox_for(cfg: Any, workers: int = DEFAULT_SANDBOX_WORKERS) -> Any:
    """Backend ray: a `RaySandbox` of `workers` actors becomes the sandbox the verifiers and
    environments use (`sandbox.default.set_sandbox`), and is returned. Backend local: None (they
    keep their own LocalSandbox)."""
    if cfg.cluster.backend != "ray":
        return None
    from posttrain.scale.ray_init import connect

    connect(cfg.cluster)  # before anything imports ray
    from posttrain.scale.sandbox import RaySandbox
    from posttrain.sandbox.default import set_sandbox

    sandbox = RaySandbox(workers=workers, max_queue=256, num_cpus=cpu_share(cfg.cluster.rollout_workers + workers))
    set_sandbox(sandbox)
    return sandbox
