"""`PagedEngine`: the built-in rollout engine (continuous batching over a paged KV cache).

    engine = make_engine("path/to/hf_model", tokenizer, device="cpu")        # or an HF model object
    [c] = engine.generate([prompt_ids], [SamplingParams(temperature=1.0, max_tokens=64, seed=7)])
    rid = engine.add_request(prompt_ids, params); while engine.has_unfinished(): engine.step()

A step is: schedule (scheduler.py: which sequences feed which tokens, blocks reserved), run
the model once over all of them (model.py: one flat batch, attention.py over cache.py's
blocks), post-process (sample every sequence whose chunk reached its newest token with the
shared `sample_next`, append, stop checks; finished sequences leave at once and free their
blocks). Requests join between steps (`add_request` and `abort` are thread-safe; `step` runs
on one thread).

Speculative decoding plugs in at two places: `self.propose(seq) -> draft ids` (None: off),
and `_accept` below, which already verifies drafts exactly: every fed position's logits come
back, each is sampled with the request's next uniform as if the drafts were its own tokens,
and the drafts are kept up to the first one that differs from its sample (that sample is
then the next token). The output is the one sampling without drafts would give.

Seeds: a request's uniforms come from its own generator (seeded with `request_seed(params)`:
`params.seed`, or a draw from the global torch RNG when None), one per sampled token, so a
seeded completion does not depend on what else is in the batch. After `update_weights`,
running requests are recomputed under the new weights and the prefix index is cleared.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import torch

from posttrain.core.errors import ConfigError, ModelLoadError
from posttrain.engine.protocol import (Completion, SamplingParams, StepOutput, check_batch, check_request,
                                       hits_stop_string, request_seed, sample_next, step_until_finished)
from posttrain.engine.paged import quant
from posttrain.engine.paged.attention import prepare_inputs
from posttrain.engine.paged.cache import BlockAllocator, KVCache
from posttrain.engine.paged.config import ModelSpec
from posttrain.engine.paged.model import PagedModel, load_safetensors
from posttrain.engine.paged.scheduler import ScheduledSeq, Scheduler, Sequence as Seq
from posttrain.core.hf import resolve_dtype

_DEFAULT_CPU_KV_BYTES = 2 << 30
_DEFAULT_CUDA_KV_FRACTION = 0.4
_CPU_BUCKET_BYTES = 4 << 20  # of the free device memory after the weights are loaded


class PagedEngine:
    """Implements `SteppingEngine` (and `Engine`) for Llama / Qwen2 / Qwen3 / Mistral checkpoints."""

    def __init__(
        self, spec: ModelSpec, state_dict: Mapping[str, torch.Tensor], *, tokenizer=None,
        device: torch.device | str | None = None, dtype: Any = "auto", block_size: int = 16,
        num_blocks: int | None = None, kv_cache_bytes: int | None = None, max_model_len: int | None = None,
        max_num_seqs: int = 256, max_num_batched_tokens: int = 2048, prefix_sharing: bool = True,
        kv_dtype: str = "auto", eos_token_ids: Sequence[int] | None = None, weights: str = "exact",
    ):
        device = torch.device(device) if device is not None else torch.device("cpu")
        if kv_dtype not in ("auto", "int8"):
            raise ConfigError(f"paged engine: kv_dtype must be 'auto' (the model dtype) or 'int8', got {kv_dtype!r}")
        if block_size < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError("paged engine: block_size, max_num_seqs and max_num_batched_tokens must be >= 1")
        self.spec, self.device, self.tokenizer, self.version = spec, device, tokenizer, 0
        self.weights = quant.resolve_mode(weights, device, spec.num_parameters)
        bf16 = self.weights in ("bf16", "int8-weight-only")
        self.dtype = torch.bfloat16 if bf16 else resolve_dtype(dtype, device)
        # what the trainer compares with its fp32 masters: trajectories sampled otherwise get TIS
        self.weights_precision = (self.weights if self.weights.startswith("int8") else
                                  "exact" if self.dtype == torch.float32 else str(self.dtype).removeprefix("torch."))
        self.block_size, self.kv_dtype = block_size, kv_dtype
        self.bytes_per_token = KVCache.bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim, self.dtype, kv_dtype)
        target_len = max_model_len or spec.max_position_embeddings
        if num_blocks is None:
            if kv_cache_bytes is None:
                kv_cache_bytes = _DEFAULT_CPU_KV_BYTES if device.type != "cuda" else self._cuda_budget()
            wanted = -(-max_num_seqs * target_len // block_size)  # no use for more than every sequence at full length
            num_blocks = 1 + min(kv_cache_bytes // (self.bytes_per_token * block_size), wanted)
        capacity = (num_blocks - 1) * block_size
        if max_model_len is not None and max_model_len > capacity:
            raise ValueError(f"paged engine: max_model_len {max_model_len} does not fit the KV cache "
                             f"({num_blocks - 1} blocks x {block_size} = {capacity} tokens); give more blocks")
        self.max_model_len = min(target_len, capacity)
        self.model = PagedModel(spec, state_dict, self.dtype, device, self.max_model_len)
        # where replies end by default (read by the server like an HF model's generation config)
        self.eos_token_ids = tuple(eos_token_ids) if eos_token_ids is not None else spec.eos_token_ids
        self.model.generation_config = SimpleNamespace(eos_token_id=list(self.eos_token_ids))
        self.allocator = BlockAllocator(num_blocks, block_size)
        attn_dtype = self.dtype  # bf16 attention on CPU: as fast as fp32 or faster, and no widening copies
        self.cache = KVCache(spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim,
                             self.dtype, device, kv_dtype, attn_dtype)
        self.scheduler = Scheduler(self.allocator, max_num_seqs, max_num_batched_tokens, prefix_sharing,
                                   self.max_model_len)
        # CPU: attend to ~4 MB of gathered K/V at a time (cache-sized); GPU: whole buckets
        per_key = 2 * spec.num_kv_heads * spec.head_dim * self.dtype.itemsize
        self._max_bucket_keys = None if device.type == "cuda" else max(1, _CPU_BUCKET_BYTES // per_key)
        self.propose: Callable[[Seq], list[int]] | None = None  # speculative drafts for a decoding sequence
        self.peak_blocks_used = 0
        self._lock, self._step_lock = threading.Lock(), threading.RLock()
        self._ids = itertools.count()
        self._pending: list[Seq] = []
        self._aborts: set[int] = set()
        self._arrival = itertools.count()
        if self.weights.startswith("int8"):
            self._quantize()

    def _quantize(self) -> None:
        """int8 compute weights (quant.py); W8A8 first calibrates its smoothing on random prompts
        through the real prefill path."""
        absmax = None
        if self.weights == "int8":
            length = max(1, min(64, self.max_model_len - 2))

            def prefill(prompts: list[list[int]]) -> None:
                self.generate(prompts, [SamplingParams(temperature=0.0, max_tokens=1)] * len(prompts))

            absmax = quant.calibrate(self.model, prefill, length=length)
            self.allocator.clear_index()
        self.model.quant = quant.Quantized(self.model, self.weights, absmax)

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @staticmethod
    def _cuda_budget() -> int:
        free, _ = torch.cuda.mem_get_info()
        return int(free * _DEFAULT_CUDA_KV_FRACTION)

    @classmethod
    def from_pretrained(cls, path: str, tokenizer=None, **options: Any) -> "PagedEngine":
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"cannot load the model config from {path!r}: {str(e).splitlines()[0]}") from None
        options.setdefault("device", "cuda" if torch.cuda.is_available() else "cpu")
        spec = ModelSpec.from_hf(config)
        gen = Path(path) / "generation_config.json"
        if "eos_token_ids" not in options and gen.is_file():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            options["eos_token_ids"] = _ids(eos) or spec.eos_token_ids
        return cls(spec, load_safetensors(path), tokenizer=tokenizer, **options)

    @classmethod
    def from_hf_model(cls, model, tokenizer=None, **options: Any) -> "PagedEngine":
        """Copy an HF causal LM's weights (the model itself is not kept)."""
        options.setdefault("device", next(model.parameters()).device)
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if "eos_token_ids" not in options and eos is not None:
            options["eos_token_ids"] = _ids(eos)
        return cls(ModelSpec.from_hf(model.config), model.state_dict(), tokenizer=tokenizer, **options)

    # ---- requests ----

    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams) -> int:
        """Queue a request (thread-safe); it joins the batch at the next step. Returns its id."""
        prompt = [int(t) for t in prompt_ids]
        self._check(prompt, params, "add_request")
        return self._enqueue(prompt, params)

    def _enqueue(self, prompt: list[int], params: SamplingParams) -> int:
        """Queue a checked request, drawing its seed (`request_seed`) when it has none."""
        seed = request_seed(params)
        with self._lock:
            rid = next(self._ids)
            self._pending.append(Seq(rid, prompt, params, seed, next(self._arrival)))
        return rid

    def abort(self, request_id: int) -> None:
        """Stop a request (thread-safe); the next step reports it finished with reason 'abort'."""
        with self._lock:
            self._aborts.add(request_id)

    def has_unfinished(self) -> bool:
        with self._lock:
            if self._pending or self._aborts:
                return True
        return self.scheduler.has_unfinished()

    def _check(self, prompt: list[int], params: SamplingParams, where: str, name: str = "the prompt") -> None:
        """The per-request checks, made once per request where it enters: in `add_request`, or in
        `generate` for its whole batch before any request is queued (errors name it `name`)."""
        check_request(prompt, params, vocab_size=self.spec.vocab_size, max_model_len=self.max_model_len,
                      has_tokenizer=self.tokenizer is not None, where=where, name=name)

    # ---- one step: schedule, run the model, post-process ----

    def step(self) -> list[StepOutput]:
        with self._step_lock:
            outputs = self._admit_and_abort()
            batch = self.scheduler.schedule(self.propose)
            if batch.scheduled:
                logits = self._run(batch.scheduled, batch.copies)
                outputs += self._postprocess(batch.scheduled, logits)
            return outputs

    def _admit_and_abort(self) -> list[StepOutput]:
        with self._lock:
            pending, aborts = self._pending, self._aborts
            self._pending, self._aborts = [], set()
        out = []
        for seq in pending:
            if seq.request_id in aborts:
                aborts.discard(seq.request_id)
                out.append(StepOutput(seq.request_id, [], [], True, "abort"))
            else:
                self.scheduler.add(seq)
        for rid in sorted(aborts):
            if self.scheduler.remove(rid) is not None:
                out.append(StepOutput(rid, [], [], True, "abort"))
        return out

    def _run(self, scheduled: list[ScheduledSeq], copies: list[tuple[int, int]]) -> torch.Tensor:
        """One forward over every scheduled sequence -> logits [rows, vocab] in the model dtype, one row per
        fed position whose token is sampled (the newest token, and each draft)."""
        self.peak_blocks_used = max(self.peak_blocks_used, self.allocator.num_used)
        if copies:
            src, dst = zip(*copies)
            self.cache.copy_blocks(torch.tensor(src, device=self.device), torch.tensor(dst, device=self.device))
        ids, meta, keep = prepare_inputs(
            scheduled, self.block_size, self.device, self.spec.sliding_windows,
            self.spec.num_heads // self.spec.num_kv_heads, self.cache.attn_dtype, self._max_bucket_keys,
        )
        try:
            return self.model.forward(ids, meta, self.cache, keep)
        except BaseException:
            self.allocator.clear_index()  # blocks indexed for this step may not have been written
            raise

    def _postprocess(self, scheduled: list[ScheduledSeq], logits: torch.Tensor) -> list[StepOutput]:
        for s in scheduled:
            s.seq.num_computed = s.start + s.num_tokens
        sampling = [s for s in scheduled if s.samples]
        if not sampling:
            return []
        emitted = self._accept(sampling, logits)
        outputs = []
        for s, (tokens, logprobs) in zip(sampling, emitted):
            seq = s.seq
            seq.prefill_done = True
            seq.num_computed += len(tokens) - 1  # accepted drafts: their K/V were written this step
            new_tokens, new_logprobs = [], []
            for tok, lp in zip(tokens, logprobs):
                seq.tokens.append(tok)
                seq.logprobs.append(lp)
                new_tokens.append(tok)
                new_logprobs.append(lp)
                seq.finish_reason = self._finish_reason(seq, tok)
                if seq.finish_reason is not None:
                    break
            if seq.finish_reason is not None:
                self.scheduler.finish(seq)
            outputs.append(StepOutput(seq.request_id, new_tokens, new_logprobs, seq.finish_reason is not None,
                                      seq.finish_reason))
        return outputs

    def _accept(self, sampling: list[ScheduledSeq], logits: torch.Tensor) -> list[tuple[list[int], list[float]]]:
        """Sample every returned row (row j of a sequence with the j-th next uniform of its
        request) and keep the drafts up to the first one its sample disagrees with."""
        seqs, uniforms = [], []
        for s in sampling:
            draws = s.seq.peek_uniforms(1 + len(s.draft_ids))
            seqs.extend([s.seq] * len(draws))
            uniforms.extend(draws)
        p = [seq.params for seq in seqs]
        dev = logits.device
        tokens, logprobs = sample_next(
            logits,
            torch.tensor([x.temperature for x in p], dtype=torch.float32, device=dev),
            torch.tensor([x.top_k for x in p], dtype=torch.long, device=dev),
            torch.tensor([x.top_p for x in p], dtype=torch.float32, device=dev),
            torch.tensor(uniforms, dtype=torch.float64, device=dev),
            torch.tensor([x.min_p for x in p], dtype=torch.float32, device=dev) if any(x.min_p for x in p) else None,
        )
        both = torch.stack([tokens.double(), logprobs.double()]).tolist()  # the one device sync of the step
        out, row = [], 0
        for s in sampling:
            n = 1 + len(s.draft_ids)
            toks, lps = [int(t) for t in both[0][row : row + n]], both[1][row : row + n]
            keep = 1
            while keep < n and toks[keep - 1] == s.draft_ids[keep - 1]:
                keep += 1
            s.seq.consume_uniforms(keep)
            out.append((toks[:keep], lps[:keep]))
            row += n
        return out

    def _finish_reason(self, seq: Seq, token: int) -> str | None:
        p = seq.params
        if token in p.stop_token_ids:
            return "stop"
        if p.stop and hits_stop_string(self.tokenizer, seq.output_ids, p.stop):
            return "stop"
        if seq.num_output_tokens >= p.max_tokens or len(seq.tokens) >= self.max_model_len:
            return "length"
        return None

    # ---- Engine ----

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        """Add every request, step until all are finished (run no other step loop meanwhile)."""
        check_batch(prompts, params)  # the batch-level checks
        batch = [[int(t) for t in prompt] for prompt in prompts]
        for i, (prompt, p) in enumerate(zip(batch, params)):  # every request before any is queued
            self._check(prompt, p, "generate", f"prompt {i}")
        return step_until_finished(self, [self._enqueue(prompt, p) for prompt, p in zip(batch, params)])

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy HF-named tensors into the engine's weights in place, then set `version`. Running
        requests are recomputed under the new weights; cached prefixes are forgotten."""
        with self._step_lock:
            self.model.load(state_dict)
            self.allocator.clear_index()
            self.scheduler.preempt_all()
            self.version = int(version)

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix (vLLM's name). With inexact (bf16 / int8) weights a prefix's
        K/V depend on the batch that computed them, so a run that must replay bit for bit (exact
        resume) drops what an evaluation between two rollouts left behind."""
        with self._step_lock:
            self.allocator.clear_index()

    def kv_stats(self) -> dict[str, Any]:
        usable = self.allocator.num_blocks - 1
        return {
            "block_size": self.block_size,
            "blocks_total": usable,
            "blocks_used": self.allocator.num_used,
            "blocks_used_peak": self.peak_blocks_used,
            "bytes_per_token": self.bytes_per_token,
            "kv_cache_bytes": usable * self.block_size * self.bytes_per_token,
            "kv_dtype": "int8" if self.kv_dtype == "int8" else str(self.dtype).removeprefix("torch."),
            "weights": self.weights,
            "max_model_len": self.max_model_len,
            "num_preemptions": self.scheduler.num_preemptions,
            # multi-turn episodes: a turn's prompt is the last one's + its output + a bridge, so its
            # leading full blocks are found in the prefix cache and only the new tokens are prefilled
            "prompt_tokens": self.scheduler.num_prompt_tokens,
            "prefill_tokens_saved": self.scheduler.num_cached_prompt_tokens,
        }


def _ids(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (() if value is None else (int(value),))



def build_engine(model_or_path: Any, tokenizer=None, **options: Any) -> PagedEngine:
    """A PagedEngine (no speculation) from a path to an HF model directory (safetensors) or an HF
    causal LM object; options go to PagedEngine (factory.py's `make_engine` adds speculation)."""
    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        return PagedEngine.from_pretrained(str(model_or_path), tokenizer=tokenizer, **options)
    return PagedEngine.from_hf_model(model_or_path, tokenizer=tokenizer, **options)
