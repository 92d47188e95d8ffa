"""The paged KV cache: block bookkeeping (pure Python) and the KV tensors.

`BlockAllocator` hands out fixed-size blocks by id, counts references (blocks shared between
sequences with the same prefix), and keeps a content index: a block whose tokens are known
is registered under key = (hash of the previous block's key, its tokens), so a new sequence
that starts with the same tokens shares it instead of recomputing it. Freed blocks keep
their key until they are handed out again (least recently freed first), so a prefix
computed earlier, or a preempted sequence's blocks, can still be found. Block 0 is never handed
out: tokens whose K/V must not be written (already in a shared block) write there.

`KVCache` holds per layer one K and one V tensor [num_blocks * block_size, kv_heads * head_dim]
(2-D, so gathering a sequence's blocks is one contiguous `index_select`), in the model dtype
or in int8 with one absmax scale per token and head (`kv_dtype="int8"`). Gathers write into
workspaces reused across layers and steps; int8 (and, on CPU, bf16) K/V are widened there to
the attention dtype.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import torch

TRASH_BLOCK = 0


def block_key(parent: int | None, tokens: Sequence[int]) -> tuple[int | None, tuple[int, ...]]:
    """Content key of a block: its tokens and (the hash of) everything before it."""
    return (parent, tuple(tokens))


class BlockAllocator:
    """Reference-counted blocks with a content index (prefix sharing) and an LRU free list."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 2:
            raise ValueError(f"the KV cache needs at least 2 blocks (one is reserved), got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.refs = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self._key_of: dict[int, tuple] = {}
        self._by_key: dict[tuple, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks held by at least one sequence (the reserved block not counted)."""
        return self.num_blocks - 1 - len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("KV cache: no free block (the scheduler checks num_free first)")
        block, _ = self._free.popitem(last=False)
        self.unregister(block)
        self.refs[block] = 1
        return block

    def share(self, block: int) -> None:
        if self.refs[block] == 0:
            del self._free[block]
        self.refs[block] += 1

    def release(self, block: int) -> None:
        self.refs[block] -= 1
        assert self.refs[block] >= 0, f"block {block} released more often than taken"
        if self.refs[block] == 0:
            self._free[block] = None

    def release_all(self, blocks: Sequence[int]) -> None:
        for b in reversed(blocks):  # the tail first: a prefix outlives its continuations in the LRU
            self.release(b)

    # ---- content index ----

    def register(self, block: int, key: tuple) -> None:
        self.unregister(block)
        old = self._by_key.get(key)
        if old is not None:  # another block already holds this content: keep the first
            return
        self._key_of[block] = key
        self._by_key[key] = block

    def unregister(self, block: int) -> None:
        key = self._key_of.pop(block, None)
        if key is not None:
            del self._by_key[key]

    def lookup(self, key: tuple) -> int | None:
        return self._by_key.get(key)

    def key_of(self, block: int) -> tuple | None:
        return self._key_of.get(block)

    def clear_index(self) -> None:
        """Forget every block's content (after a weight update the cached K/V are stale)."""
        self._key_of.clear()
        self._by_key.clear()


class KVCache:
    """K/V tensors of every layer, addressed by slot = block * block_size + offset."""

    def __init__(
        self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
        dtype: torch.dtype, device: torch.device, kv_dtype: str = "auto", attn_dtype: torch.dtype | None = None,
    ):
        if kv_dtype not in ("auto", "int8"):
            raise ValueError(f"kv_dtype must be 'auto' (the model dtype) or 'int8', got {kv_dtype!r}")
        self.block_size, self.num_kv_heads, self.head_dim = block_size, num_kv_heads, head_dim
        self.dtype, self.quantized = dtype, kv_dtype == "int8"
        self.attn_dtype = attn_dtype or dtype  # gathered K/V come out in this dtype
        self._buffers: dict[str, torch.Tensor] = {}
        slots, width = num_blocks * block_size, num_kv_heads * head_dim
        store = torch.int8 if self.quantized else dtype
        self.k = [torch.zeros(slots, width, dtype=store, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(slots, width, dtype=store, device=device) for _ in range(num_layers)]
        if self.quantized:
            self.k_scale = [torch.zeros(slots, num_kv_heads, dtype=dtype, device=device) for _ in range(num_layers)]
            self.v_scale = [torch.zeros(slots, num_kv_heads, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, kv_dtype: str) -> int:
        """K and V of one token in every layer (int8: one byte per value plus a scale per head)."""
        if kv_dtype == "int8":
            per_layer = num_kv_heads * (head_dim + dtype.itemsize)
        else:
            per_layer = num_kv_heads * head_dim * dtype.itemsize
        return 2 * num_layers * per_layer

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [T, kv_heads * head_dim] at `slots` [T]."""
        if not self.quantized:
            self.k[layer].index_copy_(0, slots, k)
            self.v[layer].index_copy_(0, slots, v)
            return
        for store, scales, x in ((self.k[layer], self.k_scale[layer], k), (self.v[layer], self.v_scale[layer], v)):
            q, s = quantize_int8(x.reshape(-1, self.num_kv_heads, self.head_dim))
            store.index_copy_(0, slots, q.view(len(slots), -1))
            scales.index_copy_(0, slots, s.to(scales.dtype))

    def gather(self, layer: int, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of whole blocks: block_tables [n, blocks] -> two [n, kv_heads, blocks * block_size, head_dim]
        (strided views into a reused workspace, valid until the next gather; padding blocks hold
        garbage the attention mask hides)."""
        n, nbl = block_tables.shape
        ids = block_tables.reshape(-1)
        length, heads, dim = nbl * self.block_size, self.num_kv_heads, self.head_dim
        out = []
        for name, store in (("k", self.k[layer]), ("v", self.v[layer])):
            x = self._gather_blocks(name, store, ids)
            if self.quantized or x.dtype != self.attn_dtype:
                wide = self._workspace(name + "_wide", x.numel(), self.attn_dtype).view_as(x).copy_(x)
                if self.quantized:
                    s = self._gather_blocks(name + "_scale", (self.k_scale if name == "k" else self.v_scale)[layer], ids)
                    wide.view(n, length, heads, dim).mul_(s.view(n, length, heads, 1))
                x = wide
            out.append(x.view(n, length, heads, dim).transpose(1, 2))
        return out[0], out[1]

    def _gather_blocks(self, name: str, store: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        rows = store.view(-1, self.block_size * store.shape[1])  # one row per block: a contiguous copy each
        out = self._workspace(name, ids.numel() * rows.shape[1], store.dtype).view(ids.numel(), rows.shape[1])
        return torch.index_select(rows, 0, ids, out=out)

    def _workspace(self, name: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat buffer reused across layers and steps: allocating megabytes per layer and step
        made each CPU gather several times slower (fresh pages from the OS every time)."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel + numel // 4, dtype=dtype, device=self.k[0].device)
            self._buffers[name] = buf
        return buf[:numel]

    def copy_blocks(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy whole blocks src[i] -> dst[i] in every layer (copy-on-write)."""
        bs = self.block_size
        offsets = torch.arange(bs, device=src.device)
        src_slots, dst_slots = (src[:, None] * bs + offsets).reshape(-1), (dst[:, None] * bs + offsets).reshape(-1)
        tensors = self.k + self.v + (self.k_scale + self.v_scale if self.quantized else [])
        for t in tensors:
            t.index_copy_(0, dst_slots, t.index_select(0, src_slots))


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., d] -> int8 values and absmax/127 scales [...] (one per row of d values)."""
    scale = x.float().abs().amax(dim=-1).clamp_min(1e-8) / 127.0
    q = torch.round(x.float() / scale[..., None]).clamp_(-127, 127).to(torch.int8)
    return q, scale
