"""The reward-model judge: an HF sequence-classification reward model (num_labels=1) scoring
(prompt messages + completion), its logit mapped to [0, 1] by `scaled`. The completion is
untrusted text, tokenized as judge.py's `encode_with_untrusted` does (special tokens split).

    rm = RewardModelJudge("runs/rm/final")        # train/reward_model.py's output, or any such HF model
    rm.score(task.prompt, "The answer is 4.")     # sigmoid(logit) in [0, 1]
"""

from __future__ import annotations

import math
import secrets
from typing import Sequence

import torch

from posttrain.core.errors import ConfigError, ModelLoadError
from posttrain.core.types import Message, Task
from posttrain.verifiers.judge import Judgement, encode_with_untrusted


class RewardModelJudge:
    """Scores (prompt messages + completion) with an HF sequence-classification reward model."""

    def __init__(
        self,
        model_path: str,
        *,
        device: str = "cpu",
        max_length: int = 1024,
        scale: str = "sigmoid",
        logit_range: tuple[float, float] | None = None,
        batch_sequences: int = 8,
        dtype: str = "auto",
        stats: tuple[float, float] | None = None,
    ):
        """scale: "sigmoid" (value = sigmoid(logit)), "minmax" (value = (logit - lo) / (hi - lo)
        clipped to [0, 1], with `logit_range=(lo, hi)`) or "stats" (value = sigmoid((logit - mean)
        / std), with `stats=(mean, std)`: the RM's logit statistics, see `scaled`). Completions
        too long for `max_length` tokens keep their first tokens (and the template's closing
        tokens); the prompt keeps its last tokens, at least half of the budget going to the completion."""
        from transformers import AutoModelForSequenceClassification

        from posttrain.core.hf import _check_path, load_tokenizer, quiet_hf_progress, resolve_dtype

        if scale not in SCALES:
            raise ConfigError(f"RewardModelJudge scale must be one of {', '.join(SCALES)}, got {scale!r}")
        scaled(0.0, scale, logit_range=logit_range, stats=stats)  # checks the scale's parameters
        if max_length < 8 or batch_sequences < 1:
            raise ConfigError("RewardModelJudge needs max_length >= 8 and batch_sequences >= 1")
        _check_path(model_path)
        self.device = torch.device(device)
        try:
            with quiet_hf_progress():
                model = AutoModelForSequenceClassification.from_pretrained(
                    model_path, dtype=resolve_dtype(dtype, self.device)
                )
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"cannot load reward model from {model_path!r}: {str(e).splitlines()[0]}") from None
        if model.config.num_labels != 1:
            raise ModelLoadError(f"reward model {model_path!r} has num_labels={model.config.num_labels}, expected 1")
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.tokenizer = load_tokenizer(model_path)
        self.max_length, self.scale, self.logit_range, self.stats = max_length, scale, logit_range, stats
        self.batch_sequences = batch_sequences
        self._own_pooling = hasattr(model, "score") and hasattr(model, model.base_model_prefix)

    def encode(self, prompt: Sequence[Message], completion: str) -> tuple[list[int], bool]:
        """Token ids of the conversation, and whether it was truncated to `max_length`."""
        placeholder = f"\u2063COMPLETION{secrets.token_hex(8)}\u2063"
        messages = [*prompt, {"role": "assistant", "content": placeholder}]
        head, body, tail = encode_with_untrusted(
            self.tokenizer, messages, placeholder, completion[: self.max_length * 16], add_generation_prompt=False
        )
        budget = self.max_length - len(tail)
        if len(head) + len(body) <= budget:
            return head + body + tail, len(completion) > self.max_length * 16
        keep_body = min(len(body), budget - min(len(head), budget // 2))
        keep_head = budget - keep_body
        return head[len(head) - keep_head :] + body[:keep_body] + tail, True

    def logits_many(self, items: Sequence[tuple[Sequence[Message], str]]) -> list[float]:
        """The reward model's raw logit for each (prompt messages, completion)."""
        return self.logits_of([self.encode(prompt, completion)[0] for prompt, completion in items])

    @torch.inference_mode()
    def logits_of(self, rows: Sequence[Sequence[int]], batch_sequences: int | None = None) -> list[float]:
        """The raw logit of each encoded conversation (`encode`), `batch_sequences` per forward."""
        per = batch_sequences or self.batch_sequences
        out: list[float] = []
        for start in range(0, len(rows), per):
            batch = rows[start : start + per]
            width = max(len(r) for r in batch)
            pad = self.tokenizer.pad_token_id or 0
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, r in enumerate(batch):  # right padding: real tokens keep positions 0..n-1
                ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                mask[i, : len(r)] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            last = mask.sum(dim=1) - 1
            if self._own_pooling:  # pool at the last real token ourselves: no reliance on pad ids
                base = getattr(self.model, self.model.base_model_prefix)
                hidden = base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
                logits = self.model.score(hidden[torch.arange(len(batch), device=self.device), last])
            else:
                if self.model.config.pad_token_id is None:
                    self.model.config.pad_token_id = pad
                logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            out.extend(float(x) for x in logits.float().reshape(len(batch), -1)[:, 0].cpu())
        return out

    def to_value(self, logit: float) -> float:
        return scaled(logit, self.scale, logit_range=self.logit_range, stats=self.stats)

    def score_many(self, items: Sequence[tuple[Sequence[Message], str]]) -> list[float]:
        return [self.to_value(x) for x in self.logits_many(items)]

    def score(self, prompt: Sequence[Message], completion: str) -> float:
        return self.score_many([(prompt, completion)])[0]

    def evaluate(self, task: Task, text: str, options: dict | None = None) -> Judgement:
        logit = self.logits_many([(task.prompt, text)])[0]
        return self.to_value(logit), {"logit": round(logit, 6)}


SCALES = ("sigmoid", "minmax", "stats")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def scaled(logit: float, scale: str, *, logit_range: tuple[float, float] | None = None,
           stats: tuple[float, float] | None = None) -> float:
    """A reward model's logit as a value in [0, 1] (see RewardModelJudge)."""
    if scale == "minmax":
        if logit_range is None or not logit_range[0] < logit_range[1]:
            raise ConfigError(f"RewardModelJudge scale 'minmax' needs logit_range=(lo, hi), lo < hi; got {logit_range}")
        lo, hi = logit_range
        return min(1.0, max(0.0, (logit - lo) / (hi - lo)))
    if scale == "stats":
        if stats is None or not (math.isfinite(stats[0]) and math.isfinite(stats[1]) and stats[1] > 0):
            raise ConfigError(f"RewardModelJudge scale 'stats' needs stats=(mean, std), finite, std > 0; got {stats}")
        return _sigmoid((logit - stats[0]) / stats[1])
    if scale != "sigmoid":
        raise ConfigError(f"RewardModelJudge scale must be one of {', '.join(SCALES)}, got {scale!r}")
    return _sigmoid(logit)
