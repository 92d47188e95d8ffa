"""The rows of benchmarks/engine.py (see its docstring); each prints its lines and returns its ratio."""

from __future__ import annotations

import time

import torch

from engine import hf_generate, make_prompts, spread
from posttrain.rollout.engine import ENGINES, SamplingParams
from posttrain.rollout.paged.spec import enable_speculative


def paged(path: str, tok, **options):
    return ENGINES["paged"](path, tok, device="cpu", **options)


def run_ours(engine, prompts, params) -> tuple[float, list]:
    engine.generate(prompts[:2], [SamplingParams(temperature=0.0, max_tokens=4)] * len(prompts[:2]))  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(prompts, params)
    return time.perf_counter() - t0, out


def no_eos(tok, n: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, stop_token_ids=(), **kw)


def throughput_row(path: str, tok, n: int, dtype, name: str, rounds: int = 3) -> float:
    """Best of `rounds` interleaved runs per side (HF generate's time varies 2-5x run to run on
    a shared machine: its KV cache grows by torch.cat every step)."""
    prompts = make_prompts(tok, n)
    lengths = spread(n, 16, 256)
    useful = sum(lengths)
    engine = paged(path, tok, dtype=dtype)
    params = [no_eos(tok, m, temperature=0.0) for m in lengths]
    hf_best = ours_best = float("inf")
    for _ in range(rounds):
        hf_s, hf_tokens = hf_generate(path, tok, prompts, lengths, dtype)
        ours_s, out = run_ours(engine, prompts, params)
        hf_best, ours_best = min(hf_best, hf_s), min(ours_best, ours_s)
    same = sum(list(c.token_ids) == h for c, h in zip(out, hf_tokens))
    hf_rate, ours_rate = useful / hf_best, useful / ours_best
    print(f"[{name}] {n} requests, outputs 16..256 ({useful} tokens), best of {rounds}: HF generate "
          f"{hf_rate:,.0f} tok/s ({hf_best:.2f} s; {n * max(lengths) - useful} of {n * max(lengths)} slot-steps "
          f"wasted), ours {ours_rate:,.0f} tok/s ({ours_best:.2f} s); greedy identical on {same}/{n}; "
          f"ours/HF = {ours_rate / hf_rate:.2f}")
    return ours_rate / hf_rate


def bf16_row(path: str, tok, n: int) -> float:
    return throughput_row(path, tok, n, torch.bfloat16, "bf16")


def grpo_row(path: str, tok) -> None:
    prompts = make_prompts(tok, 16, seed=1)
    group = [p for p in prompts for _ in range(8)]
    params = [no_eos(tok, 64, temperature=1.0, seed=i) for i in range(len(group))]
    rows = {}
    for sharing in (False, True):
        engine = paged(path, tok, prefix_sharing=sharing)
        secs, out = run_ours(engine, group, params)
        rows[sharing] = (secs, engine.kv_stats()["blocks_used_peak"], out)
    (off_s, off_b, off_out), (on_s, on_b, on_out) = rows[False], rows[True]
    same = sum(a.token_ids == b.token_ids for a, b in zip(off_out, on_out))
    tokens = sum(len(c.token_ids) for c in on_out)
    print(f"[grpo 16x8, T=1, 64 tokens] peak KV blocks: sharing off {off_b}, on {on_b} "
          f"(memory ratio on/off = {on_b / off_b:.2f}); tok/s off {tokens / off_s:,.0f}, on {tokens / on_s:,.0f} "
          f"(x{off_s / on_s:.2f}); identical samples {same}/{len(group)}")


def spec_row(path: str, tok) -> None:
    phrase = tok.encode(" the cat sat on the mat and", add_special_tokens=False)
    prompts = [phrase * 6, (phrase[3:] + phrase[:3]) * 6, (phrase[1:] + phrase[:1]) * 5, phrase * 4]
    for conc in (1, 4):
        ps = prompts[:conc]
        params = [no_eos(tok, 128, temperature=0.0) for _ in ps]
        base_s, base = run_ours(paged(path, tok, speculative=None), ps, params)
        spec_engine = paged(path, tok, speculative=None)
        stats = enable_speculative(spec_engine, "ngram")
        spec_s, spec = run_ours(spec_engine, ps, params)
        same = all(a.token_ids == b.token_ids for a, b in zip(base, spec))
        print(f"[spec ngram, {conc} seq] tok/s without {128 * conc / base_s:,.0f}, with {128 * conc / spec_s:,.0f} "
              f"(x{base_s / spec_s:.2f}); greedy identical: {same}; {stats.stats()}")


def int8_row(path: str, tok) -> None:
    prompts = make_prompts(tok, 16, seed=2)
    group = [p for p in prompts for _ in range(8)]
    params = [no_eos(tok, 64, temperature=1.0, seed=i) for i in range(len(group))]
    full = paged(path, tok)
    full_s, ref = run_ours(full, group, params)
    q = paged(path, tok, kv_dtype="int8")
    q_s, _ = run_ours(q, group, params)
    # teacher-forced: the int8 engine scores the fp32 run's samples (prompt + completion, 1 new token)
    err = 0.0
    for prompt, c in list(zip(group, ref))[:16]:
        for cut in range(0, len(c.token_ids), 8):
            [d] = q.generate([prompt + list(c.token_ids[:cut])], [no_eos(tok, 1, temperature=1.0, seed=0)])
            lp = full.generate([prompt + list(c.token_ids[:cut])], [no_eos(tok, 1, temperature=1.0, seed=0)])[0]
            if d.token_ids == lp.token_ids:
                err = max(err, abs(d.logprobs[0] - lp.logprobs[0]))
    a, b = full.kv_stats()["bytes_per_token"], q.kv_stats()["bytes_per_token"]
    print(f"[int8 KV] bytes/token {a} -> {b} (ratio {b / a:.2f}); max |delta logprob| {err:.2e}; "
          f"tok/s ratio int8/fp32 = {full_s / q_s:.2f}")
