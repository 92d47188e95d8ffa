"""Attention over the paged KV cache for one step's ragged batch, and RoPE.

One step feeds every scheduled sequence's new tokens as one flat batch of T tokens (a decode
feeds 1 token, a prefill chunk many, a speculative check 1 + drafts): the matmuls and norms
run on [T, hidden] with no padding. Sequences are fed in order of (query length, context
length), so sequences with the same query length are adjacent and form attention buckets
(all plain decodes share one), split where context lengths differ a lot and, on CPU, capped
at ~4 MB of K/V each. Per bucket and layer, the sequences' K/V blocks are gathered with one
`index_select` per tensor into a reused workspace (padded to the bucket's longest context;
the padding is masked) and torch's `scaled_dot_product_attention` runs with an additive mask
(causal within the chunk, plus the sliding window where a layer has one).

`prepare_inputs` / `build_metadata` turn the step's plan (per sequence: first position, token
count, block table, whether to write K/V) into tensors once per step; every layer reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F


@dataclass
class Bucket:
    """Adjacent sequences with the same query length `q_len`, attended together."""

    rows: slice  # their rows of the flat batch
    num_seqs: int
    q_len: int
    block_tables: torch.Tensor  # [num_seqs, blocks] padded with the trash block (contiguous)
    masks: dict[int | None, torch.Tensor]  # window (None = full) -> [num_seqs, 1, q_len, blocks * block_size]


@dataclass
class AttentionMetadata:
    positions: torch.Tensor  # [T] position of each fed token
    slot_mapping: torch.Tensor  # [T] cache slot each token's K/V is written to (the trash block: not written)
    buckets: list[Bucket] = field(default_factory=list)
    num_tokens: int = 0


# A bucket is split in two (by context length) when that saves at least this many padded K/V
# positions: each extra bucket costs a few more kernel launches per layer.
SPLIT_SAVING_TOKENS = 2048


def build_metadata(
    starts: Sequence[int], lengths: Sequence[int], block_tables: Sequence[Sequence[int]], writes: Sequence[bool],
    block_size: int, device: torch.device, windows: Sequence[int | None] = (None,), group: int = 1,
    dtype: torch.dtype = torch.float32, max_bucket_keys: int | None = None,
) -> AttentionMetadata:
    """Tensors for one step. Sequence i feeds tokens at positions starts[i] .. starts[i] + lengths[i] - 1
    and attends to every position up to its own; its K/V live in the blocks `block_tables[i]`.
    Adjacent sequences with equal `lengths` share a bucket (split where context lengths differ a
    lot): callers order sequences by (length, context length) for the fewest, tightest buckets.
    `group` query heads share a K/V head: masks repeat each query row `group` times (grouped
    queries are stacked as rows, see `paged_attention`); masks are additive (0 / -inf) in `dtype`.
    `max_bucket_keys` caps sequences x padded keys per bucket: on CPU, gathering and attending
    to a few megabytes of K/V at a time while they are in cache was 1.6x faster than all at once."""
    n = len(starts)
    width = max(len(b) for b in block_tables)
    tables = torch.tensor([list(b) + [0] * (width - len(b)) for b in block_tables], dtype=torch.long)
    ends = [s + length for s, length in zip(starts, lengths)]
    if all(length == 1 for length in lengths):
        positions = list(starts)
        slots = [b[p // block_size] * block_size + p % block_size for p, b in zip(starts, block_tables)]
    else:
        positions = [p for s, e in zip(starts, ends) for p in range(s, e)]
        slots = [b[p // block_size] * block_size + p % block_size
                 for s, e, b in zip(starts, ends, block_tables) for p in range(s, e)]
    if not all(writes):
        skip = {i for i, w in enumerate(writes) if not w}
        offset = 0
        for i, length in enumerate(lengths):
            if i in skip:
                slots[offset : offset + length] = [0] * length
            offset += length
    meta = AttentionMetadata(positions=torch.tensor(positions, dtype=torch.long, device=device),
                             slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
                             num_tokens=len(positions))
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    i = 0
    while i < n:
        j = i
        while j < n and lengths[j] == lengths[i]:
            j += 1
        for a, b in _chunks(_split(ends, i, j, block_size), ends, block_size, max_bucket_keys):
            q_len = lengths[a]
            blocks = -(-max(ends[a:b]) // block_size)
            q_pos = torch.tensor(starts[a:b])[:, None, None, None] + torch.arange(q_len)[None, None, :, None]
            key_pos = torch.arange(blocks * block_size)
            causal = key_pos <= q_pos  # [m, 1, q_len, keys]
            masks = {w: _additive(causal if w is None else causal & (key_pos > q_pos - w), group, dtype, device)
                     for w in set(windows)}
            meta.buckets.append(Bucket(slice(offsets[a], offsets[b]), b - a, q_len,
                                       tables[a:b, :blocks].contiguous().to(device), masks))
        i = j
    return meta


def prepare_inputs(scheduled, block_size: int, device: torch.device, windows: Sequence[int | None], group: int,
                   dtype: torch.dtype, max_bucket_keys: int | None
                   ) -> tuple[torch.Tensor, AttentionMetadata, torch.Tensor | None]:
    """A step's model inputs from the scheduler's `ScheduledSeq`s: token ids [T], attention
    metadata, and the rows whose logits are sampled (in the order of `scheduled`: each
    sampling sequence's newest token, then its drafts; None when that is every row in order).
    Sequences are fed in order of (query length, context length): buckets come out tight."""
    order = sorted(scheduled, key=lambda s: (s.num_fed, s.start + s.num_fed))
    input_ids: list[int] = []
    offset: dict[int, int] = {}
    for s in order:
        offset[id(s)] = len(input_ids)
        input_ids += s.input_ids
    rows: list[int] = []
    for s in scheduled:
        if s.samples:
            end = offset[id(s)] + s.num_fed
            rows.extend(range(end - 1 - len(s.draft_ids), end))
    meta = build_metadata(
        [s.start for s in order], [s.num_fed for s in order], [s.seq.block_table for s in order],
        [s.write_kv for s in order], block_size, device, windows, group, dtype, max_bucket_keys,
    )
    ids = torch.tensor(input_ids, dtype=torch.long).to(device)
    keep = None if rows == list(range(len(input_ids))) else torch.tensor(rows, dtype=torch.long).to(device)
    return ids, meta, keep


def _additive(allowed: torch.Tensor, group: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
    return (mask.repeat_interleave(group, dim=2) if group > 1 and allowed.shape[2] > 1 else mask).to(device)


def _chunks(spans: list[tuple[int, int]], ends: Sequence[int], block_size: int, max_keys: int | None
            ) -> list[tuple[int, int]]:
    if max_keys is None:
        return spans
    out = []
    for i, j in spans:
        a, longest = i, 0
        for k in range(i, j):  # close [a, k) when adding sequence k would pass max_keys
            longest_with = max(longest, -(-ends[k] // block_size) * block_size)
            if k > a and (k + 1 - a) * longest_with > max_keys:
                out.append((a, k))
                a, longest_with = k, -(-ends[k] // block_size) * block_size
            longest = longest_with
        out.append((a, j))
    return out


def _split(ends: Sequence[int], i: int, j: int, block_size: int, depth: int = 3) -> list[tuple[int, int]]:
    """Cut sequences i..j-1 in two where that saves the most padded key positions, recursively."""
    if depth == 0 or j - i < 2:
        return [(i, j)]
    prefix, run = [], 0
    for e in ends[i:j]:
        run = max(run, -(-e // block_size) * block_size)
        prefix.append(run)
    suffix, run = [0] * (j - i), 0
    for k in range(j - i - 1, -1, -1):
        run = max(run, -(-ends[i + k] // block_size) * block_size)
        suffix[k] = run
    whole = (j - i) * prefix[-1]
    cost, cut = min(((k * prefix[k - 1] + (j - i - k) * suffix[k], k) for k in range(1, j - i)))
    if whole - cost < SPLIT_SAVING_TOKENS:
        return [(i, j)]
    return _split(ends, i, i + cut, block_size, depth - 1) + _split(ends, i + cut, j, block_size, depth - 1)


def paged_attention(q: torch.Tensor, cache, layer: int, meta: AttentionMetadata, scale: float,
                    window: int | None = None) -> torch.Tensor:
    """q [T, heads, head_dim] (already rotated; this layer's K/V already written) -> [T, heads * head_dim].

    Grouped-query attention without repeating K/V: the `group` query heads of one K/V head are
    stacked as query rows, q -> [n, kv_heads, q_len * group, head_dim] (HF maps query head h to
    K/V head h // group). Measured on CPU: bf16 SDPA with enable_gqa ran 7x slower than this.
    Attention runs in `cache.attn_dtype` (fp32 on CPU: bf16 SDPA there ran at half the fp32 speed)."""
    total, heads, head_dim = q.shape
    dtype = q.dtype
    kv_heads = cache.num_kv_heads
    group = heads // kv_heads
    q = q.to(cache.attn_dtype)
    outs = []
    for b in meta.buckets:
        n, lq = b.num_seqs, b.q_len
        qb = q[b.rows]
        if lq == 1:
            qb = qb.view(n, kv_heads, group, head_dim)
        else:
            qb = qb.view(n, lq, kv_heads, group, head_dim).permute(0, 2, 1, 3, 4).reshape(n, kv_heads, lq * group, head_dim)
        k, v = cache.gather(layer, b.block_tables)
        o = F.scaled_dot_product_attention(qb, k, v, attn_mask=b.masks[window], scale=scale)
        if lq > 1:
            o = o.view(n, kv_heads, lq, group, head_dim).permute(0, 2, 1, 3, 4)
        outs.append(o.reshape(n * lq, heads * head_dim))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as HF applies it: x * cos + rotate_half(x) * sin; x [T, heads, d], cos/sin [T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
