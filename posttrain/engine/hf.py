"""`HFEngine`: the reference rollout engine, a hand-written decode loop over any HF causal LM.

Not `model.generate`: we need a generator per request (the same request gives the same
completion whatever else is in the batch), the sampler's own logprobs, and little overhead.

Per batch of up to `max_batch_sequences` prompts (sorted by length, so padding is small):
left padding with an attention mask and explicit position ids (counted from the mask, as
HF generate does, so padding never shifts positions), one prefill, then one forward per new
token with a KV cache (DynamicCache), all under `torch.inference_mode()`. When more than
`drop_finished_fraction` of the rows still in the batch have finished, they are cut out of the
batch and of the cache (measured on CPU, 128 requests with max_tokens 4..64: 1.5x the
tokens/s of never cutting; cutting at every finish was no faster and copies the cache more
often). Sampling is `engine.sample_next`.

The engine owns its model: it sets `eval()` and `requires_grad_(False)` on it, so give it a
copy or a freshly loaded model, never the trainer's own module.

`weights_precision` is "exact" when the model computes in float32 (the trainer's fp32 master
weights, copied in by `update_weights`), else its dtype's name ("bfloat16"): trajectories it
samples then carry that name, and the trainer corrects the gap (train/step.py).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import torch

from posttrain.engine.protocol import (Completion, SamplingParams, check_batch, hits_stop_string, request_seed,
                                       sample_next)


def _new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers 4.x without the config argument
        return DynamicCache()


class HFEngine:
    """Implements `Engine` on an HF causal LM object it owns."""

    def __init__(
        self,
        model,
        *,
        pad_token_id: int,
        max_batch_sequences: int = 256,
        device: torch.device | str | None = None,
        tokenizer=None,
        drop_finished_fraction: float = 0.25,
    ):
        if max_batch_sequences < 1:
            raise ValueError(f"max_batch_sequences must be >= 1, got {max_batch_sequences}")
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.model.requires_grad_(False)
        self.device = next(model.parameters()).device
        self.pad_token_id = int(pad_token_id)
        self.max_batch_sequences = max_batch_sequences
        self.tokenizer = tokenizer
        self.drop_finished_fraction = drop_finished_fraction
        self.version = 0
        forward_args = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward_args else "past_key_values"  # 5.x renamed it
        self._keep_last_logits = "logits_to_keep" in forward_args

    @staticmethod
    def default_pad_token_id(model, tokenizer=None) -> int:
        """Any id works (padded positions are masked out): the tokenizer's pad, else the model's pad or eos."""
        for value in (
            getattr(tokenizer, "pad_token_id", None),
            getattr(model.config, "pad_token_id", None),
            getattr(model.config, "eos_token_id", None),
        ):
            if isinstance(value, (list, tuple)):
                value = value[0] if value else None
            if value is not None:
                return int(value)
        return 0

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: str = "auto", device: torch.device | str | None = None, *, tokenizer=None, **options: Any
    ) -> "HFEngine":
        """Load the model at `path` (an HF directory) with `train.model.load_model`."""
        from posttrain.core.hf import load_model

        model = load_model(path, dtype, torch.device(device) if device is not None else None)
        options.setdefault("pad_token_id", cls.default_pad_token_id(model, tokenizer))
        return cls(model, tokenizer=tokenizer, **options)

    # ---- weights ----

    @property
    def weights_precision(self) -> str:
        """'exact' when the engine computes with fp32 weights (the trainer's masters), else the dtype's name."""
        dtype = next(self.model.parameters()).dtype
        return "exact" if dtype == torch.float32 else str(dtype).removeprefix("torch.")

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy `state_dict` into the engine's model in place (same keys and shapes), then set `version`."""
        own = self.model.state_dict()
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if missing or unexpected:
            raise ValueError(
                f"update_weights: state dict keys do not match the engine's model: "
                f"missing {_names(missing)}, unexpected {_names(unexpected)}"
            )
        wrong = [k for k, v in own.items() if tuple(state_dict[k].shape) != tuple(v.shape)]
        if wrong:
            k = wrong[0]
            raise ValueError(
                f"update_weights: shape mismatch for {_names(wrong)} "
                f"(e.g. {k}: got {tuple(state_dict[k].shape)}, model has {tuple(own[k].shape)})"
            )
        self.model.load_state_dict(state_dict, strict=True)
        self.version = int(version)

    # ---- generation ----

    def generate(self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]) -> list[Completion]:
        check_batch(prompts, params)
        vocab = self.model.get_input_embeddings().num_embeddings
        for i, (prompt, p) in enumerate(zip(prompts, params)):
            if min(prompt) < 0 or max(prompt) >= vocab:
                raise ValueError(f"generate: prompt {i} has a token id outside the vocabulary [0, {vocab})")
            if p.stop and self.tokenizer is None:
                raise ValueError(f"generate: request {i} has stop strings but the engine was built without a tokenizer")
        seeds = [request_seed(p) for p in params]
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        for start in range(0, len(order), self.max_batch_sequences):
            idx = order[start : start + self.max_batch_sequences]
            outs = self._generate_batch([prompts[i] for i in idx], [params[i] for i in idx], [seeds[i] for i in idx])
            for i, out in zip(idx, outs):
                results[i] = out
        return results  # type: ignore[return-value]

    def _forward(self, input_ids, attention_mask, position_ids, cache) -> torch.Tensor:
        kwargs = {self._cache_arg: cache}
        if self._keep_last_logits:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kwargs
        )
        return out.logits[:, -1, :]

    @torch.inference_mode()
    def _generate_batch(
        self, prompts: list[Sequence[int]], params: list[SamplingParams], seeds: list[int]
    ) -> list[Completion]:
        dev = self.device
        n = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding
            input_ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        input_ids, mask, positions = input_ids.to(dev), mask.to(dev), positions.to(dev)
        next_position = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=dev)

        temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=dev)
        top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=dev)
        top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=dev)
        min_p = torch.tensor([p.min_p for p in params], dtype=torch.float32, device=dev)
        generators = [
            torch.Generator().manual_seed(seed % 2**64) if p.temperature > 0 else None for p, seed in zip(params, seeds)
        ]
        stop_ids = [frozenset(p.stop_token_ids) for p in params]
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        rows = list(range(n))  # batch row -> request index; shrinks as finished rows are cut
        unfinished = n

        cache = _new_cache(self.model)
        logits = self._forward(input_ids, mask, positions, cache)
        while True:
            draws = [
                float(torch.rand((), dtype=torch.float64, generator=generators[r]))
                if generators[r] is not None and finish[r] is None
                else 0.0
                for r in rows
            ]
            uniforms = torch.tensor(draws, dtype=torch.float64, device=dev)
            new, new_logprobs = sample_next(logits, temperature, top_k, top_p, uniforms, min_p)
            for r, tok, lp in zip(rows, new.tolist(), new_logprobs.tolist()):
                if finish[r] is not None:
                    continue
                tokens[r].append(tok)
                logprobs[r].append(lp)
                if tok in stop_ids[r]:
                    finish[r] = "stop"
                elif params[r].stop and hits_stop_string(self.tokenizer, tokens[r], params[r].stop):
                    finish[r] = "stop"
                elif len(tokens[r]) >= params[r].max_tokens:
                    finish[r] = "length"
                if finish[r] is not None:
                    unfinished -= 1
            if unfinished == 0:
                break
            if len(rows) - unfinished > self.drop_finished_fraction * len(rows):
                keep_rows = [j for j, r in enumerate(rows) if finish[r] is None]
                keep = torch.tensor(keep_rows, dtype=torch.long, device=dev)
                cache.batch_select_indices(keep)
                mask, new, next_position = mask[keep], new[keep], next_position[keep]
                temperature, top_k, top_p, min_p = temperature[keep], top_k[keep], top_p[keep], min_p[keep]
                rows = [rows[j] for j in keep_rows]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            logits = self._forward(new[:, None], mask, next_position[:, None], cache)
            next_position += 1
        return [Completion(tuple(t), tuple(lp), str(f)) for t, lp, f in zip(tokens, logprobs, finish)]


def _names(keys: list[str], limit: int = 5) -> str:
    if not keys:
        return "[]"
    shown = ", ".join(keys[:limit])
    return f"[{shown}{f', ... ({len(keys)} in all)' if len(keys) > limit else ''}]"


def make_engine(model_or_path: Any, tokenizer: Any = None, **options: Any) -> HFEngine:
    """`ENGINES["hf"]`: `model_or_path` is a path (loaded with core.hf.load_model; options dtype,
    device) or an HF causal LM the engine will own. Other options go to HFEngine (max_batch_sequences, ...)."""
    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        return HFEngine.from_pretrained(str(model_or_path), tokenizer=tokenizer, **options)
    if "pad_token_id" not in options:
        options["pad_token_id"] = HFEngine.default_pad_token_id(model_or_path, tokenizer)
    return HFEngine(model_or_path, tokenizer=tokenizer, **options)
