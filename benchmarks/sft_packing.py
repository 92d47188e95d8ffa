"""SFT throughput: sequence packing vs. padding, and TRL's SFTTrainer as the peer, on CPU.

    .venv/bin/python benchmarks/sft_packing.py [--examples 240] [--rounds 3] [--threads N] [--trl-packing]

Same model (Qwen2, hidden 256, 4 layers, vocab 1024, ~3M params, random init, built locally
with make_tiny_model + build_tokenizer), same data: `--examples` sequences whose lengths are
uniform in 16..512 tokens, the second half of each being the completion (loss tokens).
Each mode trains on the data (forward + backward + AdamW step) after two warm-up steps and
reports real (non-pad) tokens per second. The two posttrain modes run interleaved step by
step, `--rounds` passes each, and keep their fastest pass (the machine may be shared with
other work, which only ever slows a pass down); TRL trains one pass after them:

- posttrain packed: first-fit decreasing into rows of 512, micro-batches of <= 4096 tokens,
  block-diagonal attention from the position ids (posttrain.recipes.sft.train_step);
- posttrain padded: the same code with packing off: examples in order, micro-batches of
  <= 4096 padded tokens, each padded to the longest example in it;
- TRL SFTTrainer (trl 1.16), pre-tokenized data, completion-only loss, no packing,
  per_device_train_batch_size=8 (padded to the longest in the batch), report_to="none", CPU.
  With --trl-packing it runs TRL's own packing instead (bfd into max_length=512 rows,
  padding-free, per_device_train_batch_size=1: one 512-token row per step).

The last line is `result: packed/padded tokens/s = X (target >= 2)`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from posttrain.config import OptimConfig  # noqa: E402
from posttrain.recipes.sft import train_step  # noqa: E402
from posttrain.train.optim import build_optimizer, build_scheduler  # noqa: E402
from posttrain.train.packing import IGNORE, TokenizedExample, build_microbatches  # noqa: E402
from posttrain.train.tiny import make_tiny_model  # noqa: E402
from posttrain.train.tokenizer import build_tokenizer  # noqa: E402

BUDGET_TOKENS = 4096  # max_tokens_per_microbatch for posttrain (padded tokens)
ROW_TOKENS = 512
TRL_BATCH_EXAMPLES = 8  # ~ 4096 / 512: the same padded-token budget for TRL without packing


def make_data(n: int, vocab: int, seed: int) -> list[TokenizedExample]:
    rng = np.random.default_rng(seed)
    out = []
    for length in rng.integers(16, 513, size=n):
        ids = rng.integers(3, vocab, size=int(length)).astype(np.int64)  # 0..2 are special tokens
        labels = np.full(len(ids), IGNORE, dtype=np.int64)
        start = len(ids) // 2  # completion = second half; target at t is token t+1
        labels[start - 1 : -1] = ids[start:]
        out.append(TokenizedExample(ids, labels))
    return out


def run_posttrain(base, examples, pad_id: int, rounds: int) -> dict[str, dict]:
    """Packed and padded modes, each on its own copy of the model, interleaved step by step so
    that load from other processes on the machine hits both alike; `rounds` passes over the
    data, and each mode keeps its fastest pass (as timeit does)."""
    cpu = torch.device("cpu")
    modes = {}
    for name, packing in (("posttrain packed", True), ("posttrain padded", False)):
        mbs = build_microbatches(examples, packing=packing, row_tokens=ROW_TOKENS,
                                 max_tokens_per_microbatch=BUDGET_TOKENS, pad_id=pad_id, seed=0)
        model = copy.deepcopy(base).train()
        cfg = OptimConfig(lr=1e-4, warmup_steps=2)
        opt = build_optimizer(model, cfg)
        sched = build_scheduler(opt, cfg, total_steps=rounds * len(mbs) + 2)
        for mb in mbs[:2]:  # warm-up, not timed
            train_step(model, opt, [mb], 1.0, cpu, torch.float32)
            sched.step()
        modes[name] = {"model": model, "opt": opt, "sched": sched, "mbs": mbs, "rounds": []}
    for _ in range(rounds):
        for m in modes.values():
            m["rounds"].append(0.0)
        for i in range(max(len(m["mbs"]) for m in modes.values())):
            for m in modes.values():
                if i < len(m["mbs"]):
                    started = time.perf_counter()
                    train_step(m["model"], m["opt"], [m["mbs"][i]], 1.0, cpu, torch.float32)
                    m["sched"].step()
                    m["rounds"][-1] += time.perf_counter() - started
    out = {}
    for name, m in modes.items():
        real = sum(mb.n_tokens for mb in m["mbs"])
        padded = sum(mb.input_ids.numel() for mb in m["mbs"])
        out[name] = {"tokens": real, "seconds": min(m["rounds"]), "steps": len(m["mbs"]), "fill": real / padded,
                     "all_seconds": m["rounds"]}
    return out


def run_trl(model, tokenizer, examples, packing: bool) -> dict:
    import datasets
    from transformers.utils import logging as hf_logging
    from trl import SFTConfig as TRLConfig
    from trl import SFTTrainer

    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    rows = []
    for ex in examples:
        mask = np.zeros(len(ex), dtype=np.int64)
        mask[len(ex) // 2 :] = 1
        rows.append({"input_ids": ex.input_ids.tolist(), "completion_mask": mask.tolist()})
    data = datasets.Dataset.from_list(rows)

    def trainer_for(dataset, out: str) -> SFTTrainer:
        args = TRLConfig(
            output_dir=out, per_device_train_batch_size=1 if packing else TRL_BATCH_EXAMPLES,
            num_train_epochs=1, learning_rate=1e-4, lr_scheduler_type="cosine", warmup_steps=2,
            max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.95, logging_strategy="no", save_strategy="no",
            report_to="none", use_cpu=True, bf16=False, fp16=False, dataloader_num_workers=0,
            max_length=ROW_TOKENS, packing=packing, packing_strategy="bfd", completion_only_loss=True,
            disable_tqdm=True, seed=0,
        )
        return SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):  # its metrics dicts
        trainer_for(data.select(range(2 * TRL_BATCH_EXAMPLES)), tmp).train()  # warm-up, not timed
        trainer = trainer_for(data, tmp)
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        steps = trainer.state.global_step
    return {"tokens": sum(len(ex) for ex in examples), "seconds": seconds, "steps": steps, "fill": float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=3, help="passes over the data per posttrain mode; the fastest counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trl-packing", action="store_true", help="run TRL with its own packing (bfd) instead of padding")
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    corpus = [f"Calculate {a} + {b}. Answer: {a + b}" for a in range(60) for b in range(60)]
    tokenizer = build_tokenizer(corpus, vocab_size=1024)
    base = make_tiny_model(tokenizer, family="qwen2", seed=0, hidden_size=256, num_layers=4, num_heads=4,
                           num_kv_heads=2, intermediate_size=704, max_position_embeddings=1024)
    examples = make_data(args.examples, len(tokenizer), args.seed)
    n_params = sum(p.numel() for p in base.parameters())
    print(f"model: qwen2 hidden 256, 4 layers, {n_params / 1e6:.1f}M params; torch threads {torch.get_num_threads()}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work on the machine skews timings)")
    print(f"data: {len(examples)} sequences, lengths uniform 16..512, {sum(len(e) for e in examples)} tokens")

    results = run_posttrain(base, examples, tokenizer.pad_token_id, args.rounds)
    if not args.skip_trl:
        name = "TRL SFTTrainer, " + ("its packing (bfd, padding-free)" if args.trl_packing else "no packing (padded)")
        results[name] = run_trl(copy.deepcopy(base), tokenizer, examples, args.trl_packing)

    print(f"\n{'mode':<48} {'steps':>6} {'fill':>6} {'seconds':>8} {'tokens/s':>10}")
    for name, r in results.items():
        fill = "-" if np.isnan(r["fill"]) else f"{r['fill']:.2f}"
        print(f"{name:<48} {r['steps']:>6} {fill:>6} {r['seconds']:>8.1f} {r['tokens'] / r['seconds']:>10.0f}")
    for name, r in results.items():
        if "all_seconds" in r:
            print(f"{name}: seconds per pass {', '.join(f'{x:.1f}' for x in r['all_seconds'])} (fastest counts)")
    tps = {name: r["tokens"] / r["seconds"] for name, r in results.items()}
    for name in results:
        if name.startswith("TRL"):
            print(f"posttrain packed / {name}: {tps['posttrain packed'] / tps[name]:.2f}x")
    fills = results["posttrain packed"]["fill"] / results["posttrain padded"]["fill"]
    print(f"fill ratio packed/padded = {fills:.2f} (the ratio of useful compute per padded token)")
    ratio = tps["posttrain packed"] / tps["posttrain padded"]
    print(f"result: packed/padded tokens/s = {ratio:.2f} (target >= 2)")


if __name__ == "__main__":
    main()
