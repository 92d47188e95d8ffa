"""Rollout engine throughput: the built-in paged engine vs HF `generate`, same model, prompts and
sampling on each side, in one run.

    .venv/bin/python benchmarks/engine.py [--hidden 128 --layers 4] [--requests 64] [--threads 2]
        [--skip bf16,grpo,spec,int8]

Model: a random Qwen2 (make_tiny_model; default the quickstart's size: hidden 128, 4 layers, 4
heads, 2 KV heads, intermediate 384) with the repo's local tokenizer, saved and loaded from disk
by both sides. Rows:

1. throughput, fp32: `--requests` concurrent requests (prompts of 20-60 tokens), output lengths
   spread evenly over 16..256 (EOS suppressed on both sides so every request runs to its own
   length), greedy. HF `generate` gets them as one left-padded batch with max_new_tokens = the
   longest (a static batch runs until its longest row ends; only each request's own tokens count
   as output). Ours gets each request with its own max_tokens. Greedy outputs are compared
   token for token. tokens/s = useful output tokens / wall time;
2. the same in bf16 (both sides);
3. GRPO shape (16 prompts x 8 samples, T=1, max 64 tokens): prefix sharing on vs off, peak KV
   blocks in use and tokens/s;
4. speculative decoding at low concurrency (1 and 4 sequences) on a repetitive-output task
   (prompts that repeat a phrase, which the model continues): tokens/s with and without, greedy
   output identical;
5. int8 KV cache vs the unquantised one: KV bytes per token, max |delta logprob| over the GRPO
   run's sampled tokens (teacher-forced), tokens/s ratio.

The last line is `result: tokens/s ours/HF = X (target >= 3)` (row 1).

    .venv/bin/python benchmarks/engine.py --model .cache/posttrain/models/smollm2-135m-instruct [--rounds 2]
        [--skip mixed,bound,batch1,quality,memory]

runs the rows for a real model instead (benchmarks/_engine_real.py: the RL shape, 64 mixed-length
requests, the weights-only forward bound, batch 1 against the bandwidth bound, the fast mode's
quality cost, memory at 8k context); its last line is `result: tokens/s ours/HF at <model> = X
(target >= 3)` (the RL-shape row, ours in its default rollout configuration vs HF fp32).
"""

from __future__ import annotations

import argparse
import sys
import random
import tempfile
import time
from pathlib import Path

import torch

from posttrain.engine.protocol import SamplingParams
from posttrain.engine.registry import ENGINES
from posttrain.engine.paged.spec import enable_speculative

sys.path.insert(0, str(Path(__file__).resolve().parent))


def build_model(out: Path, hidden: int, layers: int, seed: int = 0) -> tuple[str, object]:
    from posttrain.train.tiny import make_tiny_model, save_model
    from posttrain.train.tokenizer import build_tokenizer

    corpus = [f"the cat sat on the mat and {a} + {b} = {a + b}" for a in range(60) for b in range(60)]
    tok = build_tokenizer(corpus, vocab_size=1024)
    model = make_tiny_model(tok, "qwen2", seed=seed, hidden_size=hidden, num_layers=layers, num_heads=4,
                            num_kv_heads=2, intermediate_size=3 * hidden)
    save_model(model, tok, out)
    return str(out), tok


def make_prompts(tok, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = [i for i in range(len(tok)) if i not in tok.all_special_ids]
    return [[rng.choice(vocab) for _ in range(rng.randint(20, 60))] for _ in range(n)]


def spread(n: int, lo: int, hi: int) -> list[int]:
    return [lo + round(i * (hi - lo) / max(1, n - 1)) for i in range(n)]


def hf_generate(path: str, tok, prompts: list[list[int]], lengths: list[int], dtype,
                device: str = "cpu") -> tuple[float, list[list[int]]]:
    """One left-padded batch through `model.generate` on `device`, greedy, EOS suppressed; returns
    (seconds, each request's first `length` tokens)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    ids, mask = ids.to(device), mask.to(device)
    kw = dict(max_new_tokens=max(lengths), min_new_tokens=max(lengths), do_sample=False, pad_token_id=pad,
              eos_token_id=None)
    with torch.inference_mode():
        model.generate(input_ids=ids[:2, -8:], attention_mask=mask[:2, -8:], max_new_tokens=4, do_sample=False,
                       pad_token_id=pad)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        if device != "cpu":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return dt, [out[i, width : width + n].tolist() for i, n in enumerate(lengths)]


def paged(path: str, tok, device: str = "cpu", **options):
    return ENGINES["paged"](path, tok, device=device, **options)


def run_ours(engine, prompts, params) -> tuple[float, list]:
    engine.generate(prompts[:2], [SamplingParams(temperature=0.0, max_tokens=4)] * len(prompts[:2]))  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(prompts, params)
    return time.perf_counter() - t0, out


def no_eos(tok, n: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, stop_token_ids=(), **kw)


def throughput_row(path: str, tok, n: int, dtype, name: str, rounds: int = 3, device: str = "cpu") -> float:
    """Best of `rounds` interleaved runs per side (HF generate's time varies 2-5x run to run on
    a shared machine: its KV cache grows by torch.cat every step)."""
    prompts = make_prompts(tok, n)
    lengths = spread(n, 16, 256)
    useful = sum(lengths)
    engine = paged(path, tok, device, dtype=dtype)
    params = [no_eos(tok, m, temperature=0.0) for m in lengths]
    hf_best = ours_best = float("inf")
    for _ in range(rounds):
        hf_s, hf_tokens = hf_generate(path, tok, prompts, lengths, dtype, device)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip", default="")
    ap.add_argument("--model", default=None, help="a real HF model directory: the rows of benchmarks/_engine_real.py")
    ap.add_argument("--rounds", type=int, default=2, help="--model: runs per side per row (the best counts)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    if args.model:
        import _engine_real

        print(f"model: {args.model}; {torch.get_num_threads()} threads")
        ratio = _engine_real.rows(args.model, args.rounds, skip)
        print(f"result: tokens/s ours/HF at {Path(args.model).name} = {ratio:.2f} (target >= 3)")
        return
    with tempfile.TemporaryDirectory() as d:
        path, tok = build_model(Path(d) / "model", args.hidden, args.layers)
        print(f"model: random Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {len(tok)}; "
              f"{torch.get_num_threads()} threads")
        ratio = throughput_row(path, tok, args.requests, torch.float32, "fp32")
        if "bf16" not in skip:
            bf16_row(path, tok, args.requests)
        if "grpo" not in skip:
            grpo_row(path, tok)
        if "spec" not in skip:
            spec_row(path, tok)
        if "int8" not in skip:
            int8_row(path, tok)
    print(f"result: tokens/s ours/HF = {ratio:.2f} (target >= 3)")


if __name__ == "__main__":
    main()
