"""RL update speed on CPU: shared-prefix packing (a group's prompt computed once) vs. the previous
position-id packing, same process, interleaved passes, fastest pass counts.

    .venv/bin/python benchmarks/rl_shared_prefix.py [--groups 16] [--k 8] [--rounds 7] [--threads 1]

Data: `--groups` GRPO groups of `--k` samples; each group one random prompt of 35-50 tokens,
each sample a random completion of 15-35 tokens (all trained). Model: runs/quickstart/sft/final
if present, else a random Qwen2 (hidden 128, 4 layers, vocab 1024, make_tiny_model). One pass =
what `update_policy` does per micro-batch, minus the optimizer: build the micro-batches, run the
decoder, LM head on the trained positions, log-softmax + gather, entropy (no grad), a
policy-gradient loss, backward. Modes:

- old: posttrain/train/rl_batch.py as of the commit before shared-prefix packing (loaded from
  git), rows of 256 tokens (the working tree's value then; `--old-row-tokens` to change);
- fallback: the new code with share_prefix=False (one sequence per unit, position-id packing);
- shared: the new code with shared-prefix packing (what sdpa/eager models get).

The last line is `result: old/shared time = X`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "fb77519^"  # the commit before shared-prefix packing


def load_old(row_tokens: int):
    src = subprocess.run(["git", "show", f"{BEFORE}:posttrain/train/rl_batch.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "rl_batch_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("rl_batch_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["rl_batch_old"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    mod.ROW_TOKENS = row_tokens
    return mod


def make_samples(Sample, groups: int, k: int, vocab: int, seed: int = 0):
    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(35, 50))]
        for _ in range(k):
            comp = [rng.randrange(3, vocab) for _ in range(rng.randint(15, 35))]
            ids = prompt + comp
            mask = [0] * len(prompt) + [1] * len(comp)
            old = [-rng.uniform(0.5, 8.0) if m else 0.0 for m in mask]
            out.append(Sample(ids, mask, old, rng.uniform(-1, 1), len(out)))
    return out


def one_pass(torch, mod, model, samples, budget, **kw) -> tuple[float, int, int]:
    from posttrain.algos.kl import entropy_from_logits

    t0 = time.perf_counter()
    rows_tokens = 0
    for mb in mod.build_rl_microbatches(samples, max_tokens_per_microbatch=budget, pad_id=0, **kw):
        rows_tokens += mb.input_ids.numel()
        logits = mod.token_logits(model, mb, 1.0)
        logp = mod.gather_logprobs(logits, mb.targets)
        with torch.no_grad():
            entropy_from_logits(logits)
        ratio = torch.exp(logp - mb.old_logprobs)
        (-(ratio * mb.advantages).sum() / len(samples)).backward()
    dt = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    return dt, rows_tokens, 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=int, default=8192)  # RLTrainConfig.max_tokens_per_microbatch
    ap.add_argument("--old-row-tokens", type=int, default=256)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from posttrain.train import rl_batch as new
    from posttrain.train.model import load_model

    final = ROOT / "runs/quickstart/sft/final"
    if final.exists():
        model, name = load_model(str(final), dtype="float32", device=torch.device("cpu")), str(final)
    else:
        from posttrain.train.tiny import make_tiny_model

        tok = type("Vocab", (), {"__len__": lambda self: 1024, "pad_token_id": 0, "eos_token_id": 2})()
        model, name = make_tiny_model(tok, family="qwen2", hidden_size=128, num_layers=4, intermediate_size=384), \
            "random Qwen2 h128 x4"
    model.train()
    old = load_old(args.old_row_tokens)
    samples = make_samples(new.Sample, args.groups, args.k, model.config.vocab_size)
    old_samples = [old.Sample(**s.__dict__) for s in samples]
    modes = {
        "old": lambda: one_pass(torch, old, model, old_samples, args.budget),
        "fallback": lambda: one_pass(torch, new, model, samples, args.budget, share_prefix=False),
        "shared": lambda: one_pass(torch, new, model, samples, args.budget, share_prefix=True),
    }
    print(f"model {name} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, "
          f"attn {model.config._attn_implementation}), {len(samples)} samples, "
          f"{sum(len(s.token_ids) for s in samples)} tokens, {args.threads} thread(s), "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for f in modes.values():  # warm-up
        f()
    best = {m: float("inf") for m in modes}
    rows = {}
    for r in range(args.rounds):
        for m, f in modes.items():
            dt, rows[m], _ = f()
            best[m] = min(best[m], dt)
        print(f"round {r}: " + ", ".join(f"{m} {best[m]:.3f}s" for m in modes), flush=True)
    for m in modes:
        print(f"{m:9s} best {best[m]:.3f}s  row tokens (incl. padding) {rows[m]}")
    print(f"fallback/shared time = {best['fallback'] / best['shared']:.2f}")
    print(f"result: old/shared time = {best['old'] / best['shared']:.2f}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
