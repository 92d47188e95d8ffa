"""RL update speed on CPU: shared-prefix packing (a group's prompt computed once) vs. the same update
with plain packing (every sequence whole, as TRL and verl compute it), same process, interleaved
passes, fastest pass counts.

    .venv/bin/python benchmarks/rl_shared_prefix.py [--groups 16] [--k 8] [--rounds 7] [--threads 1] [--model DIR]

Data: `--groups` GRPO groups of `--k` samples; each group one random prompt of 35-50 tokens,
each sample a random completion of 15-35 tokens (all trained). Model: `--model` if given, else
a random model of configs/quickstart-tiny.yaml's base shape (Qwen2, hidden 128, 4 layers, vocab 1024;
benchmarks/_models.py: the weights do not change the cost, so nothing is trained). One pass =
what `update_policy` does per micro-batch, minus the optimizer: build the micro-batches, run the
decoder, LM head on the trained positions, log-softmax + gather, entropy (no grad), a
policy-gradient loss, backward. Modes:

- plain: share_prefix=False: one sequence per unit, position-id packing into rows, so no
  padding either: the peer. TRL's GRPOTrainer pads each sequence to the longest in its batch
  and verl packs without padding (remove-padding); neither shares the prompt of a group, so
  this is the stronger of the two;
- shared: shared-prefix packing (what sdpa/eager models get);
- old: posttrain/train/rl_batch.py as of the commit before shared-prefix packing (loaded from
  git history; skipped where the clone has none), rows of 256 tokens (`--old-row-tokens`).

The last line is `result: update time plain/shared-prefix = X (target >= 1.5)`.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from _models import random_model, sft_model  # noqa: E402  (no torch import: OMP_NUM_THREADS is set in main)


def load_old(row_tokens: int):
    """The pre-sharing rl_batch module from git history, or None where the clone lacks it."""
    got = subprocess.run(["git", "show", f"{BEFORE}:posttrain/train/rl_batch.py"], cwd=ROOT,
                         capture_output=True, text=True)
    if got.returncode != 0:
        print(f"note: no {BEFORE} in this clone's history (shallow?): the 'old' mode is skipped")
        return None
    src = got.stdout
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
        # (the old module takes the temperature as an argument; the new one reads each sample's own)
        logits = mod.token_logits(model, mb, 1.0) if mod.__name__ == "rl_batch_old" else mod.token_logits(model, mb)
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
    ap.add_argument("--model", default=None, help="an HF model dir (default: a random model of the quickstart's shape)")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from posttrain.train import rl_batch as new
    from posttrain.core.hf import load_model

    if args.model:
        model = load_model(sft_model(args.model), dtype="float32", device=torch.device("cpu"))
        name = args.model
    else:
        model, name = random_model()
    model.train()
    old = load_old(args.old_row_tokens)
    samples = make_samples(new.Sample, args.groups, args.k, model.config.vocab_size)
    modes = {
        "plain": lambda: one_pass(torch, new, model, samples, args.budget, share_prefix=False),
        "shared": lambda: one_pass(torch, new, model, samples, args.budget, share_prefix=True),
    }
    if old is not None:
        fields = old.Sample.__dataclass_fields__  # (the old Sample lacks fields added since, e.g. temperature)
        old_samples = [old.Sample(**{k: v for k, v in s.__dict__.items() if k in fields}) for s in samples]
        modes["old"] = lambda: one_pass(torch, old, model, old_samples, args.budget)
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
    tokens = sum(len(s.token_ids) for s in samples)
    print(f"sequence tokens/s: plain {tokens / best['plain']:,.0f}, shared {tokens / best['shared']:,.0f}")
    if "old" in best:
        print(f"old/shared time = {best['old'] / best['shared']:.2f}")
    print(f"result: update time plain/shared-prefix = {best['plain'] / best['shared']:.2f} (target >= 1.5)")


if __name__ == "__main__":
    main()
