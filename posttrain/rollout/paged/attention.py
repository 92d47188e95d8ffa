"""Attention over the paged KV cache for one step's ragged batch, and RoPE.

One step feeds every scheduled sequence's new tokens as one flat batch of T tokens (a decode
feeds 1 token, a prefill chunk many, a speculative check 1 + drafts): the matmuls and norms
run on [T, hidden] with no padding. Attention groups the sequences by query length into
buckets (all decodes form one bucket); per bucket and layer, each sequence's K/V blocks are
gathered with one `index_select` (padded to the bucket's longest context with masked
garbage) and torch's `scaled_dot_product_attention` runs with a boolean mask (causal within
the chunk, plus the sliding window where a layer has one).

`build_metadata` turns the step's plan (per sequence: first position, token count, block
table, whether to write K/V) into tensors once per step; every layer reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F


@dataclass
class Bucket:
    """Sequences with the same query length `q_len`, attended together."""

    num_seqs: int
    q_len: int
    q_rows: torch.Tensor | None  # [num_seqs * q_len] rows of the flat batch; None = all rows in order
    block_tables: torch.Tensor  # [num_seqs, blocks] padded with the trash block
    masks: dict[int | None, torch.Tensor]  # window (None = full) -> [num_seqs, 1, q_len, blocks * block_size]


@dataclass
class AttentionMetadata:
    positions: torch.Tensor  # [T] position of each fed token
    slot_mapping: torch.Tensor  # [T] cache slot each token's K/V is written to (the trash block: not written)
    buckets: list[Bucket] = field(default_factory=list)
    num_tokens: int = 0


def build_metadata(
    starts: Sequence[int], lengths: Sequence[int], block_tables: Sequence[Sequence[int]], writes: Sequence[bool],
    block_size: int, device: torch.device, windows: Sequence[int | None] = (None,),
) -> AttentionMetadata:
    """Tensors for one step. Sequence i feeds tokens at positions starts[i] .. starts[i] + lengths[i] - 1
    and attends to every position up to its own; its K/V live in the blocks `block_tables[i]`."""
    n = len(starts)
    width = max(len(b) for b in block_tables)
    tables = torch.tensor([list(b) + [0] * (width - len(b)) for b in block_tables], dtype=torch.long)
    starts_t = torch.tensor(starts, dtype=torch.long)
    if all(length == 1 for length in lengths):
        seq_of_token, positions = torch.arange(n), starts_t
        total = n
    else:
        lengths_t = torch.tensor(lengths, dtype=torch.long)
        total = int(sum(lengths))
        seq_of_token = torch.repeat_interleave(torch.arange(n), lengths_t)
        offsets = torch.cumsum(lengths_t, 0) - lengths_t
        positions = starts_t[seq_of_token] + torch.arange(total) - offsets[seq_of_token]
    slots = tables[seq_of_token, positions // block_size] * block_size + positions % block_size
    if not all(writes):
        keep = torch.tensor(writes, dtype=torch.bool)[seq_of_token]
        slots = torch.where(keep, slots, torch.zeros_like(slots))
    meta = AttentionMetadata(positions=positions.to(device), slot_mapping=slots.to(device), num_tokens=total)

    groups: dict[int, list[int]] = {}
    for i, length in enumerate(lengths):
        groups.setdefault(length, []).append(i)
    offsets_list = [0] * n
    acc = 0
    for i, length in enumerate(lengths):
        offsets_list[i] = acc
        acc += length
    for q_len, members in groups.items():
        idx = torch.tensor(members, dtype=torch.long)
        in_order = len(members) == n  # one bucket holding the whole batch: rows are the flat batch itself
        rows = None if in_order else (torch.tensor([offsets_list[i] for i in members])[:, None] + torch.arange(q_len))
        seq_len = max(starts[i] + q_len for i in members)
        blocks = -(-seq_len // block_size)
        q_pos = (starts_t[idx][:, None] + torch.arange(q_len))[:, None, :, None]  # [m, 1, q_len, 1]
        key_pos = torch.arange(blocks * block_size)
        causal = key_pos <= q_pos
        masks = {}
        for w in set(windows):
            masks[w] = (causal if w is None else causal & (key_pos > q_pos - w)).to(device)
        meta.buckets.append(
            Bucket(
                num_seqs=len(members), q_len=q_len,
                q_rows=None if rows is None else rows.reshape(-1).to(device),
                block_tables=(tables if in_order else tables[idx])[:, :blocks].contiguous().to(device),
                masks=masks,
            )
        )
    return meta


def paged_attention(q: torch.Tensor, cache, layer: int, meta: AttentionMetadata, scale: float,
                    window: int | None = None) -> torch.Tensor:
    """q [T, heads, head_dim] (already rotated; this layer's K/V already written) -> [T, heads * head_dim]."""
    total, heads, head_dim = q.shape
    gqa = heads != cache.num_kv_heads
    out = None
    for b in meta.buckets:
        qb = q if b.q_rows is None else q.index_select(0, b.q_rows)
        qb = qb.view(b.num_seqs, b.q_len, heads, head_dim).transpose(1, 2)
        k, v = cache.gather(layer, b.block_tables)
        o = F.scaled_dot_product_attention(qb, k, v, attn_mask=b.masks[window], scale=scale, enable_gqa=gqa)
        o = o.transpose(1, 2).reshape(b.num_seqs * b.q_len, heads * head_dim)
        if b.q_rows is None:
            return o
        if out is None:
            out = o.new_empty(total, heads * head_dim)
        out.index_copy_(0, b.q_rows, o)
    assert out is not None
    return out


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as HF applies it: x * cos + rotate_half(x) * sin; x [T, heads, d], cos/sin [T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
