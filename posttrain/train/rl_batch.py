"""Trajectories -> packed micro-batches with per-token RL data -> the trainer's logprobs.

Each trained token carries its advantage, the logprob it was sampled with (the "old"
logprob of the PPO ratio), its sample's sampling temperature (every logprob the trainer
computes for a sample is log_softmax(logits / T) at the T it was sampled with, so a replayed
trajectory sampled at T=1.0 early in a schedule is trained at T=1.0 later, and its ratio is 1
before any update), optionally the reference model's logprob, and the step-global index of its
sequence (for sequence-level loss aggregation). The token at position t of a
sample is predicted from the hidden state at position t-1.

Sampler/trainer gap (train/rl_update.py measures and corrects it): each token also carries the
sampler's own logprob (the old logprob, unless the trainer recomputed that), whether its sample
is fresh (sampled by the weights being trained, so the gap is measured on it), and whether its
truncated importance weight is computed in the loss (`inline_tis`, for a sample drawn with
inexact rollout weights).

Shared-prefix packing. A sample's prefix is its tokens before its first trained token (the
prompt). Samples with identical prefixes (a GRPO group) form a unit laid out once as
[prefix, suffix_1, ..., suffix_K], suffix_i = sample i from its first trained token on.
Positions are those of the unshared sequences (prefix 0..P-1, every suffix P, P+1, ...), and
a boolean [R, 1, L, L] attention mask lets a query see a key iff both are in the same unit,
the key comes no later in the row, and the key is in the prefix or in the query's suffix
(padding sees only itself). So every hidden state equals the unshared one, while the prompt
is computed once per group instead of K times. The first trained token of every suffix is
predicted from the LAST prefix token: that hidden state is gathered once per suffix, and
autograd sums the gradients. Units (split into several, each with its own prefix copy, when
longer than a row) are packed first-fit decreasing into rows, rows into micro-batches by
token budget.

Attention implementations that cannot take a custom 4D mask (flash-attention, flex,
sliding-window layers) use the unshared layout instead: one unit per sample, positions
restarting at 0, `attention_mask=None`, from which transformers derives the block-diagonal
mask (see train/packing.py). Per-token tensors are flat: `pred_index` [N] indexes the
[R*L] hidden states, `token_pos` [N] is each trained token's position in its sample.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from posttrain.core.errors import TrainingError
from posttrain.train.packing import _LOGIT_TRANSFORMS, _group_by_budget, pack_ffd

ROW_TOKENS = 256  # packed row length (longer sequences get a row of their own); 256 beat 512 and 1024 by 20-40% on ~70-token RL samples (attention over a packed row grows with its length squared)
MASK_ATTENTION = ("sdpa", "eager")  # implementations that take our 4D mask (sdpa: bool, eager: additive float)


@dataclass(frozen=True)
class Sample:
    token_ids: Sequence[int]  # [T] prompt + completion
    loss_mask: Sequence[int]  # [T] 1 on sampled tokens
    old_logprobs: Sequence[float]  # [T] logprob each token was sampled with (0 where mask is 0)
    advantage: float
    seq: int  # index of this sequence within its optimizer step
    ref_logprobs: Sequence[float] | None = None  # [T]
    token_weights: Sequence[float] | None = None  # [T] per-token truncated IS weight (loss multiplier), None: 1
    temperature: float = 1.0  # the logprob temperature it was sampled at (SamplingParams.logprob_temperature)
    sampler_logprobs: Sequence[float] | None = None  # [T] the sampler's, where old_logprobs are not (recomputed)
    fresh: bool = True  # sampled by the weights being trained (not replayed): its sampler/trainer gap is measured
    # sampled with inexact weights and corrected in the loss: old := trainer logp, weight := min(exp(gap), tis_cap)
    inline_tis: bool = False


@dataclass
class RLMicroBatch:
    input_ids: torch.Tensor  # [R, L] long
    position_ids: torch.Tensor  # [R, L] long: each token's position in its own sample
    attention_mask: torch.Tensor | None  # [R, 1, L, L] bool (True = attend); None: position-id packing, no sharing
    pred_index: torch.Tensor  # [N] long: flat index into the [R*L] hidden states predicting each trained token
    token_pos: torch.Tensor  # [N] long: position of each trained token within its sample
    targets: torch.Tensor  # [N] long: the trained tokens
    old_logprobs: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    seq_index: torch.Tensor  # [N] long
    ref_logprobs: torch.Tensor | None  # [N]
    token_weights: torch.Tensor | None  # [N]
    temperatures: torch.Tensor  # [N] float: each trained token's sample's temperature
    sampler_logprobs: torch.Tensor | None = None  # [N] the sampler's logprobs (= old_logprobs unless recomputed)
    fresh: torch.Tensor | None = None  # [N] bool: its sample is fresh (the gap is measured on it)
    inline_tis: torch.Tensor | None = None  # [N] bool: TIS computed in the loss; None: no such token here
    weighted: torch.Tensor | None = None  # [N] bool: its sample has token_weights (others got 1); None: none has

    @property
    def num_tokens(self) -> int:
        return int(self.targets.numel())

    def to(self, device: torch.device) -> "RLMicroBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return RLMicroBatch(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


# ---------------------------------------------------------------- layout

Unit = tuple[int, list[int]]  # (prefix length P, sample indices); member i contributes its tokens [P:]


def _first_trained(s: Sample) -> int | None:
    """First position t >= 1 with loss mask 1 (position 0 has no predecessor, so it is never trained)."""
    return next((t for t in range(1, len(s.loss_mask)) if s.loss_mask[t]), None)


def _unit_len(samples: list[Sample], unit: Unit) -> int:
    p, members = unit
    return p + sum(len(samples[k].token_ids) - p for k in members)


def plan_units(samples: list[Sample], *, share_prefix: bool, row_tokens: int) -> list[Unit]:
    """Samples -> units in order of first appearance. With `share_prefix`, samples with the same
    prefix share one unit, split into pieces of <= row_tokens tokens (each with its own prefix copy;
    a piece of one sample may be longer). A sample without trained tokens is a unit of its own."""
    keyed: dict[tuple, tuple[int, list[int]]] = {}
    for k, s in enumerate(samples):
        f = _first_trained(s)
        if f is None:
            keyed[("alone", k)] = (len(s.token_ids), [k])
        elif not share_prefix:
            keyed[("alone", k)] = (f, [k])
        else:
            keyed.setdefault(("prefix", tuple(s.token_ids[:f])), (f, []))[1].append(k)
    units: list[Unit] = []
    for p, members in keyed.values():
        piece, size = [], p
        for k in members:
            n = len(samples[k].token_ids) - p
            if piece and size + n > row_tokens:
                units.append((p, piece))
                piece, size = [], p
            piece.append(k)
            size += n
        units.append((p, piece))
    return units


def _collate(samples: list[Sample], units: list[Unit], rows: list[list[int]], pad_id: int,
             share_prefix: bool) -> RLMicroBatch:
    row_len = max(sum(_unit_len(samples, units[u]) for u in row) for row in rows)
    shape = (len(rows), row_len)
    ids = np.full(shape, pad_id, dtype=np.int64)
    pos = np.zeros(shape, dtype=np.int64)
    unit_id = np.zeros(shape, dtype=np.int64)  # unique per unit (and per padding token)
    seg = np.zeros(shape, dtype=np.int64)  # 0 = prefix, i = suffix of the unit's i-th member, -1 = padding
    with_ref = samples[0].ref_logprobs is not None
    with_w = any(s.token_weights is not None for s in samples)  # a sample without weights gets 1
    with_inline = any(s.inline_tis for s in samples)
    cols: dict[str, list[np.ndarray]] = {f: [] for f in ("pred", "tpos", "tgt", "old", "adv", "seq", "ref", "wts",
                                                          "temp", "slp", "fresh", "inline", "weighted")}
    uid = 0
    for r, row in enumerate(rows):
        at = 0
        for u in row:
            p, members = units[u]
            ids[r, at : at + p] = np.asarray(samples[members[0]].token_ids[:p], dtype=np.int64)
            pos[r, at : at + p] = np.arange(p)
            unit_id[r, at : at + p] = uid
            c = at + p
            for j, k in enumerate(members, start=1):
                s = samples[k]
                toks = np.asarray(s.token_ids, dtype=np.int64)
                n = len(toks) - p
                ids[r, c : c + n] = toks[p:]
                pos[r, c : c + n] = np.arange(p, len(toks))
                unit_id[r, c : c + n], seg[r, c : c + n] = uid, j
                ts = np.flatnonzero(np.asarray(s.loss_mask[p:], dtype=bool)) + p  # trained positions
                src = ts - 1  # position predicting token t: p - 1 (the last prefix token) for the first one
                cols["pred"].append(r * row_len + np.where(src < p, at + src, c + src - p))
                cols["tpos"].append(ts)
                cols["tgt"].append(toks[ts])
                cols["old"].append(np.asarray(s.old_logprobs, dtype=np.float32)[ts])
                sampler = s.sampler_logprobs if s.sampler_logprobs is not None else s.old_logprobs
                cols["slp"].append(np.asarray(sampler, dtype=np.float32)[ts])
                cols["fresh"].append(np.full(len(ts), s.fresh, dtype=bool))
                cols["adv"].append(np.full(len(ts), s.advantage, dtype=np.float32))
                cols["seq"].append(np.full(len(ts), s.seq, dtype=np.int64))
                cols["temp"].append(np.full(len(ts), s.temperature, dtype=np.float32))
                if with_ref:
                    cols["ref"].append(np.asarray(s.ref_logprobs, dtype=np.float32)[ts])
                if with_w:
                    has = s.token_weights is not None
                    cols["wts"].append(np.asarray(s.token_weights, dtype=np.float32)[ts] if has
                                       else np.ones(len(ts), dtype=np.float32))
                    cols["weighted"].append(np.full(len(ts), has, dtype=bool))
                if with_inline:
                    cols["inline"].append(np.full(len(ts), s.inline_tis, dtype=bool))
                c += n
            at, uid = c, uid + 1
        pos[r, at:] = np.arange(row_len - at)
        unit_id[r, at:] = -1 - np.arange(row_len - at)
        seg[r, at:] = -1
    flat = {f: torch.from_numpy(np.concatenate(v)) if v else None for f, v in cols.items()}
    mask = None
    if share_prefix:
        u, g = torch.from_numpy(unit_id), torch.from_numpy(seg)
        causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
        visible = (g[:, None, :] == 0) | (g[:, :, None] == g[:, None, :])
        mask = ((u[:, :, None] == u[:, None, :]) & visible & causal)[:, None]
    return RLMicroBatch(
        input_ids=torch.from_numpy(ids),
        position_ids=torch.from_numpy(pos),
        attention_mask=mask,
        pred_index=flat["pred"],
        token_pos=flat["tpos"],
        targets=flat["tgt"],
        old_logprobs=flat["old"],
        advantages=flat["adv"],
        seq_index=flat["seq"],
        ref_logprobs=flat["ref"],
        token_weights=flat["wts"],
        temperatures=flat["temp"] if flat["temp"] is not None else torch.zeros(0),
        sampler_logprobs=flat["slp"] if flat["slp"] is not None else torch.zeros(0),
        fresh=flat["fresh"] if flat["fresh"] is not None else torch.zeros(0, dtype=torch.bool),
        inline_tis=flat["inline"],
        weighted=flat["weighted"],
    )


def build_rl_microbatches(samples: list[Sample], *, max_tokens_per_microbatch: int, pad_id: int,
                          share_prefix: bool = True) -> list[RLMicroBatch]:
    """Pack `samples` into rows and the rows into micro-batches of <= max_tokens_per_microbatch tokens.

    `share_prefix`: samples with the same prompt share its computation (needs an attention
    implementation that takes a 4D mask: see `supports_shared_prefix`); False: one sequence per unit.
    """
    if not samples:
        return []
    # rows never outgrow the budget (a longer sequence still gets a row, and a micro-batch, of its own)
    row_tokens = min(max(ROW_TOKENS, max(len(s.token_ids) for s in samples)), max_tokens_per_microbatch)
    units = plan_units(samples, share_prefix=share_prefix, row_tokens=row_tokens)
    unit_lengths = [_unit_len(samples, u) for u in units]
    rows = pack_ffd(unit_lengths, row_tokens)
    groups = _group_by_budget([sum(unit_lengths[i] for i in row) for row in rows], max_tokens_per_microbatch)
    return [_collate(samples, units, [rows[j] for j in g], pad_id, share_prefix) for g in groups]


# ---------------------------------------------------------------- forward


def _base(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_shared_prefix(model) -> bool:
    """Whether `model`'s attention takes the custom 4D mask of shared-prefix packing."""
    config = _base(model).config
    layer_types = getattr(config, "layer_types", None) or []
    return getattr(config, "_attn_implementation", None) in MASK_ATTENTION and all(
        t == "full_attention" for t in layer_types)


def _attention_mask(base, mb: RLMicroBatch) -> torch.Tensor | None:
    if mb.attention_mask is None:
        return None
    impl = getattr(base.config, "_attn_implementation", None)
    if not supports_shared_prefix(base):
        raise TrainingError(f"shared-prefix micro-batches need attention in {MASK_ATTENTION} with full attention "
                            f"layers, the model uses {impl!r}: build them with share_prefix=False")
    if impl == "sdpa":
        return mb.attention_mask
    dtype = base.get_input_embeddings().weight.dtype  # eager adds the mask to the attention scores
    additive = torch.zeros(mb.attention_mask.shape, dtype=dtype, device=mb.attention_mask.device)
    return additive.masked_fill(~mb.attention_mask, torch.finfo(dtype).min)


def hidden_and_head(model, mb: RLMicroBatch) -> tuple[torch.Tensor, torch.nn.Module]:
    """Final hidden states predicting the trained tokens [N, H] and the LM head (applied by the caller)."""
    base = _base(model)
    hidden = base.get_decoder()(
        input_ids=mb.input_ids, position_ids=mb.position_ids, attention_mask=_attention_mask(base, mb),
        use_cache=False,
    ).last_hidden_state
    return hidden.reshape(-1, hidden.shape[-1])[mb.pred_index], base.get_output_embeddings()


def token_logits(model, mb: RLMicroBatch) -> torch.Tensor:
    """Logits / T predicting the trained tokens, [N, V] in fp32, T = each token's sample's temperature.

    The LM head runs only on the gathered states, except for models whose head does more than a
    linear map (soft-capping, scaling: see train/packing.py), which take the full forward.
    A distributed policy (posttrain/train/distributed/trainer.py) routes the call through its DDP / FSDP2 wrapper."""
    routed = getattr(model, "routed_token_logits", None)
    if routed is not None:
        return routed(mb)
    base = _base(model)
    if any(getattr(base.config, name, None) is not None for name in _LOGIT_TRANSFORMS):
        logits = model(input_ids=mb.input_ids, position_ids=mb.position_ids,
                       attention_mask=_attention_mask(base, mb), use_cache=False).logits
        return logits.reshape(-1, logits.shape[-1])[mb.pred_index].float() / _temps(mb)
    hidden, head = hidden_and_head(model, mb)
    return head(hidden).float() / _temps(mb)


def _temps(mb: RLMicroBatch) -> torch.Tensor:
    return mb.temperatures.clamp_min(1e-6)[:, None]


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[target] per row, [N]."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


@torch.no_grad()
def sequence_logprobs(model, samples: list[Sample], *, max_tokens_per_microbatch: int,
                      pad_id: int, share_prefix: bool | None = None) -> list[list[float]]:
    """Per-token logprobs of each sample's trained tokens under `model` at the sample's own temperature
    ([T] each, 0 where untrained).
    `share_prefix` None: shared-prefix packing when the model supports it."""
    if share_prefix is None:
        share_prefix = supports_shared_prefix(model)
    out = [[0.0] * len(s.token_ids) for s in samples]
    numbered = [replace(s, seq=k) for k, s in enumerate(samples)]  # seq = index into `out`
    for mb in build_rl_microbatches(numbered, max_tokens_per_microbatch=max_tokens_per_microbatch, pad_id=pad_id,
                                    share_prefix=share_prefix):
        lp = gather_logprobs(token_logits(model, mb), mb.targets).tolist()
        for value, s, t in zip(lp, mb.seq_index.tolist(), mb.token_pos.tolist()):
            out[s][t] = value
    return out
