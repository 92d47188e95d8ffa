"""Trajectories -> packed micro-batches with per-token RL data -> the trainer's logprobs.

Each trained token carries its advantage, the logprob it was sampled with (the "old"
logprob of the PPO ratio), optionally the reference model's logprob, and the step-global
index of its sequence (for sequence-level loss aggregation). Position t of a row predicts
token t+1, so a token is trained where the NEXT token has loss mask 1. Sequences are packed
first-fit decreasing into rows (positions restart per sequence, so attention never crosses
sequences: see train/packing.py) and rows are grouped into micro-batches by token budget.
Per-token tensors are flat, in the row-major order of the `selected` mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from posttrain.train.packing import _group_by_budget, pack_ffd

ROW_TOKENS = 512  # packed row length (longer sequences get a row of their own)


@dataclass(frozen=True)
class Sample:
    token_ids: Sequence[int]  # [T] prompt + completion
    loss_mask: Sequence[int]  # [T] 1 on sampled tokens
    old_logprobs: Sequence[float]  # [T] logprob each token was sampled with (0 where mask is 0)
    advantage: float
    seq: int  # index of this sequence within its optimizer step
    ref_logprobs: Sequence[float] | None = None  # [T]
    token_weights: Sequence[float] | None = None  # [T] per-token loss multiplier (e.g. truncated IS), default 1


@dataclass
class RLMicroBatch:
    input_ids: torch.Tensor  # [R, L] long
    position_ids: torch.Tensor  # [R, L] long, restarting at 0 per sequence
    selected: torch.Tensor  # [R, L] bool: positions whose next token is trained
    targets: torch.Tensor  # [N] long: the trained tokens
    old_logprobs: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    seq_index: torch.Tensor  # [N] long
    ref_logprobs: torch.Tensor | None  # [N]
    token_weights: torch.Tensor | None  # [N]

    @property
    def num_tokens(self) -> int:
        return int(self.targets.numel())

    def to(self, device: torch.device) -> "RLMicroBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return RLMicroBatch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


def _collate(samples: list[Sample], rows: list[list[int]], pad_id: int) -> RLMicroBatch:
    row_len = max(sum(len(samples[i].token_ids) for i in row) for row in rows)
    shape = (len(rows), row_len)
    ids = np.full(shape, pad_id, dtype=np.int64)
    pos = np.zeros(shape, dtype=np.int64)
    sel = np.zeros(shape, dtype=bool)
    tgt, old, adv, seq = (np.zeros(shape, dtype=t) for t in (np.int64, np.float32, np.float32, np.int64))
    with_ref = samples[rows[0][0]].ref_logprobs is not None
    with_w = samples[rows[0][0]].token_weights is not None
    ref = np.zeros(shape, dtype=np.float32)
    wts = np.ones(shape, dtype=np.float32)
    for r, row in enumerate(rows):
        at = 0
        for i in row:
            s = samples[i]
            n = len(s.token_ids)
            toks = np.asarray(s.token_ids, dtype=np.int64)
            mask = np.asarray(s.loss_mask, dtype=bool)
            ids[r, at : at + n] = toks
            pos[r, at : at + n] = np.arange(n)
            sel[r, at : at + n - 1] = mask[1:]
            tgt[r, at : at + n - 1] = toks[1:]
            old[r, at : at + n - 1] = np.asarray(s.old_logprobs, dtype=np.float32)[1:]
            if with_ref:
                ref[r, at : at + n - 1] = np.asarray(s.ref_logprobs, dtype=np.float32)[1:]
            if with_w:
                wts[r, at : at + n - 1] = np.asarray(s.token_weights, dtype=np.float32)[1:]
            adv[r, at : at + n] = s.advantage
            seq[r, at : at + n] = s.seq
            at += n
        pos[r, at:] = np.arange(row_len - at)
    pick = lambda a: torch.from_numpy(a[sel])  # noqa: E731
    return RLMicroBatch(
        input_ids=torch.from_numpy(ids),
        position_ids=torch.from_numpy(pos),
        selected=torch.from_numpy(sel),
        targets=pick(tgt),
        old_logprobs=pick(old),
        advantages=pick(adv),
        seq_index=pick(seq),
        ref_logprobs=pick(ref) if with_ref else None,
        token_weights=pick(wts) if with_w else None,
    )


def build_rl_microbatches(samples: list[Sample], *, max_tokens_per_microbatch: int, pad_id: int) -> list[RLMicroBatch]:
    """Pack `samples` into rows and the rows into micro-batches of <= max_tokens_per_microbatch tokens."""
    if not samples:
        return []
    lengths = [len(s.token_ids) for s in samples]
    # rows never outgrow the budget (a longer sequence still gets a row, and a micro-batch, of its own)
    row_tokens = min(max(ROW_TOKENS, max(lengths)), max_tokens_per_microbatch)
    rows = pack_ffd(lengths, row_tokens)
    groups = _group_by_budget([sum(lengths[i] for i in row) for row in rows], max_tokens_per_microbatch)
    return [_collate(samples, [rows[j] for j in g], pad_id) for g in groups]


def hidden_and_head(model, mb: RLMicroBatch) -> tuple[torch.Tensor, torch.nn.Module]:
    """Final hidden states at the selected positions [N, H] and the LM head (applied by the caller)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(
        input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=None, use_cache=False
    ).last_hidden_state
    return hidden[mb.selected], base.get_output_embeddings()


def token_logits(model, mb: RLMicroBatch, temperature: float) -> torch.Tensor:
    """Logits / temperature at the selected positions, [N, V] in fp32."""
    hidden, head = hidden_and_head(model, mb)
    return head(hidden).float() / max(temperature, 1e-6)


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[target] per row, [N]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


@torch.no_grad()
def sequence_logprobs(model, samples: list[Sample], *, temperature: float, max_tokens_per_microbatch: int,
                      pad_id: int) -> list[list[float]]:
    """Per-token logprobs of each sample's trained tokens under `model` ([T] each, 0 where untrained)."""
    out = [[0.0] * len(s.token_ids) for s in samples]
    index = {s.seq: k for k, s in enumerate(samples)}
    positions = [[t for t in range(1, len(s.loss_mask)) if s.loss_mask[t]] for s in samples]
    filled = [0] * len(samples)  # the j-th trained token of sample k sits at positions[k][j]
    for mb in build_rl_microbatches(samples, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id):
        lp = gather_logprobs(token_logits(model, mb, temperature), mb.targets).tolist()
        for value, s in zip(lp, mb.seq_index.tolist()):
            k = index[s]
            out[k][positions[k][filled[k]]] = value
            filled[k] += 1
    return out
