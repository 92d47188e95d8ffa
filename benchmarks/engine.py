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
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch


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


def hf_generate(path: str, tok, prompts: list[list[int]], lengths: list[int], dtype) -> tuple[float, list[list[int]]]:
    """One left-padded batch through `model.generate`, greedy, EOS suppressed; returns (seconds,
    each request's first `length` tokens)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(max_new_tokens=max(lengths), min_new_tokens=max(lengths), do_sample=False, pad_token_id=pad,
              eos_token_id=None)
    with torch.inference_mode():
        model.generate(input_ids=ids[:2, -8:], attention_mask=mask[:2, -8:], max_new_tokens=4, do_sample=False,
                       pad_token_id=pad)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        dt = time.perf_counter() - t0
    return dt, [out[i, width : width + n].tolist() for i, n in enumerate(lengths)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip", default="")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    from engine_rows import bf16_row, grpo_row, int8_row, spec_row, throughput_row

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
