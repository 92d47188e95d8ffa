"""Speculative decoding on the paged engine: ngram_propose by hand and against a brute-force
search; the output with drafts (n-gram or a draft model) is token-identical to the output
without, greedy and seeded T=1/top-p 0.9; on a model that copies a repeated phrase most drafts
are accepted and the engine takes far fewer steps; a draft model that is the target accepts
every draft; auto mode proposes nothing while many sequences are in flight."""

from __future__ import annotations

import random

import pytest
import torch

from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine
from tests.unit.engine.engine_checks import mixed_params
from posttrain.engine.paged.spec import (
    DraftModelProposer, SpecStats, disable_speculative, enable_speculative, ngram_propose,
)

PHRASE = "We add 12 and 34 to get"  # 8 distinct tokens with the tiny tokenizer


def reference_ngram(tokens, k=4, max_n=4, min_n=1, extend=True):
    """Brute force: every n, every earlier start, newest first; the copy may run into its own drafts."""
    L = len(tokens)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        for i in range(L - n - 1, -1, -1):
            if list(tokens[i : i + n]) == list(tokens[L - n :]):
                ext, out = list(tokens), []
                for j in range(k):
                    if i + n + j >= L and not extend:
                        break
                    out.append(ext[i + n + j])
                    ext.append(out[-1])
                return out
    return []


def test_ngram_propose_by_hand():
    assert ngram_propose([1, 2, 3, 4]) == []  # nothing recurs
    assert ngram_propose([7]) == [] and ngram_propose([]) == []
    # the longest trailing n-gram wins: [1, 2, 3] recurs at 0 -> what followed it there, although
    # the newer [3] at 6 would give [6, 1, 2, 3]
    seq = [1, 2, 3, 4, 5, 8, 3, 6, 1, 2, 3]
    assert ngram_propose(seq) == [4, 5, 8, 3]
    assert ngram_propose(seq, max_n=1) == [6, 1, 2, 3]
    assert ngram_propose(seq, min_n=4) == []
    assert ngram_propose(seq, k=2) == [4, 5]  # k truncation
    assert ngram_propose(seq, k=0) == []
    # the most recent occurrence of [7] (at 3, not 0); its copy runs into the end after 3 tokens
    seq = [7, 1, 5, 7, 2, 6, 7]
    assert ngram_propose(seq, extend=False) == [2, 6, 7]
    assert ngram_propose(seq) == [2, 6, 7, 2]  # continued with period 3
    # overlapping matches: [5, 5, 5, 5] recurs at 0, overlapping the tail; one token follows it
    assert ngram_propose([5, 5, 5, 5, 5], extend=False) == [5]
    assert ngram_propose([5, 5, 5, 5, 5], k=6) == [5] * 6
    assert ngram_propose([1, 2, 1, 2, 1], k=3, extend=False) == [2, 1]  # [1, 2, 1] at 0 overlaps at 2
    assert ngram_propose([1, 2, 1, 2, 1], k=3) == [2, 1, 2]
    assert ngram_propose((9, 8, 9), k=1) == [8]  # any sequence type


def test_ngram_ids_beyond_16_bits_and_byte_alignment():
    """The search runs on int32 bytes: a match that straddles two tokens' bytes is not a match."""
    a, b, t = 65536 + 5, 1 + (7 << 16), 65537  # bytes: 05 00 01 00 | 01 00 07 00; t = 01 00 01 00
    assert ngram_propose([a, b, 9, t]) == []  # t's bytes occur at byte offset 2 only
    assert ngram_propose([t, 7, a, b, 9, t]) == [7, a, b, 9]  # the aligned one, behind the straddling one
    assert ngram_propose([150_000, 2**31 - 1, 150_000], k=2) == [2**31 - 1, 150_000]


@pytest.mark.parametrize("extend", [True, False])
def test_ngram_matches_brute_force(extend):
    rng = random.Random(0)
    for trial in range(400):
        vocab = rng.choice([2, 3, 5, 50])
        tokens = [rng.randrange(vocab) for _ in range(rng.randint(0, 40))]
        k, min_n = rng.randint(0, 6), rng.randint(1, 3)
        max_n = min_n + rng.randint(0, 3)
        got = ngram_propose(tokens, k=k, max_n=max_n, min_n=min_n, extend=extend)
        assert got == reference_ngram(tokens, k, max_n, min_n, extend), (tokens, k, max_n, min_n)


def test_ngram_bad_arguments():
    with pytest.raises(ValueError, match="min_n <= max_n"):
        ngram_propose([1, 2], max_n=1, min_n=2)
    with pytest.raises(ValueError, match="k >= 0"):
        ngram_propose([1, 2], k=-1)


# ---- on the engine ----


def _scaled(tiny_model_dir, scale: float):
    from posttrain.core.hf import load_model

    m = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.mul_(scale)
    return m.eval()


@pytest.fixture(scope="module")
def looping_model(tiny_model_dir):
    """The random tiny model as saved: its greedy output soon repeats one token."""
    return _scaled(tiny_model_dir, 1.0)


@pytest.fixture(scope="module")
def sharp_model(tiny_model_dir):
    """Weights x10: a greedy output that does not repeat (most n-gram drafts are rejected)."""
    return _scaled(tiny_model_dir, 10.0)


@pytest.fixture(scope="module")
def copy_model(tiny_tokenizer):
    """A hand-set Qwen2 whose next token is the one after the current token in PHRASE (a
    cycle), any other token repeating itself: untied LM head row v = 0.15 x embedding of the
    token before v, so the logit of the successor is ~9.6 against ~N(0, 1.2) for the rest
    (p ~ 0.95 at T=1). Attention and MLPs keep their small random weights."""
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import tiny_config

    phrase = tiny_tokenizer(PHRASE, add_special_tokens=False)["input_ids"]
    vocab = len(tiny_tokenizer)
    config = tiny_config("qwen2", vocab, pad_token_id=tiny_tokenizer.pad_token_id,
                         eos_token_id=tiny_tokenizer.eos_token_id)
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    before = list(range(vocab))
    for a, b in zip(phrase, phrase[1:] + phrase[:1]):
        before[b] = a
    with torch.no_grad():
        emb = torch.randn(vocab, config.hidden_size)
        m.model.embed_tokens.weight.copy_(emb)
        m.lm_head.weight.copy_(0.15 * emb[before])
    return m


@pytest.fixture(scope="module")
def phrase_prompts(tiny_tokenizer):
    p = tiny_tokenizer(PHRASE, add_special_tokens=False)["input_ids"]
    return [p * 4, (p[3:] + p[:3]) * 3, p[5:] + p * 2, p * 5 + p[:2]]


def engine(model, **options) -> PagedEngine:
    options.setdefault("block_size", 4)
    options.setdefault("max_num_seqs", 16)
    return PagedEngine.from_hf_model(model, device="cpu", **options)


def run_steps(eng: PagedEngine, prompts, params) -> tuple[list[tuple[int, ...]], list[list[float]], int]:
    """Step until done -> (token ids per request, logprobs per request, number of steps)."""
    ids = [eng.add_request(p, sp) for p, sp in zip(prompts, params)]
    toks: dict[int, list[int]] = {i: [] for i in ids}
    lps: dict[int, list[float]] = {i: [] for i in ids}
    steps = 0
    while eng.has_unfinished():
        for o in eng.step():
            toks[o.request_id] += o.token_ids
            lps[o.request_id] += o.logprobs
        steps += 1
    return [tuple(toks[i]) for i in ids], [lps[i] for i in ids], steps


def assert_same(got, want_engine_out):
    tokens, logprobs, _ = got
    want_tokens, want_logprobs, _ = want_engine_out
    assert tokens == want_tokens
    assert max(abs(x - y) for a, b in zip(logprobs, want_logprobs) for x, y in zip(a, b)) < 1e-4


@pytest.mark.parametrize("which", ["looping", "sharp"])
def test_ngram_output_identical_greedy_and_sampled(which, looping_model, sharp_model, prompts, phrase_prompts):
    """4 requests (2 greedy, 2 seeded T=1 top-p 0.9), prompts with and without repeats."""
    model = looping_model if which == "looping" else sharp_model
    ps = [prompts[0], phrase_prompts[0], prompts[1], phrase_prompts[1]]
    params = mixed_params(4, 24)
    want = run_steps(engine(model), ps, params)
    eng = engine(model)
    spec = enable_speculative(eng, "ngram", k=4, max_running=4)
    got = run_steps(eng, ps, params)
    assert_same(got, want)
    s = spec.stats()
    assert s.proposed > 0
    if which == "looping":  # drafts hit: the looping outputs are copied
        assert s.accepted > s.proposed / 2 and got[2] < want[2]
    else:  # most drafts miss, and the output still does not change
        assert s.accepted < s.proposed / 2


def test_copy_model_high_acceptance_fewer_steps(copy_model, phrase_prompts):
    """The copy model continues the repeated phrase: >= 90% of the drafts are accepted and the
    engine takes about a fifth of the steps (k = 4: up to 5 tokens per step), greedy and T=1."""
    greedy = [SamplingParams(temperature=0.0, max_tokens=60, stop_token_ids=()) for _ in range(2)]
    sampled = [SamplingParams(temperature=1.0, top_p=0.9, max_tokens=60, seed=s, stop_token_ids=()) for s in (1, 2)]
    ps, params = phrase_prompts, greedy + sampled
    want = run_steps(engine(copy_model), ps, params)
    assert want[2] == 60
    assert want[0][0][:8] == tuple(phrase_prompts[0][:8])  # it does copy the phrase
    eng = engine(copy_model)
    spec = enable_speculative(eng, "ngram", k=4)
    got = run_steps(eng, ps, params)
    assert_same(got, want)
    s = spec.stats()
    assert s.acceptance_rate > 0.9, s
    assert got[2] <= 60 // 5 + 6, got[2]
    assert disable_speculative(eng) == s and eng.propose is None
    assert run_steps(eng, ps, params)[2] == 60  # off again


@pytest.mark.parametrize("given", ["model", "path"])
def test_draft_model_that_is_the_target_accepts_every_draft(given, looping_model, tiny_model_dir, prompts,
                                                            phrase_prompts):
    ps = [prompts[1], phrase_prompts[2], prompts[3]]
    params = [SamplingParams(temperature=0.0, max_tokens=30 - 3 * i, stop_token_ids=()) for i in range(3)]
    want = run_steps(engine(looping_model), ps, params)
    eng = engine(looping_model)
    method = DraftModelProposer(looping_model, k=3) if given == "model" else f"draft:{tiny_model_dir}"
    spec = enable_speculative(eng, method, k=3)
    got = run_steps(eng, ps, params)
    assert_same(got, want)
    s = spec.stats()
    assert s.proposed > 40 and s.accepted == s.proposed, s
    assert got[2] <= 30 // 4 + 3


def test_draft_model_different_model_same_output_and_cheap_state(sharp_model, tiny_model_dir, prompts,
                                                                 phrase_prompts):
    """A draft model that often disagrees (the x10 model's weights x0.9): output unchanged,
    greedy and sampled. Its own cache is reused across steps: it computes the tail since its
    last full block plus k - 1 decodes per call, not each sequence's whole context."""
    ps = [prompts[1], phrase_prompts[3], prompts[3], phrase_prompts[0]]
    params = mixed_params(4, 24)
    want = run_steps(engine(sharp_model), ps, params)
    proposer = DraftModelProposer(_scaled(tiny_model_dir, 9.0), k=4, block_size=4)
    eng = engine(sharp_model)
    spec = enable_speculative(eng, proposer)
    fed, contexts = [], []
    forward, propose_many = proposer.engine.model.forward, proposer.propose_many

    def counting_forward(ids, *args, **kw):
        fed.append(ids.numel())
        return forward(ids, *args, **kw)

    def counting_propose(seqs, limits):
        contexts.extend(len(s.tokens) for s in seqs)
        return propose_many(seqs, limits)

    proposer.engine.model.forward, proposer.propose_many = counting_forward, counting_propose
    got = run_steps(eng, ps, params)
    assert_same(got, want)
    s = spec.stats()
    assert 10 <= s.accepted < s.proposed / 2, s  # both accepted and rejected drafts
    assert sum(fed) < (sum(contexts) + 4 * len(contexts)) / 4, (sum(fed), sum(contexts))


def test_draft_model_vocab_must_match(looping_model, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import tiny_config

    other = AutoModelForCausalLM.from_config(tiny_config("qwen2", 300), dtype=torch.float32)
    with pytest.raises(ValueError, match="vocabulary has 300 tokens, the target's 400"):
        enable_speculative(engine(looping_model), DraftModelProposer(other))
    with pytest.raises(ValueError, match="method must be 'ngram', 'draft:PATH'"):
        enable_speculative(engine(looping_model), "eagle")


def test_auto_mode_no_drafts_while_many_in_flight(copy_model, phrase_prompts):
    """8 requests, max_running 4: no drafts while more than 4 are in flight; once the 4 short
    ones finish, the long tail is speculated."""
    eng = engine(copy_model)
    spec = enable_speculative(eng, "ngram", max_running=4)
    in_flight_when_drafting = []

    def watching(seq):
        drafts = spec(seq)
        if drafts:
            in_flight_when_drafting.append(len(eng.scheduler.running) + len(eng.scheduler.waiting))
        return drafts

    eng.propose = watching
    ps = phrase_prompts * 2
    same = [SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=())] * 8
    run_steps(eng, ps, same)
    assert spec.stats().proposed == 0 and not in_flight_when_drafting
    tail = [SamplingParams(temperature=0.0, max_tokens=6 if i < 4 else 40, stop_token_ids=()) for i in range(8)]
    want = run_steps(engine(copy_model), ps, tail)
    got = run_steps(eng, ps, tail)
    assert got[0] == want[0] and got[2] < want[2]
    assert spec.stats().proposed > 0 and max(in_flight_when_drafting) <= 4


class WrongDrafts:
    """A proposer whose drafts are always wrong (the true next tokens + 1), logging when asked."""

    def __init__(self, truth: list[int], vocab: int):
        self.truth, self.vocab, self.asked_at = truth, vocab, []

    def bind(self, engine) -> None:
        pass

    def propose_many(self, seqs, limits):
        out = []
        for seq, k in zip(seqs, limits):
            if k:
                self.asked_at.append(seq.num_output_tokens)
            done = seq.num_output_tokens
            out.append([(t + 1) % self.vocab for t in self.truth[done : done + k]])
        return out


def test_backoff_after_misses_by_hand(looping_model, prompts):
    """Every draft misses: after the m-th miss in a row a sequence waits min(2^(m-1), 16) tokens.
    First asked at 1 output token; the miss emits 1 token -> waits 1 -> asked at 3; then 3+1+2 = 6,
    6+1+4 = 11, 11+1+8 = 20, 20+1+16 = 37, 54."""
    params = [SamplingParams(temperature=0.0, max_tokens=60, stop_token_ids=())]
    [want] = engine(looping_model).generate(prompts[:1], params)
    eng = engine(looping_model)
    proposer = WrongDrafts(list(want.token_ids), 400)
    spec = enable_speculative(eng, proposer, k=2)
    [got] = eng.generate(prompts[:1], params)
    assert got.token_ids == want.token_ids
    assert proposer.asked_at == [1, 3, 6, 11, 20, 37, 54]
    assert spec.stats() == SpecStats(proposals=7, proposed=14, accepted=0)


def test_make_engine_speculative_option(tiny_model_dir, tiny_tokenizer, prompts):
    from posttrain.engine.registry import ENGINES

    plain = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, speculative=None)
    assert ENGINES["paged"](tiny_model_dir, tiny_tokenizer).propose is not None  # n-gram drafts by default
    spec = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, speculative="ngram", speculative_k=3,
                            speculative_max_running=2)
    assert plain.propose is None and spec.propose is not None and spec.propose.k == 3
    params = [SamplingParams(temperature=0.0, max_tokens=24, stop_token_ids=())] * 2
    assert [c.token_ids for c in spec.generate(prompts[:2], params)] == [c.token_ids for c in plain.generate(prompts[:2], params)]
    with pytest.raises(ValueError, match="method must be"):
        ENGINES["paged"](tiny_model_dir, tiny_tokenizer, speculative="magic")
