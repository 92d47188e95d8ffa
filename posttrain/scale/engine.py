"""Rollout workers as Ray actors, behind `RayEngine`: a plain `Engine` for the driver.

    engine = RayEngine("paged", model_path, tokenizer, {"device": "cpu"}, workers=2)
    completions = engine.generate(prompts, params)     # split over the workers, gathered in order
    engine.update_weights(state_dict, version=3)       # one ray.put; every worker loads that object
    engine.faults                                      # one `Fault` per dead worker, .line() to print

Each `RolloutWorker` actor builds `ENGINES[name](model_path, tokenizer, **options)` in its own
process. `RayEngine` is a plain (non-stepping) engine: `AsyncEngine` / `EngineRunner` hand it each
batch window as one `generate` call, so the recipe and the scheduler do not change.

Assignment is deterministic: request i goes to worker i mod N. Seeds are fixed on the driver first
(a request without one gets `request_seed` drawn here, in request order, as a local engine would
draw it), so a batch's completions equal one local engine's for the same seeds, and a re-run on a
replacement gives the tokens the dead worker would have given.

Supervision: workers run with `max_restarts=0`. When a worker dies during `generate` (SIGKILL,
OOM, lost node), a replacement actor is started that loads the LATEST weights and version in its
constructor, before it takes any call; exactly the dead worker's requests are re-submitted to it,
once; a second death of the same shard in one call raises `TrainingError`. Each death is recorded
as a `Fault` and logged as one line ("rollout worker 1 died (...): restarted at version V,
re-queued K requests"). A death during `update_weights` is replaced the same way (nothing to
re-queue). Not handled here: a worker that hangs without dying (no call timeout), the driver's own
death, streaming (`SteppingEngine`) over Ray.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any, Mapping, Sequence

import ray
import torch

from posttrain.scale.supervisor import Fault, cause_of, death_errors, not_started, record
from posttrain.core.errors import ModelLoadError, TrainingError
from posttrain.engine.protocol import Completion, SamplingParams, check_batch, request_seed


from posttrain.engine.registry import ENGINES


@ray.remote(max_restarts=0, concurrency_groups={"control": 1})
class RolloutWorker:
    """One engine in one actor process. `generate` / `update_weights` run one at a time; `info`
    answers meanwhile (its own concurrency group), so a supervisor can see a busy worker."""

    def __init__(self, index: int, engine: str, model_path: str, tokenizer: Any, options: Mapping[str, Any],
                 weights: list | None = None, version: int = 0):
        self.index, self.busy, self.loaded_from = index, False, None
        self.calls = self.requests = 0  # generate calls and requests served by this actor
        self.engine = ENGINES[engine](model_path, tokenizer, **dict(options))
        if weights:  # a replacement: the latest weights before the first request
            self.update_weights(weights, version)

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        self.busy, self.calls, self.requests = True, self.calls + 1, self.requests + len(prompts)
        try:
            return self.engine.generate(prompts, params)
        finally:
            self.busy = False

    def update_weights(self, weights: list, version: int) -> int:
        """`weights` is [ObjectRef of the state dict] (a list, so Ray passes the ref, not its value)."""
        (ref,) = weights
        self.engine.update_weights(ray.get(ref), version)
        self.loaded_from = ref.hex()
        return int(self.engine.version)

    def reset_prefix_cache(self) -> None:
        reset = getattr(self.engine, "reset_prefix_cache", None)
        if reset is not None:
            reset()

    @ray.method(concurrency_group="control")
    def info(self) -> dict:
        return {"index": self.index, "pid": os.getpid(), "version": int(self.engine.version), "busy": self.busy,
                "calls": self.calls, "requests": self.requests,
                "weights_object": self.loaded_from, "node_ip": ray.util.get_node_ip_address(),
                "weights_precision": str(getattr(self.engine, "weights_precision", "exact"))}


class RayEngine:
    """Implements `Engine` over N `RolloutWorker` actors (see the module docstring).
    `num_cpus` / `num_gpus` are each worker's Ray resources (num_gpus=1: Ray gives it one GPU); a
    worker not serving within `start_timeout_s` (not placeable, or its engine still loading) fails
    the start with one line."""

    def __init__(self, engine: str, model_path: str, tokenizer: Any = None, options: Mapping[str, Any] | None = None,
                 *, workers: int = 1, num_cpus: float = 1, num_gpus: float = 0,
                 start_timeout_s: float = 600.0):
        if engine not in ENGINES:
            from posttrain.core.errors import ConfigError

            raise ConfigError(f"rollout.engine: unknown {engine!r} (expected one of {sorted(ENGINES)})")
        if workers < 1:
            raise ValueError("RayEngine: workers must be >= 1")
        self.engine_name, self.model_path = engine, str(model_path)
        self._tokenizer = ray.put(tokenizer)
        self._options = dict(options or {})
        self._resources = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        self._weights: Any = None  # ObjectRef of the latest state dict (None: the model path's weights)
        self._lock = threading.Lock()
        self.start_timeout_s = start_timeout_s
        self.version = 0
        self.faults: list[Fault] = []
        self.requeued = 0  # requests re-submitted after deaths, over this engine's life
        self.weight_puts = 0  # ray.put calls of a state dict (one per update_weights)
        actors = [self._start(i) for i in range(workers)]
        self._workers: list[Any] = []
        for i, actor in enumerate(actors):
            try:
                ray.get(actor.info.remote(), timeout=self.start_timeout_s)
            except ray.exceptions.GetTimeoutError:
                self.close(actors)
                raise not_started("rollout", i, self.start_timeout_s, self._resources) from None
            except death_errors() as e:
                self.close(actors)
                raise ModelLoadError(f"rollout worker {i} could not start {engine!r} on {self.model_path}: "
                                     f"{cause_of(e)}") from None
            self._workers.append(actor)
        self.weights_precision = self.worker_info()[0]["weights_precision"]

    # ---- Engine

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        check_batch(prompts, params)
        params = [p if p.seed is not None else replace(p, seed=request_seed(p)) for p in params]
        prompts = [list(p) for p in prompts]
        n = len(self._workers)
        out: list[Completion | None] = [None] * len(prompts)
        pending: dict[Any, tuple[int, list[int], int]] = {}  # ref -> (worker, request indices, attempt)
        for w in range(n):
            idx = list(range(w, len(prompts), n))
            if idx:
                pending[self._submit(w, idx, prompts, params)] = (w, idx, 0)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            w, idx, attempt = pending.pop(ref)
            try:
                results = ray.get(ref)
            except death_errors() as e:
                if attempt > 0:
                    raise TrainingError(f"rollout worker {w} died again on the same {len(idx)} requests "
                                        f"({cause_of(e)}); not re-queued a second time") from None
                self._replace(w, e, requeued=len(idx))
                pending[self._submit(w, idx, prompts, params)] = (w, idx, attempt + 1)
                continue
            for i, c in zip(idx, results):
                out[i] = c
        return out  # type: ignore[return-value]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        cpu = {k: v.detach().to("cpu") for k, v in state_dict.items()}
        ref = ray.put(cpu)
        self.weight_puts += 1
        with self._lock:
            self._weights, self.version = ref, int(version)  # what any replacement loads from now on
        # a worker that died is replaced on these weights (set above): nothing to resend
        self._each("update_weights", [ref], int(version), again=False)

    def reset_prefix_cache(self) -> None:
        self._each("reset_prefix_cache", again=False)  # a replacement starts with an empty cache

    # ---- supervision and introspection

    def worker_info(self) -> list[dict]:
        """Per worker: index, pid, version, busy, calls, requests, weights_object (the ObjectRef hex it
        loaded last), node_ip, weights_precision."""
        return self._each("info")

    def _each(self, method: str, *args: Any, again: bool = True) -> list:
        """`method(*args)` on every worker, through the supervisor: a worker that died is replaced
        (on the latest weights) and, when `again`, asked once more; the fault is recorded, never raised."""
        calls = [(w, getattr(actor, method).remote(*args)) for w, actor in enumerate(self._workers)]
        out = []
        for w, call in calls:
            try:
                out.append(ray.get(call))
            except death_errors() as e:
                self._replace(w, e, requeued=0)
                out.append(ray.get(getattr(self._workers[w], method).remote(*args)) if again else None)
        return out

    def close(self, actors: list | None = None) -> None:
        for a in actors if actors is not None else self._workers:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # already dead or Ray gone: nothing left to stop
                pass

    def _start(self, index: int) -> Any:
        weights = [self._weights] if self._weights is not None else None
        return RolloutWorker.options(**self._resources).remote(
            index, self.engine_name, self.model_path, self._tokenizer, self._options, weights, self.version)

    def _submit(self, w: int, idx: list[int], prompts: list, params: list) -> Any:
        return self._workers[w].generate.remote([prompts[i] for i in idx], [params[i] for i in idx])

    def _replace(self, w: int, exc: BaseException, requeued: int) -> None:
        """Start worker w's replacement on the latest weights and wait until it serves."""
        with self._lock:
            self.close([self._workers[w]])
            actor = self._start(w)
            try:
                info = ray.get(actor.info.remote())
            except death_errors() as e:
                raise TrainingError(f"rollout worker {w} died ({cause_of(exc)}) and its replacement did not "
                                    f"start ({cause_of(e)})") from None
            self._workers[w] = actor
            self.requeued += requeued
            record(self.faults, Fault("rollout", w, cause_of(exc), requeued, version=info["version"]))
