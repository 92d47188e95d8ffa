"""Speculative decoding for the paged engine: draft proposers and the hook that turns them on.

    stats = enable_speculative(engine, "ngram", k=4, max_running=4)   # or a DraftModelProposer
    engine.generate(...)                       # same tokens as without; fewer steps when drafts hit
    stats.stats().acceptance_rate; disable_speculative(engine)

The engine verifies drafts itself (`PagedEngine._accept`: every draft position is sampled with
the request's own next uniform, drafts are kept up to the first one that differs from its
sample), so the output is token-identical to decoding without drafts, greedy or seeded. This
module only proposes:

- `ngram_propose` (prompt lookup): the most recent earlier occurrence of the longest trailing
  n-gram and the tokens that followed it (periodically extended when the copy runs into the end
  of the sequence: a sequence that repeats with period p is continued with period p);
- `DraftModelProposer`: a small model (a second `PagedEngine`, same vocabulary) decodes k
  tokens greedily for every sequence in one batched run. Its per-sequence state lives in its
  own paged KV cache, found again by content (prefix sharing): each call feeds the sequence's
  current tokens, the full blocks computed in earlier calls are shared, only the tail since
  the last full block is recomputed, and rejected drafts cost nothing to roll back (a block
  holding them simply no longer matches).

`enable_speculative` sets `engine.propose` to a `Speculator`: drafts only while at most
`max_running` sequences are in flight (the long tail of a rollout step, where a forward pass
costs about the same for 1 or 1 + k query tokens), none otherwise. It counts drafts fed and
drafts that became output (`Speculator.stats()`).
"""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from posttrain.core.errors import ConfigError
from posttrain.engine.paged.engine import build_engine
from posttrain.engine.protocol import SamplingParams

_ITEM = 4  # bytes per token id in the search buffer (array 'i')


def _check_ngram_args(k: int, max_n: int, min_n: int) -> None:
    if k < 0 or min_n < 1 or max_n < min_n:
        raise ValueError(f"ngram_propose: need k >= 0 and 1 <= min_n <= max_n; got k={k}, min_n={min_n}, max_n={max_n}")


def _ngram_search(buf: bytes, tokens: Sequence[int], k: int, max_n: int, min_n: int, extend: bool) -> list[int]:
    """`buf` holds `tokens` as int32 bytes. The longest trailing n-gram's most recent earlier
    occurrence (bytes.rfind, aligned to whole tokens) -> up to k tokens that followed it."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        pattern = buf[(length - n) * _ITEM :]
        # an earlier occurrence at i needs i + n <= length - 1 (one token follows it)
        pos = buf.rfind(pattern, 0, (length - 1) * _ITEM)
        while pos > 0 and pos % _ITEM:  # matched across token boundaries: look further back
            pos = buf.rfind(pattern, 0, pos + len(pattern) - 1)
        if pos < 0:
            continue
        start = pos // _ITEM + n  # the first token after the occurrence
        drafts = list(tokens[start : start + k])
        if extend:  # the copy ran into the end: continue it with period length - start
            while len(drafts) < k:
                j = start + len(drafts)
                drafts.append(tokens[j] if j < length else drafts[j - length])
        return drafts
    return []


def ngram_propose(tokens: Sequence[int], *, k: int = 4, max_n: int = 4, min_n: int = 1,
                  extend: bool = True) -> list[int]:
    """Prompt-lookup drafts: for n from max_n down to min_n, find the most recent earlier
    occurrence of the sequence's last n tokens and return up to k tokens that followed it
    ([] when no n-gram recurs). `extend`: when fewer than k tokens follow the occurrence (it
    overlaps the tail), continue the copy periodically instead of returning fewer."""
    _check_ngram_args(k, max_n, min_n)
    if k == 0 or len(tokens) < 2:
        return []
    return _ngram_search(array("i", tokens).tobytes(), tokens, k, max_n, min_n, extend)


class Proposer(Protocol):
    """Drafts for several sequences at once (`limits[i]`: at most that many for `seqs[i]`)."""

    def bind(self, engine: Any) -> None: ...

    def propose_many(self, seqs: list[Any], limits: list[int]) -> list[list[int]]: ...


class NgramProposer:
    """`ngram_propose` over each sequence, with its int32 search buffer kept per request and
    extended by the new tokens only (the sequence's tokens only grow)."""

    def __init__(self, *, max_n: int = 4, min_n: int = 1, extend: bool = True):
        _check_ngram_args(0, max_n, min_n)
        self.max_n, self.min_n, self.extend = max_n, min_n, extend
        self._buffers: dict[int, array] = {}

    def bind(self, engine: Any) -> None:
        self._buffers.clear()

    def propose_many(self, seqs: list[Any], limits: list[int]) -> list[list[int]]:
        live = {}
        out = []
        for seq, k in zip(seqs, limits):
            buf = self._buffers.get(seq.request_id)
            if buf is None or len(buf) > len(seq.tokens):
                buf = array("i")
            buf.extend(seq.tokens[len(buf) :])
            live[seq.request_id] = buf
            out.append(_ngram_search(buf.tobytes(), seq.tokens, k, self.max_n, self.min_n, self.extend) if k else [])
        self._buffers = live  # only the sequences still decoding keep a buffer
        return out


class DraftModelProposer:
    """A small draft model proposes k tokens per sequence, greedily, all sequences in one
    batched run of its own `PagedEngine` (built on `bind` from a path or an HF model, on the
    target's device and dtype, block_size 8, unless `engine_options` say otherwise; or given
    ready-made). Small blocks: each call recomputes the tokens since the sequence's last full
    block (measured, 4 sequences, all drafts accepted, k = 4: 12.7 tokens fed per call with
    blocks of 16, 9.0 with 8, 7.0 with 4; the minimum is 5).
    Its vocabulary must be the target's (same tokenizer vocabulary when both engines have a
    tokenizer, else the same embedding size): a ConfigError (a ValueError) otherwise."""

    def __init__(self, model_path_or_engine: Any, *, k: int = 4, make: Callable[..., Any] | None = None,
                 **engine_options: Any):
        if k < 1:
            raise ValueError(f"DraftModelProposer: k must be >= 1, got {k}")
        self.k, self.engine_options = k, engine_options
        self.make = make or build_engine  # factory(model_or_path, **options) of the draft's engine
        self._source = model_path_or_engine
        self.engine = model_path_or_engine if hasattr(model_path_or_engine, "add_request") else None
        self._target_vocab: int | None = None

    def bind(self, target: Any) -> None:
        if self.engine is None:
            options = {"device": target.device, "dtype": target.dtype, "block_size": 8, "max_num_seqs": 64,
                       "tokenizer": getattr(target, "tokenizer", None), **self.engine_options}
            self.engine = self.make(self._source, **options)
        _check_same_vocab(self.engine, target)
        self._target_vocab = target.vocab_size

    def propose_many(self, seqs: list[Any], limits: list[int]) -> list[list[int]]:
        draft, out = self.engine, [[] for _ in seqs]
        ids: dict[int, int] = {}
        for i, (seq, k) in enumerate(zip(seqs, limits)):
            k = min(k, self.k, draft.max_model_len - 1 - len(seq.tokens))
            if k > 0:  # greedy; seed 0 so that no seed is drawn from the global RNG
                ids[draft.add_request(seq.tokens, SamplingParams(temperature=0.0, max_tokens=k, seed=0))] = i
        while ids and draft.has_unfinished():
            for o in draft.step():
                i = ids.get(o.request_id)
                if i is not None:
                    out[i] += o.token_ids
                    if o.finished:
                        del ids[o.request_id]
        return [_in_vocab(d, self._target_vocab) for d in out]


def _in_vocab(drafts: list[int], vocab_size: int | None) -> list[int]:
    """Drafts up to the first id the target cannot embed (a draft model with padded rows)."""
    for i, t in enumerate(drafts):
        if vocab_size is not None and t >= vocab_size:
            return drafts[:i]
    return drafts


def _check_same_vocab(draft: Any, target: Any) -> None:
    a, b = getattr(draft, "tokenizer", None), getattr(target, "tokenizer", None)
    if a is not None and b is not None:
        if a is b or a.get_vocab() == b.get_vocab():
            return
        raise ConfigError(f"speculative decoding: the draft model's tokenizer ({len(a)} tokens) differs from the "
                          f"target's ({len(b)} tokens); the draft must use the target's vocabulary")
    if draft.vocab_size != target.vocab_size:
        raise ConfigError(f"speculative decoding: the draft model's vocabulary has {draft.vocab_size} tokens, the "
                          f"target's {target.vocab_size}; the draft must use the target's vocabulary")


@dataclass(frozen=True)
class SpecStats:
    proposals: int  # decode steps of a sequence that fed drafts
    proposed: int  # draft tokens fed to the target
    accepted: int  # of them, the ones that became output

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


class Speculator:
    """`engine.propose`: drafts for a decoding sequence while at most `max_running` sequences
    are in flight, [] otherwise. The first call of a step proposes for every decoding sequence
    at once (a draft model batches them) and the others read the result.

    Backoff: after m proposals in a row of which no draft was accepted, a sequence gets no
    drafts for its next min(2^(m-1), 16) tokens (misses cost a wider forward and buy nothing;
    an output that does not repeat stops being drafted, one that starts repeating is found
    again within 16 tokens)."""

    def __init__(self, engine: Any, proposer: Proposer, k: int, max_running: int):
        if k < 1 or max_running < 1:
            raise ConfigError(f"speculative decoding: k and max_running must be >= 1, got k={k}, "
                              f"max_running={max_running}")
        self.engine, self.proposer, self.k, self.max_running = engine, proposer, k, max_running
        self._ready: dict[tuple[int, int], list[int]] = {}  # (request id, length) -> drafts
        self._fed: dict[int, tuple[Any, int, list[int]]] = {}  # request id -> (seq, length, drafts)
        self._misses: dict[int, tuple[int, int]] = {}  # request id -> (misses in a row, no drafts before length)
        self._proposals = self._proposed = self._accepted = 0
        self._lock = threading.Lock()  # stats() may be read from another thread

    def __call__(self, seq: Any) -> list[int]:
        scheduler = self.engine.scheduler
        if len(scheduler.running) + len(scheduler.waiting) > self.max_running:
            return []
        self._settle()
        key = (seq.request_id, len(seq.tokens))
        if key not in self._ready:
            batch = [s for s in scheduler.running if s.prefill_done and len(s.tokens) - s.num_computed == 1]
            running = {s.request_id for s in scheduler.running}
            self._misses = {rid: m for rid, m in self._misses.items() if rid in running}
            if seq not in batch:
                batch.append(seq)
            limits = [self._limit(s) for s in batch]
            drafts = self.proposer.propose_many(batch, limits)
            self._ready = {(s.request_id, len(s.tokens)): d[:n] for s, d, n in zip(batch, drafts, limits)}
        drafts = self._ready.pop(key, [])
        if drafts:
            self._fed[seq.request_id] = (seq, len(seq.tokens), drafts)
        return drafts

    def _limit(self, seq: Any) -> int:
        """Drafts beyond max_tokens or the context limit would be fed for nothing."""
        misses = self._misses.get(seq.request_id)
        if misses is not None and len(seq.tokens) < misses[1]:
            return 0  # backing off
        left = seq.params.max_tokens - seq.num_output_tokens - 1
        return max(0, min(self.k, left, self.engine.max_model_len - 1 - len(seq.tokens)))

    def _settle(self) -> None:
        """Count the drafts of sequences that have run since they were proposed."""
        with self._lock:
            self._settle_locked()

    def _settle_locked(self) -> None:
        for rid, (seq, length, drafts) in list(self._fed.items()):
            if len(seq.tokens) > length:
                new = seq.tokens[length : length + len(drafts)]
                hit = 0
                while hit < len(new) and new[hit] == drafts[hit]:
                    hit += 1
                self._proposals, self._proposed, self._accepted = (
                    self._proposals + 1, self._proposed + len(drafts), self._accepted + hit)
                if hit:
                    self._misses.pop(rid, None)
                elif seq.finish_reason is None:
                    m = self._misses.get(rid, (0, 0))[0] + 1
                    self._misses[rid] = (m, len(seq.tokens) + min(2 ** (m - 1), 16))
            elif seq.block_table:
                continue  # not run yet
            del self._fed[rid]  # counted, or preempted / aborted before its drafts ran

    def stats(self) -> SpecStats:
        self._settle()
        return SpecStats(self._proposals, self._proposed, self._accepted)


def enable_speculative(engine: Any, method: str | Proposer = "ngram", *, k: int | None = None,
                       max_running: int = 4, make_draft: Callable[..., Any] | None = None) -> Speculator:
    """Turn on speculative decoding: `method` is "ngram" (prompt lookup), "draft:PATH" (a
    `DraftModelProposer` of the model at PATH) or a proposer object; k drafts per step at most
    (default 4, or the proposer's own k); `make_draft` builds a "draft:PATH" model's engine.
    Drafts only while at most `max_running` sequences are in flight. Returns the Speculator
    (also `engine.propose`), whose `stats()` counts drafts fed and accepted."""
    if isinstance(method, str):
        if method == "ngram":
            method = NgramProposer()
        elif method.startswith("draft:") and method[6:]:
            method = DraftModelProposer(method[6:], k=k or 4, make=make_draft)
        else:
            raise ConfigError(f"speculative decoding: method must be 'ngram', 'draft:PATH' or a proposer "
                              f"(DraftModelProposer); got {method!r}")
    k = k if k is not None else getattr(method, "k", 4)
    speculator = Speculator(engine, method, k, max_running)
    method.bind(engine)
    engine.propose = speculator
    return speculator


def disable_speculative(engine: Any) -> SpecStats | None:
    """Turn speculative decoding off; returns the final counts (None if it was not on)."""
    speculator, engine.propose = engine.propose, None
    return speculator.stats() if isinstance(speculator, Speculator) else None
