"""RayEngine over 2 rollout-worker actors on a local cluster: the same completions as one local
engine, weights reaching every worker from one object, and a worker SIGKILLed mid-batch."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from posttrain.engine.protocol import SamplingParams

from posttrain.engine.registry import ENGINES

OPTIONS = {"device": "cpu", "dtype": "float32"}


@pytest.fixture(scope="module")
def engine(ray_cluster, tiny_model_dir, tiny_tokenizer):
    from posttrain.scale.engine import RayEngine

    eng = RayEngine("paged", tiny_model_dir, tiny_tokenizer, OPTIONS, workers=2, num_cpus=0.5)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def batch(tiny_tokenizer):
    prompts = [tiny_tokenizer(f"Calculate {i} + {2 * i}.", add_special_tokens=False)["input_ids"] for i in range(6)]
    params = [SamplingParams(temperature=1.0, max_tokens=24, seed=100 + i) for i in range(6)]
    params[2] = SamplingParams(temperature=0.0, max_tokens=24)  # greedy, no seed
    return prompts, params


@pytest.fixture(scope="module")
def sharp_state(tiny_model_dir):
    from posttrain.core.hf import load_model

    model = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    return {k: (v * 10.0 if v.dim() == 2 else v).detach().clone() for k, v in model.state_dict().items()}


def same(ours, theirs) -> None:
    """Tokens and finish reasons exactly; logprobs to float32 rounding (a different batch is a
    different summation order; the local engine differs from itself across batches as much)."""
    assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    assert [c.finish_reason for c in ours] == [c.finish_reason for c in theirs]
    for a, b in zip(ours, theirs):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_two_workers_give_the_local_engines_completions_in_order(engine, batch, tiny_model_dir, tiny_tokenizer):
    prompts, params = batch
    before = [i["requests"] for i in engine.worker_info()]
    torch.manual_seed(0)  # the unseeded request's draw: made on the driver, as the local engine makes it
    ours = engine.generate(prompts, params)
    local = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, **OPTIONS)
    torch.manual_seed(0)
    same(ours, local.generate(prompts, params))
    info = engine.worker_info()
    assert [i["requests"] - b for i, b in zip(info, before)] == [3, 3]  # request i on worker i mod 2
    assert len({i["pid"] for i in info}) == 2 and os.getpid() not in {i["pid"] for i in info}
    assert engine.weights_precision == "exact"


def test_update_weights_reaches_every_worker_from_one_object(engine, batch, sharp_state, tiny_model_dir,
                                                             tiny_tokenizer):
    prompts, params = batch
    seeded = [p for p in params if p.seed is not None]
    seeded_prompts = [p for p, q in zip(prompts, params) if q.seed is not None]
    old = engine.generate(seeded_prompts, seeded)
    puts = engine.weight_puts
    engine.update_weights(sharp_state, version=3)
    info = engine.worker_info()
    assert engine.version == 3 and [i["version"] for i in info] == [3, 3]
    assert engine.weight_puts == puts + 1
    assert info[0]["weights_object"] is not None and info[0]["weights_object"] == info[1]["weights_object"]
    new = engine.generate(seeded_prompts, seeded)
    local = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, **OPTIONS)
    local.update_weights(sharp_state, 3)
    same(new, local.generate(seeded_prompts, seeded))
    assert [c.token_ids for c in new] != [c.token_ids for c in old]


def test_a_worker_killed_mid_batch_is_replaced_on_the_latest_weights_and_only_its_requests_rerun(
        engine, sharp_state, tiny_tokenizer):
    if engine.version == 0:
        engine.update_weights(sharp_state, version=3)
    prompts = [tiny_tokenizer(f"We add {i} and", add_special_tokens=False)["input_ids"] for i in range(16)]
    params = [SamplingParams(temperature=1.0, max_tokens=800, seed=7 * i) for i in range(16)]
    reference = engine.generate(prompts, params)  # the undisturbed run
    assert all(len(c.token_ids) > 100 for c in reference)
    faults_before = len(engine.faults)
    info = engine.worker_info()
    victim_pid, calls0 = info[1]["pid"], info[0]["calls"]
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", engine.generate(prompts, params)))
    thread.start()
    deadline = time.monotonic() + 60
    while not engine.worker_info()[1]["busy"]:  # mid-batch: worker 1 is inside generate
        assert time.monotonic() < deadline, "worker 1 never started its shard"
        time.sleep(0.005)
    os.kill(victim_pid, signal.SIGKILL)
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert out["result"] == reference  # same shard, same weights, same seeds: bit-identical
    [fault] = engine.faults[faults_before:]
    assert (fault.role, fault.worker, fault.requeued, fault.version) == ("rollout", 1, 8, engine.version)
    assert fault.line().startswith("rollout worker 1 died (") and fault.line().endswith(
        f"restarted at version {engine.version}, re-queued 8 requests")
    after = engine.worker_info()
    assert after[1]["pid"] != victim_pid and after[1]["version"] == engine.version
    assert (after[1]["calls"], after[1]["requests"]) == (1, 8)  # the replacement served the dead shard once
    assert after[0]["calls"] == calls0 + 1  # worker 0's shard was not re-run
    assert engine.requeued >= 8


@pytest.mark.parametrize("call", ["reset_prefix_cache", "worker_info", "update_weights"])
def test_a_worker_dead_at_any_call_site_is_replaced_never_raised(engine, sharp_state, call):
    """Every call into the workers goes through the supervisor: a worker killed between two calls
    (as after a held-out eval, before reset_prefix_cache) is replaced on the latest weights."""
    info = engine.worker_info()
    faults_before = len(engine.faults)
    os.kill(info[0]["pid"], signal.SIGKILL)
    time.sleep(0.5)
    if call == "update_weights":
        engine.update_weights(sharp_state, version=engine.version + 1)
    else:
        getattr(engine, call)()
    [fault] = engine.faults[faults_before:]
    assert (fault.role, fault.worker, fault.version) == ("rollout", 0, engine.version)
    after = engine.worker_info()
    assert after[0]["pid"] != info[0]["pid"] and [i["version"] for i in after] == [engine.version] * 2


def test_make_engine_for_picks_the_backend_from_the_config(ray_cluster, tiny_model_dir, tiny_tokenizer, batch):
    from posttrain.scale.backend import install_sandbox_for, make_engine_for
    from posttrain.scale.engine import RayEngine
    from posttrain.config.base import load_config
    from posttrain.config.rl import RLConfig
    from posttrain.engine.paged import PagedEngine

    base = [f"model.path={tiny_model_dir}", "rollout.engine=paged", "model.dtype=float32"]
    local_cfg = load_config(RLConfig, None, base)
    assert isinstance(make_engine_for(local_cfg, tiny_tokenizer, torch.device("cpu")), PagedEngine)
    assert install_sandbox_for(local_cfg) is None
    ray_cfg = load_config(RLConfig, None, [*base, "cluster.backend=ray", "cluster.rollout_workers=1"])
    eng = make_engine_for(ray_cfg, tiny_tokenizer, torch.device("cpu"))  # joins the running cluster
    try:
        assert isinstance(eng, RayEngine) and len(eng.worker_info()) == 1
        prompts, params = batch
        seeded = [p for p in params if p.seed is not None]
        local = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, **OPTIONS)
        same(eng.generate(prompts[:len(seeded)], seeded), local.generate(prompts[:len(seeded)], seeded))
    finally:
        eng.close()


def test_the_async_client_of_the_recipe_drives_it_unchanged(engine, batch, sharp_state):
    import asyncio

    from posttrain.engine.client import AsyncEngine
    from posttrain.engine.weight_sync import InProcessTransport

    prompts, params = batch
    prompts, params = prompts[:2] + prompts[3:], params[:2] + params[3:]  # seeded ones
    transport = InProcessTransport()
    target = engine.version + 1
    transport.send(sharp_state, target)

    async def episodes():
        async with AsyncEngine(engine) as client:
            await client.sync_weights(transport, target, pause="abort")  # the recipe's weight sync
            out = await asyncio.gather(*(client.generate_versioned(p, q) for p, q in zip(prompts, params)))
            return [c for c, _ in out], {v for _, v in out}

    completions, versions = asyncio.run(episodes())
    assert versions == {target} and [i["version"] for i in engine.worker_info()] == [target, target]
    assert [c.token_ids for c in completions] == [c.token_ids for c in engine.generate(prompts, params)]
