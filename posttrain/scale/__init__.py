"""`cluster.backend: ray`: rollout and sandbox workers as Ray actors, supervised.

    backend.py     make_engine_for, install_sandbox_for: what the recipe calls (below)
    ray_init.py    connect(cfg.cluster): a loopback-only local cluster, or an existing one by address
    engine.py      RolloutWorker actors behind RayEngine (a plain `Engine`)
    sandbox.py     SandboxWorker actors behind RaySandbox (a `Sandbox`)
    supervisor.py  what a dead worker is, and the one-line record of each death

The recipe calls `backend.make_engine_for(cfg, tokenizer, device)` in place of `ENGINES[...](...)`, and
`install_sandbox_for(cfg)` once; with `cluster.backend: local` both do what the recipe did before.
Ray is an optional extra (`pip install posttrain[ray]`): it is imported only for backend ray.
The trainer stays in the driver (or torch.distributed: train/trainer.py).
"""
