"""`VLLMEngine`: the `Engine` protocol on an in-process `vllm.LLM` (GPU machines; the optional
extra `pip install 'posttrain[vllm]'`). Nothing here imports vllm until an engine is built.

- Prompts go in as token ids; each request gets vLLM sampling params from `vllm_sampling_kwargs`
  (a pure function): `ignore_eos` with the caller's `stop_token_ids` only, stop strings, top-k
  (0 -> -1, "off" in every vLLM version), top-p, min-p, a seed per request (unseeded requests draw
  one with `request_seed`, as every engine does), and `logprobs=0`: the sampled token's logprob.
- `completion_from_output` (pure) turns a vLLM `CompletionOutput` into a `Completion`.
- `update_weights` loads a trainer state dict (HF names) through the model's own `load_weights`,
  as verl and OpenRLHF do, then resets the prefix cache (its KV was computed under old weights).
  It reaches the model in-process (V0, or V1 with VLLM_ENABLE_V1_MULTIPROCESSING=0, which is what
  a colocated trainer with tensor parallel 1 should use); otherwise it sends the tensors to each
  worker with `collective_rpc`, which pickles them (VLLM_ALLOW_INSECURE_SERIALIZATION=1) and is
  correct only for tensor parallel 1.

Logprob caveat: vLLM's default `logprobs_mode="raw_logprobs"` is log_softmax(logits) at T = 1,
which is our contract at temperature 1 and 0. For other temperatures build the engine with
`logprobs_mode="processed_logprobs"` (after temperature; equal to the contract when top-k, top-p
and min-p are off, since vLLM reports them after truncation). vLLM also applies min-p before
top-k/top-p, our `sample_next` after: the same parameters sample slightly different distributions
when min-p is combined with the others. A warning says so once when it matters.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping, Sequence

import torch

from posttrain.engine.protocol import Completion, SamplingParams, check_batch, request_seed

log = logging.getLogger(__name__)

INSTALL_HINT = "the vllm engine needs vLLM (CUDA machines): pip install 'posttrain[vllm]'"


def require_vllm():
    """The vllm module, or an ImportError that says how to install it."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return vllm


def vllm_sampling_kwargs(p: SamplingParams, seed: int) -> dict[str, Any]:
    """Keyword arguments for `vllm.SamplingParams` that keep our `Engine` contract for `p`."""
    return {
        "n": 1, "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k if p.top_k > 0 else -1,
        "min_p": p.min_p, "seed": seed, "max_tokens": p.max_tokens, "stop": list(p.stop),
        "stop_token_ids": list(p.stop_token_ids), "ignore_eos": True, "logprobs": 0,
        "detokenize": bool(p.stop),  # stop strings need the text; token ids alone do not
        "skip_special_tokens": False,
    }


def logprob_caveat(p: SamplingParams, logprobs_mode: str | None) -> str | None:
    """Why vLLM's reported logprobs would differ from the contract for `p`, or None."""
    mode = logprobs_mode or "raw_logprobs"
    if mode == "raw_logprobs" and p.temperature not in (0.0, 1.0):
        return f"temperature {p.temperature} with logprobs_mode raw_logprobs reports T=1 logprobs"
    if mode == "processed_logprobs" and p.temperature > 0 and (p.top_k > 0 or p.top_p < 1 or p.min_p > 0):
        return "processed_logprobs are reported after top-k/top-p/min-p truncation"
    if mode not in ("raw_logprobs", "processed_logprobs"):
        return f"logprobs_mode {mode} does not report logprobs"
    return None


def _logprob_of(entry: Any, token: int) -> float:
    """The sampled token's logprob from one position of vLLM's logprobs (a dict of Logprob)."""
    try:
        value = entry[token]
    except (KeyError, IndexError, TypeError):
        return math.nan
    return float(getattr(value, "logprob", value))


def completion_from_output(out: Any) -> Completion:
    """A vLLM CompletionOutput (token_ids, logprobs: one {token: Logprob} per position or None,
    finish_reason) as a Completion; logprobs are NaN where vLLM gave none."""
    ids = tuple(int(t) for t in out.token_ids)
    if out.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM ended a request with finish_reason {out.finish_reason!r}")
    if out.logprobs is None:
        logprobs = (math.nan,) * len(ids)
    else:
        logprobs = tuple(_logprob_of(out.logprobs[i], tok) for i, tok in enumerate(ids))
    return Completion(ids, logprobs, out.finish_reason)


_MODEL_PATHS = (
    ("llm_engine", "model_executor", "driver_worker", "worker", "model_runner", "model"),
    ("llm_engine", "engine_core", "engine_core", "model_executor", "driver_worker", "worker", "model_runner", "model"),
    ("llm_engine", "model_executor", "driver_worker", "model_runner", "model"),
)


def _inprocess_model(llm: Any) -> Any:
    for path in _MODEL_PATHS:
        obj = llm
        for name in path:
            obj = getattr(obj, name, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "load_weights"):
            return obj
    return None


def _load_on_worker(worker: Any, state_dict: dict) -> int:  # runs inside a vLLM worker
    loaded = worker.model_runner.model.load_weights(weights=iter(state_dict.items()))
    return len(loaded) if loaded is not None else -1


class VLLMEngine:
    """Implements `Engine` on `vllm.LLM(model=model_path, **llm_options)`."""

    def __init__(self, model_path: str, *, tokenizer: Any = None, logprobs_mode: str | None = None,
                 **llm_options: Any):
        vllm = require_vllm()
        options = {"model": model_path, "enable_prefix_caching": True, **llm_options}
        if logprobs_mode is not None:
            options["logprobs_mode"] = logprobs_mode
        self.llm = vllm.LLM(**options)
        self._params_cls = vllm.SamplingParams
        self.tokenizer = tokenizer
        self.logprobs_mode = logprobs_mode
        self.version = 0
        self._warned = False

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        check_batch(prompts, params)
        caveat = next((c for p in params if (c := logprob_caveat(p, self.logprobs_mode))), None)
        if caveat and not self._warned:
            log.warning("vllm engine: logprobs differ from the sampler contract: %s", caveat)
            self._warned = True
        seeds = [request_seed(p) for p in params]
        vllm_params = [self._params_cls(**vllm_sampling_kwargs(p, s)) for p, s in zip(params, seeds)]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], vllm_params, use_tqdm=False)
        return [completion_from_output(o.outputs[0]) for o in outputs]

    @property
    def sleeping(self) -> bool:
        return getattr(self, "_asleep", False)

    def pause(self) -> None:
        """Before a colocated trainer's update: with `enable_sleep_mode=True`, vLLM's sleep level 1
        (weights offloaded to CPU, the KV cache dropped: the GPU memory goes to the trainer); without
        it nothing is freed. The async client (engine/client.py) already holds requests meanwhile."""
        if self.llm.llm_engine.vllm_config.model_config.enable_sleep_mode and not self.sleeping:
            self.llm.sleep(level=1)
            self._asleep = True

    def resume(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self._asleep = False

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load `state_dict` (HF parameter names) into vLLM's model in place, then set `version`
        (a paused engine is woken first, as loading needs its weights on the GPU)."""
        self.resume()
        model = _inprocess_model(self.llm)
        if model is not None:
            model.load_weights(weights=iter(state_dict.items()))
        else:
            cpu = {k: v.detach().to("cpu") for k, v in state_dict.items()}
            self.llm.collective_rpc(_load_on_worker, args=(cpu,))
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()
        self.version = int(version)


def make_engine(model_or_path: Any, tokenizer: Any = None, **options: Any) -> VLLMEngine:
    """`ENGINES["vllm"]`: a path or hub id; options go to VLLMEngine / vllm.LLM
    (gpu_memory_utilization, dtype, max_model_len, tensor_parallel_size, logprobs_mode, ...)."""
    if not isinstance(model_or_path, (str, bytes)) and not hasattr(model_or_path, "__fspath__"):
        raise ValueError("the vllm engine loads a model by path; got a model object (use the hf or paged engine)")
    return VLLMEngine(str(model_or_path), tokenizer=tokenizer, **options)
