"""Summed completion logprobs of preference pairs (DPO, IPO, KTO...), packed, differentiable.

    items = pair_items(pairs)                          # [(prompt, chosen), (prompt, rejected), ...]
    for chunk in token_chunks(pair_lengths, max_tokens):   # pair indices; a pair is never split
        sums, counts = completion_logps(model, pair_items([pairs[i] for i in chunk]), pad_id=pad_id,
                                        max_tokens_per_microbatch=max_tokens)
        loss_of(sums[0::2], sums[1::2]).backward()         # backward per chunk

An item is (prompt_ids, completion_ids). Its value is the sum over the completion tokens of
log_softmax(logits)[token] at temperature 1, with the number of completion tokens. The items
become rl_batch `Sample`s (loss mask 1 on the completion) and go through rl_batch's packer:
with shared-prefix packing (attention that takes a 4D mask: `supports_shared_prefix`) the
items of one prompt (chosen and rejected of a pair, consecutive) are laid out as
[prompt, chosen, rejected] and the prompt is computed once; otherwise each item is a sequence
of its own in position-id packing. Both give the unpacked values (tests/unit/train/test_pair_forward.py).

Memory: `completion_logps` keeps the graph of every micro-batch it runs until the caller's
backward, so a big batch should be split with `token_chunks` and backpropagated chunk by chunk
(the gradients accumulate in the parameters); `max_tokens_per_microbatch` only bounds one forward.
"""

from __future__ import annotations

from typing import Sequence

import torch

from posttrain.core.errors import DataError
from posttrain.train.rl_batch import (
    Sample,
    build_rl_microbatches,
    gather_logprobs,
    supports_shared_prefix,
    token_logits,
)

Item = tuple[Sequence[int], Sequence[int]]  # (prompt_ids, completion_ids)


def pair_items(pairs) -> list[tuple]:
    """[(prompt, chosen), (prompt, rejected), ...] for pairs with `prompt_ids`, `chosen_ids`,
    `rejected_ids`: items 2k and 2k+1 are pair k's and share its prompt."""
    return [item for p in pairs for item in ((p.prompt_ids, p.chosen_ids), (p.prompt_ids, p.rejected_ids))]


def token_chunks(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive groups of positions 0..n-1 whose total length stays within `max_tokens` (an
    item longer than that is a group of its own): the forward/backward units of one step. Callers
    pass one length per pair (prompt once + both completions), so a pair is never split."""
    chunks: list[list[int]] = []
    size = 0
    for i, n in enumerate(lengths):
        if chunks and size + n <= max_tokens:
            chunks[-1].append(i)
            size += n
        else:
            chunks.append([i])
            size = n
    return chunks


def _samples(items: Sequence[Item]) -> list[Sample]:
    samples = []
    for k, (prompt, completion) in enumerate(items):
        if not completion:
            continue  # nothing to score: sum 0 over 0 tokens
        if not prompt:
            raise DataError(f"preference item {k} has an empty prompt: its first completion token has no "
                            f"position to be predicted from")
        tokens = [*prompt, *completion]
        mask = [0] * len(prompt) + [1] * len(completion)
        samples.append(Sample(token_ids=tokens, loss_mask=mask, old_logprobs=[0.0] * len(tokens), advantage=0.0,
                              seq=k))
    return samples


def _device(model) -> torch.device:
    return next(model.parameters()).device


def completion_logps(model, items: Sequence[Item], *, max_tokens_per_microbatch: int = 8192, pad_id: int,
                     share_prefix: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of each item's completion-token logprobs [B] fp32, its completion token count [B] long),
    differentiable w.r.t. the model's parameters. `share_prefix` None: shared-prefix packing when the
    model's attention supports it; False: position-id packing, one sequence per item.
    An item with an empty completion gets (0, 0); an empty prompt is a DataError."""
    device = _device(model)
    counts = torch.tensor([len(c) for _, c in items], dtype=torch.long, device=device)
    sums = torch.zeros(len(items), dtype=torch.float32, device=device)
    samples = _samples(items)
    if not samples:
        return sums, counts
    if share_prefix is None:
        share_prefix = supports_shared_prefix(model)
    for mb in build_rl_microbatches(samples, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                                    share_prefix=share_prefix):
        mb = mb.to(device)
        lp = gather_logprobs(token_logits(model, mb), mb.targets)  # [N] fp32, temperature 1
        sums = sums.index_add(0, mb.seq_index, lp)
    return sums, counts
