"""Scalar-head reward models in the HF sequence-classification layout.

    rm = reward_model_from_causal_lm(path, dtype="float32", seed=0)   # causal LM body + a 1-output score head
    r = sequence_rewards(rm, [prompt + chosen, prompt + rejected, ...], pad_id=pad_id)  # [B], differentiable
    final = save_reward_model(rm, tokenizer, out_dir / "final", RewardStats(mean, std, n))
    stats = load_reward_stats(final)        # core/hf.py (the scoring side): final/reward_stats.json
    value = normalised(r, stats)            # core/hf.py: sigmoid((r - mean) / std), in [0, 1]

The model is `AutoModelForSequenceClassification` with `num_labels=1` of the causal LM's own
architecture (Qwen2ForSequenceClassification, LlamaForSequenceClassification, ...), so
`AutoModelForSequenceClassification.from_pretrained(final)` and the `reward_model` verifier
(verifiers/reward_model.py, through verifiers/rm_judge.py's RewardModelJudge) load what is saved.

Score head initialisation: normal with std 1/sqrt(hidden + 1), drawn from a generator seeded
with `seed` (so the same seed gives the same head on any device), not zeros: a zero head makes
every reward 0 and gives the body no gradient until the head has moved, while this scale gives
initial rewards of order 1 (the final norm keeps hidden states at unit scale) and a gradient to
every layer from the first step.

The reward of a sequence is the score head applied to the final hidden state AT its last token
(position T-1), which is what HF's pooling (the rightmost non-pad token) reads when the sequence
has no padding, and what RewardModelJudge reads (its own pooling at the last real token) even
when the last token is the pad id. `sequence_rewards` packs with rl_batch's packer: each
sequence gets one dummy token appended whose "prediction" position is T-1, so rl_batch's
`pred_index` of that token is exactly the hidden state we need; the dummy is causally after
every real token and changes nothing. Consecutive sequences 2k, 2k+1 (chosen and rejected of one
pair) share their longest common prefix through shared-prefix packing when the attention takes
a 4D mask; else each sequence is a block of its own in position-id packing (positions restart at
0, `attention_mask=None`). Both equal the one-by-one forward (tests/unit/train/test_reward_model.py).
"""

from __future__ import annotations

import json
import math
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import torch

from posttrain.core.errors import DataError, ModelLoadError, TrainingError
from posttrain.core.fsio import replace_dir
from posttrain.core.hf import (STATS_FILE, STATS_VERSION, RewardStats, _check_path, load_tokenizer, pick_device,
                               quiet_hf_progress, resolve_dtype)
from posttrain.train.rl_batch import Sample, _attention_mask, _base, build_rl_microbatches, supports_shared_prefix



# ---------------------------------------------------------------- building


@contextmanager
def _quiet_hf_warnings():
    """Silence 'Some weights ... newly initialized' / 'unused weights (lm_head)': both are expected here."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _first(x):
    return x[0] if isinstance(x, (list, tuple)) and x else x


def _pad_id(path: str, config) -> int | None:
    try:
        tok = load_tokenizer(path)  # pad = eos when the tokenizer has no pad token
        if tok.pad_token_id is not None:
            return int(tok.pad_token_id)
    except ModelLoadError:
        pass
    text = config.get_text_config()
    pad = _first(getattr(text, "pad_token_id", None))
    return pad if pad is not None else _first(getattr(text, "eos_token_id", None))


def init_score_head(rm, seed: int = 0) -> None:
    """Score head := normal(0, 1/sqrt(hidden + 1)) from a generator seeded with `seed`; bias (if any) := 0."""
    head = _base(rm).score
    gen = torch.Generator().manual_seed(seed)
    hidden = head.weight.shape[-1]
    w = torch.randn(head.weight.shape, generator=gen, dtype=torch.float32) / math.sqrt(hidden + 1)
    with torch.no_grad():
        head.weight.copy_(w.to(head.weight.dtype))
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()


def reward_model_from_causal_lm(path: str, *, dtype: str = "float32", device: torch.device | None = None,
                                seed: int = 0):
    """The causal LM at `path` as `<Arch>ForSequenceClassification(num_labels=1)`: its body's weights,
    `pad_token_id` set in the config (the tokenizer's pad, else eos), a fresh score head (`init_score_head`)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    _check_path(path)
    device = device or pick_device()
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load model config from {path!r}: {str(e).splitlines()[0]}") from None
    if config.model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise ModelLoadError(f"model {path!r} (model_type {config.model_type!r}) has no *ForSequenceClassification "
                             f"architecture in transformers: it cannot be made a reward model")
    config.num_labels = 1
    pad = _pad_id(path, config)
    if pad is not None:
        config.pad_token_id = pad
        if config.get_text_config() is not config:
            config.get_text_config().pad_token_id = pad
    try:
        with quiet_hf_progress(), _quiet_hf_warnings():
            rm = AutoModelForSequenceClassification.from_pretrained(path, config=config,
                                                                    dtype=resolve_dtype(dtype, device))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load reward model from {path!r}: {str(e).splitlines()[0]}") from None
    init_score_head(rm, seed)
    return rm.to(device)


# ---------------------------------------------------------------- forward


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _samples(seqs: Sequence[Sequence[int]], pad_id: int) -> list[Sample]:
    """Each sequence + one dummy token; loss mask 1 at the dummy (position T, predicted from T-1) and at
    the first token after the prefix it shares with its pair partner (2k <-> 2k+1): that position
    defines rl_batch's prefix, so the two share a unit under shared-prefix packing."""
    out = []
    for k, s in enumerate(seqs):
        if not len(s):
            raise DataError(f"sequence {k} is empty: a reward is read at a sequence's last token")
        partner = k ^ 1
        t = len(s)
        f = max(1, _lcp(s, seqs[partner])) if partner < len(seqs) else t
        mask = [0] * (t + 1)
        mask[min(f, t)] = mask[t] = 1
        tokens = [*s, pad_id]
        out.append(Sample(token_ids=tokens, loss_mask=mask, old_logprobs=[0.0] * (t + 1), advantage=0.0, seq=k))
    return out


def sequence_rewards(rm, seqs: Sequence[Sequence[int]], *, max_tokens_per_microbatch: int = 8192, pad_id: int,
                     share_prefix: bool | None = None) -> torch.Tensor:
    """The reward of each sequence [B] (fp32), read at its last token; differentiable. `rm`: a
    *ForSequenceClassification model (or a PEFT wrapper of one). `share_prefix` None: pairs (2k, 2k+1)
    share their common prefix when the attention supports it; False: position-id packing only."""
    base = _base(rm)
    body, head = getattr(base, base.base_model_prefix), base.score
    device = next(rm.parameters()).device
    if share_prefix is None:
        share_prefix = supports_shared_prefix(rm)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=device)
    picked, rewards = [], []
    samples = _samples(seqs, pad_id)
    for mb in build_rl_microbatches(samples, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                                    share_prefix=share_prefix):
        mb = mb.to(device)
        hidden = body(input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=_attention_mask(base, mb),
                      use_cache=False).last_hidden_state
        last = mb.token_pos == lengths[mb.seq_index]  # the dummy tokens: predicted from position T-1
        states = hidden.reshape(-1, hidden.shape[-1])[mb.pred_index[last]]
        rewards.append(head(states)[:, 0].float())
        picked.append(mb.seq_index[last])
    out = torch.zeros(len(seqs), dtype=torch.float32, device=device)
    if rewards:
        out = out.index_add(0, torch.cat(picked), torch.cat(rewards))
    return out


# ---------------------------------------------------------------- saving and stats


def save_reward_model(rm, tokenizer, out_dir: str | Path, stats: RewardStats, *,
                      dtype: torch.dtype = torch.float32) -> Path:
    """out_dir: the RM (safetensors, converted to `dtype` in place, like train/run.py's export_final:
    pass a copy to keep training in another dtype), its tokenizer and reward_stats.json
    {"mean", "std", "n", "version": 1}; built in a sibling tmp directory, then swapped in.
    A std below 1e-6 is written as 1e-6 (what `normalised` divides by anyway)."""
    if not (math.isfinite(stats.mean) and math.isfinite(stats.std)):
        raise TrainingError(f"reward stats are not finite (mean {stats.mean}, std {stats.std}): not saving {out_dir}")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model = rm.to(dtype)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else tokenizer.eos_token_id
    with quiet_hf_progress():
        model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    record = {"mean": float(stats.mean), "std": max(float(stats.std), 1e-6), "n": int(stats.n),
              "version": STATS_VERSION}
    (tmp / STATS_FILE).write_text(json.dumps(record, indent=1) + "\n")
    replace_dir(tmp, out)
    return out
