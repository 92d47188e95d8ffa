"""Batched generation with HF `generate` for eval and probes: left padding, K samples per
prompt, greedy or sampled, stopping at the given end-of-sequence tokens.

    outs = generate(model, tok, ["<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n"],
                    max_new_tokens=64, num_samples=4, temperature=1.0)
    outs[0][2].text, outs[0][2].num_tokens, outs[0][2].finish_reason   # prompt 0, sample 2

Prompts are already-rendered text (e.g. the chat template applied) and are tokenized without
adding special tokens. They are sorted by length so each batch pads little; results come
back in the input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch


@dataclass(frozen=True)
class Generation:
    text: str  # decoded completion, special tokens removed
    num_tokens: int  # generated tokens up to and including the stop token
    finish_reason: str  # "stop" (an eos token) | "length" (max_new_tokens reached)


def _trim(ids: list[int], eos_ids: set[int], pad_id: int | None) -> tuple[list[int], str]:
    for i, tok in enumerate(ids):
        if tok in eos_ids:
            return ids[: i + 1], "stop"
    while ids and pad_id is not None and ids[-1] == pad_id and pad_id not in eos_ids:
        ids = ids[:-1]
    return ids, "length"


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    num_samples: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    sequences_per_batch: int = 64,
    eos_token_ids: Sequence[int] | None = None,
    seed: int = 0,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[Generation]]:
    """`num_samples` completions for each prompt; greedy when temperature == 0 (then num_samples must be 1).

    `sequences_per_batch` bounds prompts x samples per `generate` call; `on_batch(n_prompts)`
    is called after each batch (for progress bars).
    """
    if temperature == 0 and num_samples > 1:
        raise ValueError("greedy decoding gives identical samples: use temperature > 0 with num_samples > 1")
    eos = list(eos_token_ids) if eos_token_ids is not None else [tokenizer.eos_token_id]
    eos_set = set(eos)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    device = next(model.parameters()).device
    prompts_per_batch = max(1, sequences_per_batch // num_samples)
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))
    results: list[list[Generation]] = [[] for _ in prompts]
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else dict(do_sample=False)
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        for start in range(0, len(order), prompts_per_batch):
            idx = order[start : start + prompts_per_batch]
            width = max(len(encoded[i]) for i in idx)
            input_ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            attention = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):  # left padding
                ids = encoded[i]
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
            out = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_samples,
                eos_token_id=eos,
                pad_token_id=pad_id,
                use_cache=True,
                **sampling,
            )
            new = out[:, width:].tolist()  # [len(idx) * num_samples, <= max_new_tokens]
            for j, ids in enumerate(new):
                ids, reason = _trim(ids, eos_set, pad_id)
                text = tokenizer.decode(ids, skip_special_tokens=True)
                results[idx[j // num_samples]].append(Generation(text, len(ids), reason))
            if on_batch is not None:
                on_batch(len(idx))
    finally:
        model.train(was_training)
    return results
