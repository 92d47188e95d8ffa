"""`LlamaCppEngine`: the `SteppingEngine` protocol on llama.cpp (`llama-cpp-python`, optional; CPUs).

Why it exists: at batch 1 on a CPU, llama.cpp decodes faster than our paged engine at the same
weight precision (docs/benchmarks.md, "Batch-1 decoding vs llama.cpp"): its hand-written SIMD
kernels beat torch's matmuls on one row. `posttrain serve --engine llamacpp` therefore serves
through llama.cpp itself behind our own OpenAI-compatible server (same endpoints, errors,
streaming and chat templates). It is for serving, not for RL: it has no `update_weights` (a GGUF
file is fixed; export again), and its logits are llama.cpp's, not the trainer's fp32 weights.

    engine = make_engine("runs/sft/final-q8_0.gguf", tokenizer)
    engine = make_engine("runs/sft/final", tokenizer, gguf="runs/sft/final-q8_0.gguf")

- The engine reads a GGUF file; it does not export (the engine layer sits below `models`).
  `posttrain serve --engine llamacpp --model DIR` exports DIR first with `models.export.gguf_for`
  (f32 for `--mode standard`, q8_0 for `--mode fast`; once, beside the directory).
- One sequence at a time, in arrival order (llama.cpp's own server does the same per slot): a
  request waits until the one before it finishes. A new request reuses the KV of the longest
  prefix it shares with the previous one (a chat's earlier turns), as `Llama.generate` does.
- Sampling is ours (`sample_next` on llama.cpp's logits, one uniform per token from the request's
  own generator; greedy requests take the argmax and its logprob in numpy, the same values without
  torch's per-call cost), so temperature / top-k / top-p / min-p, seeds and the logprob contract are
  the same as every engine's; stop ids, stop strings and `max_tokens` likewise.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from posttrain.core.errors import ConfigError
from posttrain.engine.protocol import (Completion, SamplingParams, StepOutput, check_batch, check_request,
                                       hits_stop_string, request_seed, sample_next, step_until_finished)

INSTALL_HINT = ("the llamacpp engine needs llama-cpp-python (compiled from source, ~10 min on 2 cores): "
                "pip install llama-cpp-python")


def require_llama_cpp():
    try:
        import llama_cpp
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})") from None
    return llama_cpp


class _Seq:
    __slots__ = ("rid", "prompt", "params", "out", "logprobs", "generator", "aborted")

    def __init__(self, rid: int, prompt: list[int], params: SamplingParams):
        self.rid, self.prompt, self.params = rid, prompt, params
        self.out: list[int] = []
        self.logprobs: list[float] = []
        seed = request_seed(params)
        self.generator = torch.Generator().manual_seed(seed % 2**64) if params.temperature > 0 else None
        self.aborted = False


class LlamaCppEngine:
    """Implements `SteppingEngine` on a `llama_cpp.Llama` it owns (one sequence at a time)."""

    def __init__(self, gguf_path: str | os.PathLike, tokenizer: Any = None, *, n_ctx: int | None = None,
                 n_threads: int | None = None, n_batch: int = 512):
        llama_cpp = require_llama_cpp()
        threads = n_threads or torch.get_num_threads()
        self.llm = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=n_ctx or 0, n_threads=threads,
                                   n_threads_batch=threads, n_batch=n_batch, logits_all=False, verbose=False)
        self.tokenizer = tokenizer
        self.max_model_len = int(self.llm.n_ctx())
        self.vocab_size = int(self.llm.n_vocab())
        self.weights_precision = "gguf"  # llama.cpp's kernels, not the trainer's fp32 weights
        self.version = 0
        self._lock = threading.Lock()
        self._queue: deque[_Seq] = deque()
        self._next_id = 0
        self._active: _Seq | None = None

    # ---- SteppingEngine ----

    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams) -> int:
        prompt = [int(t) for t in prompt_ids]
        self._check(prompt, params, "add_request")
        return self._enqueue(prompt, params)

    def abort(self, request_id: int) -> None:
        with self._lock:
            for s in [*self._queue, self._active]:
                if s is not None and s.rid == request_id:
                    s.aborted = True

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._queue) or self._active is not None

    def step(self) -> list[StepOutput]:
        """Aborted requests leave; then the active sequence (or the next one, after its prefill)
        gets one token."""
        outputs = []
        with self._lock:
            for s in [s for s in self._queue if s.aborted]:
                self._queue.remove(s)
                outputs.append(StepOutput(s.rid, [], [], True, "abort"))
            if self._active is not None and self._active.aborted:
                outputs.append(StepOutput(self._active.rid, [], [], True, "abort"))
                self._active = None
            if self._active is None and self._queue:
                self._active = self._queue.popleft()
            seq = self._active
        if seq is None:
            return outputs
        logits = self._feed(seq)
        token, logprob = self._sample(seq, logits)
        seq.out.append(token)
        seq.logprobs.append(logprob)
        reason = self._finish_reason(seq)
        if reason is not None:
            with self._lock:
                self._active = None
        outputs.append(StepOutput(seq.rid, [token], [logprob], reason is not None, reason))
        return outputs

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        check_batch(prompts, params)
        batch = [[int(t) for t in p] for p in prompts]
        for i, (prompt, p) in enumerate(zip(batch, params)):
            self._check(prompt, p, "generate", f"prompt {i}")
        return step_until_finished(self, [self._enqueue(prompt, p) for prompt, p in zip(batch, params)])

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        raise ValueError("the llamacpp engine serves a fixed GGUF file: export the new weights "
                         "(posttrain export MODEL --format gguf) and restart the server")

    # ---- internals ----

    def _check(self, prompt: list[int], params: SamplingParams, where: str, name: str = "the prompt") -> None:
        check_request(prompt, params, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                      has_tokenizer=self.tokenizer is not None, where=where, name=name)

    def _enqueue(self, prompt: list[int], params: SamplingParams) -> int:
        with self._lock:
            rid, self._next_id = self._next_id, self._next_id + 1
            self._queue.append(_Seq(rid, prompt, params))
        return rid

    def _feed(self, seq: _Seq):
        """llama.cpp's logits for the sequence's next token: the prompt's uncached suffix on the
        first step (the shared prefix with what is in the KV is kept), else the last token."""
        llm = self.llm
        if not seq.out:  # its first step: the prefill
            cached = llm.input_ids[: llm.n_tokens]
            keep = 0
            for a, b in zip(cached, seq.prompt[:-1]):  # at least one prompt token is fed for fresh logits
                if a != b:
                    break
                keep += 1
            if keep == 0:
                llm.reset()
            llm.n_tokens = keep  # eval drops the KV from here on
            llm.eval(seq.prompt[keep:])
        else:
            llm.eval(seq.out[-1:])
        # a view of llama.cpp's logits buffer, valid until the next decode (sampling reads it before)
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(self.vocab_size,))

    def _sample(self, seq: _Seq, logits: np.ndarray) -> tuple[int, float]:
        p = seq.params
        if p.temperature == 0:  # greedy: the argmax and its T = 1 logprob, in numpy (~0.1 ms, not ~0.5)
            token = int(logits.argmax())
            # log_softmax(logits)[token] = -log(sum(exp(logits - logits[token]))) when token is the argmax
            return token, -float(np.log(np.exp(logits - logits[token], dtype=np.float64).sum()))
        logits = torch.from_numpy(logits.copy())
        u = torch.rand(1, dtype=torch.float64, generator=seq.generator) if seq.generator is not None \
            else torch.zeros(1, dtype=torch.float64)
        token, logprob = sample_next(logits[None], torch.tensor([float(p.temperature)]), torch.tensor([int(p.top_k)]),
                                     torch.tensor([float(p.top_p)]), u,
                                     torch.tensor([float(p.min_p)]) if p.min_p else None)
        return int(token[0]), float(logprob[0])

    def _finish_reason(self, seq: _Seq) -> str | None:
        p = seq.params
        if seq.out[-1] in p.stop_token_ids:
            return "stop"
        if p.stop and hits_stop_string(self.tokenizer, seq.out, p.stop):
            return "stop"
        if len(seq.out) >= p.max_tokens or len(seq.prompt) + len(seq.out) >= self.max_model_len:
            return "length"
        return None


def make_engine(model_or_path: Any, tokenizer: Any = None, *, gguf: str | os.PathLike | None = None,
                **options: Any) -> LlamaCppEngine:
    """A LlamaCppEngine on `gguf`, else on `model_or_path` when that is a GGUF file."""
    require_llama_cpp()
    path = Path(gguf) if gguf else Path(str(model_or_path))
    if not path.is_file():
        if (path / "config.json").is_file():
            raise ConfigError(f"llamacpp engine: {str(path)!r} is an HF model directory; export it first "
                              f"(posttrain export {path} --format gguf --dtype f32|q8_0) or start "
                              f"`posttrain serve --engine llamacpp`, which exports it")
        raise ConfigError(f"llamacpp engine: {str(model_or_path)!r} is neither a .gguf file nor an HF model directory")
    return LlamaCppEngine(path, tokenizer, **options)
