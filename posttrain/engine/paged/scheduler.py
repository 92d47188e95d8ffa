"""Which sequences run in the next step, and how many tokens each feeds (pure Python, no tensors).

A `Sequence` is one request: its tokens (prompt + sampled so far), how many of them have K/V
in the cache (`num_computed`), its block table, and its sampling state. Both queues are kept in
priority order (`SamplingParams.priority`, higher first): `waiting` FIFO within a priority, a
preempted sequence at the front of its priority; `running` in admission order within a
priority. Each `schedule()`:

1. running sequences in that order each get their next tokens -- 1 for a decode (plus any
   speculative drafts), a chunk of the rest of the prompt for one still prefilling -- within
   the step's token budget (`max_num_batched_tokens`: chunked prefill). A sequence that needs
   a new block when none is free preempts the last running sequence: the lowest priority, the
   most recently admitted among equals, never one of higher priority than itself (when it is
   the last, it preempts itself). The victim's blocks are freed; it goes back to the front of
   its priority in the queue and is recomputed later from its prompt and the tokens it had
   sampled, which it keeps;
2. waiting sequences are admitted highest priority first while budget, `max_num_seqs` and free
   blocks allow (a head that does not fit blocks the ones behind it). Priority decides only
   when a sequence runs, never what it samples.
   On admission a sequence first looks its blocks up by content (prefix sharing): every full
   block of its tokens already in the cache, then the partially filled last block of an
   identical prompt, is shared (reference counted) instead of computed. When every token is
   found, the last token is fed again to get its logits, with its K/V write suppressed.

A block a sequence will write that is shared with others is first copied (copy-on-write; the
copies are in the output for the model runner). Full blocks are indexed by content when the
step that fills them is scheduled (K/V are written before any read of the same layer in one
forward, so a sequence admitted later in the same step may already share them), and a
prompt's partial last block when its prefill completes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Callable

import torch

from posttrain.engine.protocol import SamplingParams
from posttrain.engine.paged.cache import BlockAllocator, block_key

_UNIFORMS_PER_DRAW = 32


class Sequence:
    """One request's state across steps."""

    def __init__(self, request_id: int, prompt: list[int], params: SamplingParams, seed: int, arrival: int):
        self.request_id, self.params, self.arrival = request_id, params, arrival
        self.priority = params.priority  # higher runs first (scheduling only)
        self.tokens = list(prompt)
        self.num_prompt_tokens = len(prompt)
        self.logprobs: list[float] = []
        self.num_computed = 0  # leading tokens whose K/V are in the cache
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # hash of the content key of each leading full, indexed block
        self.prefill_done = False  # the newest token's logits have been sampled since (re)admission
        self.admitted = False  # admitted at least once (prompt tokens are counted on the first admission)
        self.finish_reason: str | None = None
        self.generator = torch.Generator().manual_seed(seed % 2**64) if params.temperature > 0 else None
        self._uniforms: list[float] = []

    @property
    def num_output_tokens(self) -> int:
        return len(self.tokens) - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.num_prompt_tokens :]

    def peek_uniforms(self, n: int) -> list[float]:
        """The request's next n uniform draws, not yet consumed (the stream one torch.rand per
        sampled token would give; zeros when greedy)."""
        if self.generator is None:
            return [0.0] * n
        while len(self._uniforms) < n:
            self._uniforms += torch.rand(_UNIFORMS_PER_DRAW, dtype=torch.float64, generator=self.generator).tolist()
        return self._uniforms[:n]

    def consume_uniforms(self, n: int) -> None:
        del self._uniforms[:n]


@dataclass
class ScheduledSeq:
    """What one sequence feeds in one step."""

    seq: Sequence
    start: int  # position of the first fed token (== seq.num_computed at schedule time)
    num_tokens: int  # committed tokens fed: seq.tokens[start : start + num_tokens]
    write_kv: bool = True  # False: their K/V are already in shared blocks
    draft_ids: list[int] = field(default_factory=list)  # speculative tokens fed after them

    @property
    def num_fed(self) -> int:
        return self.num_tokens + len(self.draft_ids)

    @property
    def samples(self) -> bool:
        """The chunk reaches the newest token: logits come back for it (and for each draft)."""
        return self.start + self.num_tokens == len(self.seq.tokens)

    @property
    def input_ids(self) -> list[int]:
        return self.seq.tokens[self.start : self.start + self.num_tokens] + self.draft_ids


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSeq]
    copies: list[tuple[int, int]]  # (src block, dst block) to copy before the forward
    preempted: list[Sequence]


class Scheduler:
    def __init__(self, allocator: BlockAllocator, max_num_seqs: int, max_num_batched_tokens: int,
                 prefix_sharing: bool = True, max_model_len: int | None = None):
        self.allocator = allocator
        self.block_size = allocator.block_size
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.prefix_sharing = prefix_sharing
        self.max_model_len = max_model_len if max_model_len is not None else (allocator.num_blocks - 1) * self.block_size
        self.waiting: list[Sequence] = []  # priority order, FIFO within one (a preempted one first)
        self.running: list[Sequence] = []  # priority order, admission order within one
        self.num_preemptions = 0
        self.num_prompt_tokens = 0  # prompt tokens of every admitted request
        self.num_cached_prompt_tokens = 0  # of those, found in the prefix cache (prefill saved)

    def add(self, seq: Sequence) -> None:
        """Queue a new sequence behind every waiting one of its priority or higher."""
        _insert(self.waiting, seq, front=False)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, request_id: int) -> Sequence | None:
        """Take a request out (abort) and free its blocks; None if it is not here."""
        for queue in (self.running, self.waiting):
            for seq in queue:
                if seq.request_id == request_id:
                    queue.remove(seq)
                    self._free(seq)
                    return seq
        return None

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._free(seq)

    def preempt_all(self) -> None:
        """Send every running sequence back to the queue, in order (their K/V will be recomputed)."""
        for seq in reversed(self.running):
            self._preempt(seq)
        self.running.clear()

    # ---- one step ----

    def schedule(self, propose: Callable[[Sequence], list[int]] | None = None) -> SchedulerOutput:
        """`propose(seq)` may return draft tokens for a decoding sequence (speculative decoding)."""
        budget = self.max_num_batched_tokens
        out = SchedulerOutput([], [], [])
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq.tokens) - seq.num_computed, budget)
            drafts: list[int] = []
            if propose is not None and seq.prefill_done and n == 1:
                drafts = list(propose(seq))[: max(0, min(budget - 1, self.max_model_len - len(seq.tokens)))]
                if drafts and self._blocks_needed(seq, 1 + len(drafts)) > self.allocator.num_free:
                    drafts = []  # drafts never preempt anything
            while not self._reserve(seq, n + len(drafts), out.copies):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                out.scheduled.append(self._plan(seq, n, drafts))
                budget -= n + len(drafts)
                i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted:
            seq = self.waiting[0]
            if not seq.block_table and self.prefix_sharing:
                self._match_prefix(seq)
            if not seq.admitted:
                self.num_prompt_tokens += seq.num_prompt_tokens
                self.num_cached_prompt_tokens += min(seq.num_computed, seq.num_prompt_tokens)
            n = min(len(seq.tokens) - seq.num_computed, budget)
            write = True
            if n == 0:  # every token found in shared blocks: feed the last one again, for its logits
                seq.num_computed -= 1
                n, write = 1, False
            if not self._reserve(seq, n if write else 0, out.copies):
                self._free(seq)  # gives back the blocks it found shared; it stays first in the queue
                break
            self.waiting.pop(0)
            _insert(self.running, seq, front=False)
            seq.admitted = True
            out.scheduled.append(self._plan(seq, n, [], write))
            budget -= n
        return out

    def _plan(self, seq: Sequence, n: int, drafts: list[int], write: bool = True) -> ScheduledSeq:
        item = ScheduledSeq(seq, seq.num_computed, n, write, drafts)
        if self.prefix_sharing:
            self._index_blocks(seq, seq.num_computed + n)
        return item

    def _blocks_needed(self, seq: Sequence, num_writes: int) -> int:
        """New blocks (copy-on-write included) to write positions num_computed .. + num_writes - 1."""
        if num_writes == 0:
            return 0
        first, table = seq.num_computed // self.block_size, seq.block_table
        cow = first < len(table) and self.allocator.refs[table[first]] > 1
        return max(-(-(seq.num_computed + num_writes) // self.block_size) - len(table), 0) + cow

    def _reserve(self, seq: Sequence, num_writes: int, copies: list[tuple[int, int]]) -> bool:
        """Make blocks for positions num_computed .. num_computed + num_writes - 1 writable."""
        if self._blocks_needed(seq, num_writes) > self.allocator.num_free:
            return False
        if num_writes == 0:
            return True
        table, first = seq.block_table, seq.num_computed // self.block_size
        if first < len(table) and self.allocator.refs[table[first]] > 1:  # shared: copy before writing
            block = self.allocator.allocate()
            copies.append((table[first], block))
            self.allocator.release(table[first])
            table[first] = block
        while len(table) * self.block_size < seq.num_computed + num_writes:
            table.append(self.allocator.allocate())
        return True

    def _index_blocks(self, seq: Sequence, end: int) -> None:
        """Index the blocks whose tokens [.. end) are known by content: every full one, and a
        prompt's partial last one when its prefill completes (identical prompts share it)."""
        bs, hashes = self.block_size, seq.block_hashes
        while (len(hashes) + 1) * bs <= end:
            i = len(hashes)
            key = block_key(hashes[-1] if hashes else None, seq.tokens[i * bs : (i + 1) * bs])
            self.allocator.register(seq.block_table[i], key)
            hashes.append(hash(key))
        if end == len(seq.tokens) and not seq.prefill_done and end % bs and len(hashes) == end // bs:
            key = block_key(hashes[-1] if hashes else None, seq.tokens[len(hashes) * bs : end])
            if self.allocator.refs[seq.block_table[len(hashes)]] == 1:
                self.allocator.register(seq.block_table[len(hashes)], key)

    def _match_prefix(self, seq: Sequence) -> None:
        bs, tokens = self.block_size, seq.tokens
        parent: int | None = None
        for i in range(len(tokens) // bs + 1):
            chunk = tokens[i * bs : (i + 1) * bs]
            if not chunk:
                break
            key = block_key(parent, chunk)
            block = self.allocator.lookup(key)
            if block is None:
                break
            self.allocator.share(block)
            seq.block_table.append(block)
            if len(chunk) == bs:
                parent = hash(key)
                seq.block_hashes.append(parent)
        seq.num_computed = min(len(seq.block_table) * bs, len(tokens))

    def _preempt(self, seq: Sequence) -> None:
        self._free(seq)
        _insert(self.waiting, seq, front=True)
        self.num_preemptions += 1

    def _free(self, seq: Sequence) -> None:
        self.allocator.release_all(seq.block_table)
        seq.block_table, seq.block_hashes = [], []
        seq.num_computed, seq.prefill_done = 0, False


def _insert(queue: list[Sequence], seq: Sequence, front: bool) -> None:
    """Put seq into a queue kept in descending priority: before (front) or after every sequence
    of its own priority."""
    find = bisect_left if front else bisect_right
    queue.insert(find(queue, -seq.priority, key=lambda s: -s.priority), seq)
