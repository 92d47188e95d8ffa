"""Chat examples -> token ids with loss targets -> packed rows -> micro-batches by token budget.

A token record (train/data.py `TokenRecord`: ids with a loss mask, e.g. an oracle episode
rendered by the episode loop) is taken as it is: loss on its masked tokens. A chat is tokenized
with the chat template's `assistant_masks` (templates with `{% generation %}`); for templates
without it, the assistant spans are found by diffing the rendered template (prefix with a
generation prompt vs. prefix plus the assistant turn).

Each example carries next-token `labels` that are already shifted (`labels[t]` is the
target predicted at position t, -100 where there is no loss), so rows can be concatenated
freely: the last token of one example never predicts the first token of the next.

Packing is first-fit decreasing into rows of `row_tokens`. Position ids restart at 0 for
every example, and a packed micro-batch is passed with `attention_mask=None`: transformers
5.x (`masking_utils.find_packed_sequence_indices`) then derives a block-diagonal causal mask
from the position-id resets, so attention never crosses an example boundary (proved by
tests/invariants/test_packing_exact.py). Tail padding of a row is its own block.
Padded micro-batches (packing off) are right-padded, where the causal mask alone keeps
real tokens from seeing padding.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from posttrain.core.errors import DataError
from posttrain.train.data import TokenRecord

IGNORE = -100
PACK_WINDOW_EXAMPLES = 16384  # FFD runs over windows of this many examples (cost ~ window x rows)
_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass(frozen=True)
class TokenizedExample:
    input_ids: np.ndarray  # [n] int32 (int32 halves the memory of a large tokenized dataset)
    labels: np.ndarray  # [n] int32: labels[t] = input_ids[t+1] where t+1 is an assistant token, else -100

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [rows, row_len]
    position_ids: torch.Tensor | None  # [rows, row_len], restarting at 0 per example (None: 0..row_len-1)
    labels: torch.Tensor  # [rows, row_len], -100 where no loss
    n_tokens: int  # real (non-pad) tokens
    n_loss_tokens: int  # positions with a label

    def to(self, device: torch.device) -> "MicroBatch":
        pos = None if self.position_ids is None else self.position_ids.to(device)
        return MicroBatch(self.input_ids.to(device), pos, self.labels.to(device), self.n_tokens, self.n_loss_tokens)


@dataclass
class TokenizeStats:
    truncated: int = 0  # examples cut to max_seq_len
    dropped: int = 0  # examples with no assistant token left (e.g. truncated away)


# ---------------------------------------------------------------- tokenization


def has_generation_tags(tokenizer) -> bool:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default", "")
    return bool(template) and bool(_GENERATION_TAG.search(template))


def _mask_by_template(tokenizer, messages) -> tuple[list[int], list[int]]:
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(out["input_ids"]), list(out["assistant_masks"])


def _mask_by_prefix_diff(tokenizer, messages) -> tuple[list[int], list[int]]:
    """Assistant spans as character ranges from rendering growing prefixes, mapped to tokens."""
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True) if i else ""
        upto = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        if full.startswith(upto) and upto.startswith(before) and len(upto) > len(before):
            spans.append((len(before), len(upto)))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(len(offsets), dtype=np.int64)
    for start, end in spans:
        mask |= (offsets[:, 1] > start) & (offsets[:, 0] < end)
    return list(enc["input_ids"]), mask.tolist()


def tokenize_example(tokenizer, messages, max_seq_len: int, use_template_mask: bool | None = None):
    """(TokenizedExample or None if no assistant token survives truncation, was_truncated);
    `messages` may be a TokenRecord (its ids and mask taken as they are)."""
    if isinstance(messages, TokenRecord):
        ids, mask = list(messages.input_ids), list(messages.loss_mask)
    else:
        if use_template_mask is None:
            use_template_mask = has_generation_tags(tokenizer)
        ids, mask = (_mask_by_template if use_template_mask else _mask_by_prefix_diff)(tokenizer, messages)
    truncated = len(ids) > max_seq_len
    ids_arr = np.asarray(ids[:max_seq_len], dtype=np.int32)
    mask_arr = np.asarray(mask[:max_seq_len], dtype=bool)
    labels = np.full(len(ids_arr), IGNORE, dtype=np.int32)
    labels[:-1] = np.where(mask_arr[1:], ids_arr[1:], IGNORE)
    if not (labels != IGNORE).any():
        return None, truncated
    return TokenizedExample(ids_arr, labels), truncated


def tokenize_examples(tokenizer, examples, max_seq_len: int) -> tuple[list[TokenizedExample], TokenizeStats]:
    """Tokenize chats with loss targets on assistant tokens only (token records: on their masked
    tokens); truncate to max_seq_len."""
    chats = any(not isinstance(ex, TokenRecord) for ex in examples)
    if chats and not getattr(tokenizer, "chat_template", None):
        raise DataError("the tokenizer has no chat template; SFT needs one to render the messages")
    use_template_mask = has_generation_tags(tokenizer) if chats else False
    stats = TokenizeStats()
    out = []
    for messages in examples:
        ex, truncated = tokenize_example(tokenizer, messages, max_seq_len, use_template_mask)
        stats.truncated += truncated
        if ex is None:
            stats.dropped += 1
        else:
            out.append(ex)
    return out, stats


# ---------------------------------------------------------------- packing


def pack_ffd(lengths: Sequence[int], row_tokens: int) -> list[list[int]]:
    """First-fit decreasing: indices of `lengths` grouped into rows holding <= row_tokens tokens.

    An item longer than row_tokens gets a row of its own. Rows come out in creation order.
    """
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths_arr, kind="stable")
    free = np.zeros(len(lengths_arr), dtype=np.int64)  # free tokens per row (at most one row per item)
    rows: list[list[int]] = []
    for i in order.tolist():
        n = int(lengths_arr[i])
        fits = free[: len(rows)] >= n
        r = int(fits.argmax()) if len(rows) else 0
        if len(rows) and fits[r]:
            rows[r].append(i)
            free[r] -= n
        else:
            rows.append([i])
            free[len(rows) - 1] = max(row_tokens - n, 0)
    return rows


def collate_packed(rows: list[list[TokenizedExample]], pad_id: int) -> MicroBatch:
    """Rows of examples -> one micro-batch; positions restart per example; pad is its own block."""
    row_len = max(sum(len(ex) for ex in row) for row in rows)
    ids = np.full((len(rows), row_len), pad_id, dtype=np.int64)
    labels = np.full((len(rows), row_len), IGNORE, dtype=np.int64)
    pos = np.empty((len(rows), row_len), dtype=np.int64)
    n_tokens = 0
    for r, row in enumerate(rows):
        at = 0
        for ex in row:
            n = len(ex)
            ids[r, at : at + n] = ex.input_ids
            labels[r, at : at + n] = ex.labels
            pos[r, at : at + n] = np.arange(n)
            at += n
        pos[r, at:] = np.arange(row_len - at)
        n_tokens += at
    n_loss = int((labels != IGNORE).sum())
    return MicroBatch(torch.from_numpy(ids), torch.from_numpy(pos), torch.from_numpy(labels), n_tokens, n_loss)


def collate_padded(examples: list[TokenizedExample], pad_id: int) -> MicroBatch:
    """One example per row, right-padded to the longest; default positions, plain causal mask."""
    mb = collate_packed([[ex] for ex in examples], pad_id)
    return MicroBatch(mb.input_ids, None, mb.labels, mb.n_tokens, mb.n_loss_tokens)


def _group_by_budget(lengths: Sequence[int], max_tokens_per_microbatch: int) -> list[list[int]]:
    """Consecutive items into groups whose padded size (count x longest) fits the budget."""
    groups: list[list[int]] = []
    longest = 0
    for i, n in enumerate(lengths):
        if groups and (len(groups[-1]) + 1) * max(longest, n) <= max_tokens_per_microbatch:
            groups[-1].append(i)
            longest = max(longest, n)
        else:
            groups.append([i])
            longest = n
    return groups


class MicroBatches(Sequence[MicroBatch]):
    """A plan of micro-batches (rows of example indices per micro-batch), collated on access,
    so only the tokenized examples stay in memory, not a padded copy of the whole dataset."""

    def __init__(self, examples: list[TokenizedExample], plan: list[list[list[int]]], packing: bool, pad_id: int):
        self.examples, self.plan, self.packing, self.pad_id = examples, plan, packing, pad_id

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        rows = [[self.examples[k] for k in row] for row in self.plan[i]]
        if self.packing:
            return collate_packed(rows, self.pad_id)
        return collate_padded([row[0] for row in rows], self.pad_id)


def build_microbatches(
    examples: list[TokenizedExample],
    *,
    packing: bool,
    row_tokens: int,
    max_tokens_per_microbatch: int,
    pad_id: int,
    seed: int,
) -> MicroBatches:
    """Shuffle (by seed), pack or pad, and cut into micro-batches of <= max_tokens_per_microbatch
    padded tokens (a single row longer than the budget forms its own micro-batch)."""
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    if packing:
        rows: list[list[int]] = []
        for start in range(0, len(order), PACK_WINDOW_EXAMPLES):
            window = order[start : start + PACK_WINDOW_EXAMPLES]
            rows += [[window[j] for j in row] for row in pack_ffd([len(examples[i]) for i in window], row_tokens)]
    else:
        rows = [[i] for i in order]
    groups = _group_by_budget([sum(len(examples[i]) for i in row) for row in rows], max_tokens_per_microbatch)
    return MicroBatches(examples, [[rows[j] for j in g] for g in groups], packing, pad_id)


# ---------------------------------------------------------------- forward


_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def loss_logits(model, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [n_loss, vocab], targets [n_loss]) at the labelled positions of a micro-batch.

    Runs the decoder, then the LM head only on labelled positions (saves the [tokens, vocab]
    logits of prompt and padding). Models whose head does more than a linear map fall back
    to the full forward. `use_cache=False`: a cache would make transformers ignore packing.
    """
    selected = mb.labels != IGNORE
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs = dict(input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=None, use_cache=False)
    if any(getattr(base.config, name, None) is not None for name in _LOGIT_TRANSFORMS):
        logits = model(**kwargs).logits[selected]
    else:
        hidden = base.get_decoder()(**kwargs).last_hidden_state
        logits = base.get_output_embeddings()(hidden[selected])
    return logits, mb.labels[selected]
