"""Speculative decoding on the paged engine: tokens/s with and without drafts at 1 and 4
sequences (the long tail of a rollout step), same engine, prompts and sampling on both sides,
greedy outputs compared token for token; and ngram_propose's cost per call.

    .venv/bin/python benchmarks/engine_spec.py [--hidden 128 --layers 4] [--tokens 128] [--threads 1]

Models (random Qwen2 of the engine benchmark's size with a local tokenizer, saved and loaded
from disk):
- "loops": the random model as initialised; on a prompt repeating a phrase its greedy output
  soon repeats one token (the degenerate loop RL rollouts fall into);
- "copies": the same shape with a hand-set untied LM head whose top token after each phrase
  token is the next phrase token, so it continues the repeated phrase (period 7: the copying
  prompt lookup is made for: quoting, code edits);
- "random x10": weights x10, an output with no repeats: drafts mostly miss (the cost side).
Draft model rows: the copies target with a copies draft of half the width and layers (same
cycle, so they agree), and the target as its own draft (every draft accepted: the cost of
running a draft model of the target's size).

Output: one line per row, `result: ngram speedup at 1 / 4 sequences = X / Y (target >= 1.5)`.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from posttrain.engine.protocol import SamplingParams  # noqa: E402
from posttrain.engine.registry import ENGINES  # noqa: E402
from posttrain.engine.paged.spec import (  # noqa: E402
    DraftModelProposer, NgramProposer, enable_speculative, ngram_propose,
)

PHRASE = " the cat sat on a mat"


def build(out: Path, tok, hidden: int, layers: int, kind: str) -> str:
    from transformers import AutoModelForCausalLM

    from posttrain.train.tiny import save_model, tiny_config

    config = tiny_config("qwen2", len(tok), hidden_size=hidden, num_layers=layers, num_heads=4, num_kv_heads=2,
                         intermediate_size=3 * hidden, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    config.tie_word_embeddings = kind != "copies"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        if kind == "random x10":
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(10.0)
        elif kind == "copies":
            phrase = tok.encode(PHRASE, add_special_tokens=False)
            assert len(set(phrase)) == len(phrase), "the copied phrase needs distinct tokens"
            before = list(range(len(tok)))
            for a, b in zip(phrase, phrase[1:] + phrase[:1]):
                before[b] = a
            emb = torch.randn(len(tok), hidden, generator=torch.Generator().manual_seed(0))
            model.model.embed_tokens.weight.copy_(emb)
            model.lm_head.weight.copy_((12.0 / hidden) * emb[before])
    save_model(model, tok, out)
    return str(out)


def prompts(tok) -> list[list[int]]:
    p = tok.encode(PHRASE, add_special_tokens=False)
    return [p * 6, (p[3:] + p[:3]) * 6, (p[1:] + p[:1]) * 5, p * 4]


def timed(engine, ps, params) -> tuple[float, list, int]:
    """Seconds, completions and engine steps of one generate-equivalent step loop (after a warm-up)."""
    engine.generate(ps[:1], [SamplingParams(temperature=0.0, max_tokens=4)])
    ids = [engine.add_request(p, sp) for p, sp in zip(ps, params)]
    out: dict[int, list[int]] = {i: [] for i in ids}
    steps = 0
    t0 = time.perf_counter()
    while engine.has_unfinished():
        for o in engine.step():
            out[o.request_id] += o.token_ids
        steps += 1
    return time.perf_counter() - t0, [out[i] for i in ids], steps


def row(name: str, path: str, tok, conc: int, n_tokens: int, method=None, temperature: float = 0.0) -> float:
    ps = prompts(tok)[:conc]
    params = [SamplingParams(temperature=temperature, top_p=0.9 if temperature else 1.0, max_tokens=n_tokens,
                             seed=i, stop_token_ids=()) for i in range(conc)]
    base_s, base, base_steps = timed(ENGINES["paged"](path, tok, device="cpu"), ps, params)
    eng = ENGINES["paged"](path, tok, device="cpu")
    spec = enable_speculative(eng, method() if callable(method) else (method or "ngram"), max_running=4)
    spec_s, out, steps = timed(eng, ps, params)
    s = spec.stats()
    total = n_tokens * conc
    same = out == base
    print(f"[{name}, {conc} seq, T={temperature:g}] tok/s without {total / base_s:,.0f} ({base_steps} steps), "
          f"with {total / spec_s:,.0f} ({steps} steps): x{base_s / spec_s:.2f}; accepted {s.accepted}/{s.proposed} "
          f"drafts ({s.acceptance_rate:.0%}); output identical: {same}")
    if not same:
        raise SystemExit(f"{name}: speculative output differs from plain decoding")
    return base_s / spec_s


def ngram_cost() -> None:
    rng = random.Random(0)
    cases = {
        "2k random ids (no 2+-gram recurs: every n searched)": [rng.randrange(150_000) for _ in range(2048)],
        "2k ids repeating a 30-token phrase": [rng.randrange(1000) for _ in range(30)] * 69,
    }
    for name, toks in cases.items():
        toks = toks[:2048]
        n = 2000
        us = timeit.timeit(lambda: ngram_propose(toks), number=n) / n * 1e6
        prop = NgramProposer()
        seq = type("S", (), {"request_id": 0, "tokens": toks})()
        us_inc = timeit.timeit(lambda: prop.propose_many([seq], [4]), number=n) / n * 1e6
        print(f"[ngram_propose] {name}: {us:.1f} us/call; NgramProposer (buffer kept per request) {us_inc:.1f} us/call")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from posttrain.train.tokenizer import build_tokenizer

    corpus = [f"the cat sat on a mat and {a} + {b} = {a + b}" for a in range(60) for b in range(60)]
    tok = build_tokenizer(corpus, vocab_size=1024)
    print(f"models: Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {len(tok)}; {args.threads} threads; "
          f"{args.tokens} new tokens per request; k = 4, max_running = 4")
    ngram_cost()
    with tempfile.TemporaryDirectory() as d:
        paths = {kind: build(Path(d) / kind.replace(" ", "_"), tok, args.hidden, args.layers, kind)
                 for kind in ("loops", "copies", "random x10")}
        small = build(Path(d) / "small", tok, args.hidden // 2, max(1, args.layers // 2), "copies")
        speedups = {}
        for conc in (1, 4):
            for kind in ("loops", "copies"):
                speedups[kind, conc] = row(f"ngram, {kind}", paths[kind], tok, conc, args.tokens)
        row("ngram, copies", paths["copies"], tok, 4, args.tokens, temperature=1.0)
        for conc in (1, 4):
            row("ngram, random x10", paths["random x10"], tok, conc, args.tokens)
        for conc in (1, 4):
            row("draft model (half size), copies", paths["copies"], tok, conc, args.tokens,
                lambda: DraftModelProposer(small, k=4))
            row("draft model = target, copies", paths["copies"], tok, conc, args.tokens,
                lambda: DraftModelProposer(paths["copies"], k=4))
    lo1 = min(speedups[k, 1] for k in ("loops", "copies"))
    lo4 = min(speedups[k, 4] for k in ("loops", "copies"))
    print(f"result: ngram speedup at 1 / 4 sequences = {lo1:.2f} / {lo4:.2f} (target >= 1.5)")


if __name__ == "__main__":
    main()
