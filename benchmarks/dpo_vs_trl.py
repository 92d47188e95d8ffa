"""DPO step time: our DPO step (posttrain.recipes.dpo.PairStep) vs TRL's DPOTrainer, on CPU, same model, data and loss.

    .venv/bin/python benchmarks/dpo_vs_trl.py [--pairs 256] [--steps 10] [--rounds 3] [--threads 2] [--quick]

What is compared: seconds per optimizer step of offline DPO (sigmoid loss, beta 0.1), 16 pairs a step, on
- the same model: a random-init Qwen2 (hidden 256, 4 layers, 4 heads / 2 KV heads, MLP 704, vocab 1024, ~3M
  params, float32) built with make_tiny_model + build_tokenizer, saved to a temp dir and loaded by both sides
  with from_pretrained (the weights do not change the cost);
- the same data: `--pairs` pairs of random token ids (ids 3.. to avoid the special tokens), prompt length uniform
  in 32..256, chosen and rejected completion lengths uniform in 16..128 each, given as token ids to both sides:
  TRL 1.16's DPOTrainer always runs its own `_prepare_dataset` (prompt extraction, EOS appended to text,
  tokenization) on a text dataset, so its pre-tokenized path is taken by handing it a dataset that already has
  the columns `_prepare_dataset` produces (`prompt_ids`, `chosen_ids`, `rejected_ids`, read by its
  DataCollatorForPreference) and overriding `_prepare_dataset` to return it unchanged (no EOS added: the ids
  are the same on both sides, checked on the first batch: same ids, same completion masks);
- the same step: 16 pairs per optimizer step (TRL per_device_train_batch_size=16, no accumulation), AdamW
  (0.9, 0.95), lr 1e-6, constant schedule, no warmup, no weight decay, grad clip 1.0, no truncation (TRL
  max_length=None), reference logprobs precomputed once before training on both sides (TRL
  `precompute_ref_log_probs=True`, ours `logps_of` on the starting model), no reference forward per step, no
  gradient checkpointing (TRL's default turns it on; off here, as ours), no eval, no logging, no saving,
  `use_cpu=True`, dataloader_num_workers 0, `torch.set_num_threads(--threads)` for both.
  TRL's `padding_free=True` is disabled in TRL 1.16 ("temporarily unavailable after a refactor", it falls back
  to padding), so its padded mode is its only mode: the 16 chosen and 16 rejected sequences padded to the
  longest of the 32, its fused LM head projecting only the completion positions.
  Ours: `train.packing=True` (its default): chosen and rejected of a pair packed with their shared prompt
  computed once (train/pair_forward.py), chunked by `max_tokens_per_microbatch` (the default 4096).
Timing: TRL from on_step_begin to on_step_end (a TrainerCallback; its collation left out), ours around
PairStep(indices) + clip_grad_norm + optimizer.step + zero_grad (the sequence of recipes/pref_loop.run_loop;
our batches are prepared, so nothing is left out). The sides take turns, `--steps` steps each per round,
`--rounds` rounds, the first 2 steps of each side are warm-up and left out; median s/step.
Correctness: on one fixed batch (pairs 0..15 in that order, before any update), TRL's own `compute_loss` on its
collated batch (with its precomputed reference logps) and our PairStep's loss must agree within 1e-4. Before an
update the policy is the reference, so that loss is ln 2 on both sides by construction; what makes the check
mean something is that the policy logps, the precomputed reference logps (relative 1e-4) and the step-0
gradient norm after each side's backward (relative 1e-3) must agree too. Any miss: the script exits 1 (after
the result line). Both sides' rewards/accuracies on that batch are printed.

The last line is `result: step time TRL/ours = X (target >= 1.5)`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # TRL's reference-logps progress bar
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5.x renames inside TRL

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from posttrain.train.tiny import make_tiny_model, save_model  # noqa: E402
from posttrain.train.tokenizer import build_tokenizer  # noqa: E402

PAIRS_PER_STEP = 16
LR, BETA, GRAD_CLIP, BETAS = 1e-6, 0.1, 1.0, (0.9, 0.95)
WARMUP_STEPS = 2  # steps of each side left out of the median
TOLERANCE = 1e-4  # step-0 loss, ours vs TRL (absolute)
REL_TOLERANCE = 1e-4  # summed logps (relative: sums of ~100 fp32 terms, packed vs padded attention)
GRAD_TOLERANCE = 1e-3  # step-0 gradient norm (relative)
console = Console(highlight=False, width=140)


def make_pairs(n: int, vocab: int, seed: int, prompt=(32, 256), completion=(16, 128)) -> list[tuple]:
    """(prompt_ids, chosen_ids, rejected_ids) lists of random ids, lengths uniform in the given ranges."""
    rng = np.random.default_rng(seed)
    ids = lambda k: rng.integers(3, vocab, size=int(k)).tolist()  # noqa: E731  (0..2: special tokens)
    out = []
    for _ in range(n):
        lp = rng.integers(prompt[0], prompt[1] + 1)
        lc, lr = rng.integers(completion[0], completion[1] + 1, size=2)
        out.append((ids(lp), ids(lc), ids(lr)))
    return out


def grad_norm(model) -> float:
    """The total L2 norm of the gradients (no clipping)."""
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    return float(torch.cat(grads).norm()) if grads else 0.0


def median_after_warmup(xs: list[float]) -> float:
    return statistics.median(xs[WARMUP_STEPS:] or xs)


class TRLSide:
    """TRL's DPOTrainer on its own copy of the model; each round is one `train()` of `steps` steps."""

    def __init__(self, model_dir: str, raw: list[tuple], steps: int, threads: int, out_dir: str):
        import datasets
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from transformers.utils import logging as hf_logging
        from trl import DPOConfig as TRLConfig
        from trl import DPOTrainer

        hf_logging.set_verbosity_error()
        datasets.disable_progress_bars()

        class PreTokenized(DPOTrainer):  # the ids are already what _prepare_dataset would produce
            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                return dataset

        data = datasets.Dataset.from_list([{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in raw])
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        args = TRLConfig(
            output_dir=out_dir, per_device_train_batch_size=PAIRS_PER_STEP, gradient_accumulation_steps=1,
            max_steps=steps, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            adam_beta1=BETAS[0], adam_beta2=BETAS[1], max_grad_norm=GRAD_CLIP, beta=BETA, loss_type=["sigmoid"],
            max_length=None, padding_free=False, precompute_ref_log_probs=True, gradient_checkpointing=False,
            logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
            bf16=False, fp16=False, dataloader_num_workers=0, disable_tqdm=True, seed=0,
        )
        self.times: list[float] = []
        clock = {}

        class Clock(TrainerCallback):
            def on_step_begin(self, *a, **kw):
                torch.set_num_threads(threads)
                clock["t"] = time.perf_counter()

            def on_step_end(self_, *a, **kw):  # noqa: N805
                self.times.append(time.perf_counter() - clock["t"])

        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            self.trainer = PreTokenized(model=model, args=args, train_dataset=data, processing_class=tokenizer)
        self.setup_seconds = time.perf_counter() - started  # includes its reference-logps pass
        self.trainer.add_callback(Clock())
        self.layout: list[tuple[int, int]] = []  # per step: (tokens computed, padding included; rows)
        step = self.trainer.training_step

        def counted(model, inputs, *a, **kw):
            self.layout.append((inputs["input_ids"].numel(), inputs["input_ids"].shape[0]))
            return step(model, inputs, *a, **kw)

        self.trainer.training_step = counted
        if self.trainer.padding_free:
            raise SystemExit("TRL turned padding-free on: this script assumes TRL 1.16, where it is disabled")

    def first_batch(self, n: int) -> dict:
        return self.trainer.data_collator([self.trainer.train_dataset[i] for i in range(n)])

    def step0(self, n: int) -> dict:
        """TRL's own loss and reward metrics on pairs 0..n-1 (its collated batch, its reference logps), no update."""
        t = self.trainer
        t.model.train()
        for v in t._metrics["train"].values():
            v.clear()
        t.model.zero_grad(set_to_none=True)
        loss = t.compute_loss(t.model, self.first_batch(n))
        loss.backward()
        norm = grad_norm(t.model)
        t.model.zero_grad(set_to_none=True)
        m = {k: v[-1] for k, v in t._metrics["train"].items() if v}
        for v in t._metrics["train"].values():
            v.clear()
        return {"loss": float(loss.detach()), "grad_norm": norm, "rewards/chosen": m["rewards/chosen"],
                "rewards/rejected": m["rewards/rejected"], "rewards/accuracy": m["rewards/accuracies"],
                "rewards/margin": m["rewards/margins"], "logps/chosen": m["logps/chosen"],
                "logps/rejected": m["logps/rejected"]}

    def run_round(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # its final metrics dict
            self.trainer.train()
        if self.trainer.state.global_step != self.trainer.args.max_steps:
            raise SystemExit(f"TRL ran {self.trainer.state.global_step} steps, expected {self.trainer.args.max_steps}")


class OursSide:
    """Our DPO step (recipes/dpo.PairStep) on our own copy of the model; `run_round` trains `steps` steps."""

    def __init__(self, model_dir: str, raw: list[tuple], steps: int, pad_id: int, out_dir: str):
        from posttrain.config.common import ModelConfig, OptimConfig
        from posttrain.config.pref import DPOConfig, PrefAlgoConfig, PrefTrainConfig
        from posttrain.recipes.dpo import PairStep, logps_of, pair_items
        from posttrain.recipes.pref_loop import epoch_batches
        from posttrain.core.hf import load_model
        from posttrain.train.optim import build_optimizer
        from posttrain.train.pairs import TokenPair

        self.cfg = DPOConfig(
            out_dir=out_dir, model=ModelConfig(path=model_dir),
            algo=PrefAlgoConfig(loss="sigmoid", beta=BETA),
            optim=OptimConfig(lr=LR, betas=BETAS, warmup_steps=0, schedule="constant", weight_decay=0.0,
                              grad_clip=GRAD_CLIP),
            train=PrefTrainConfig(pairs_per_step=PAIRS_PER_STEP, packing=True))
        self.pairs = [TokenPair(tuple(p), tuple(c), tuple(r)) for p, c, r in raw]
        device, self.steps, self.times = torch.device("cpu"), steps, []
        started = time.perf_counter()
        ref_model = load_model(model_dir, dtype="float32", device=device).eval().requires_grad_(False)
        ref = logps_of(ref_model, pair_items(self.pairs), max_tokens=self.cfg.train.max_tokens_per_microbatch,
                       pad_id=pad_id, share_prompt=self.cfg.train.packing)
        del ref_model
        self.model = load_model(model_dir, dtype="float32", device=device)
        self.setup_seconds = time.perf_counter() - started  # includes our reference-logps pass
        self.ref = ref
        self.step_fn = PairStep(self.cfg, self.model, self.pairs, ref, device, torch.float32, pad_id)
        self.optimizer = build_optimizer(self.model, self.cfg.optim)
        self.epoch_batches = epoch_batches
        self.epoch, self.batches = 0, epoch_batches(len(self.pairs), PAIRS_PER_STEP, 0, 0)

    def layout(self, pad_id: int) -> list[tuple[int, int]]:
        """Per step of the first epoch: (tokens computed, padding included; rows), as PairStep lays them out
        (chunks by token budget, then train/pair_forward's micro-batches); untimed, for the report."""
        from posttrain.recipes.dpo import pair_items
        from posttrain.recipes.pref_loop import token_chunks
        from posttrain.train.pair_forward import _samples
        from posttrain.train.rl_batch import build_rl_microbatches

        budget, out = self.cfg.train.max_tokens_per_microbatch, []
        for indices in self.epoch_batches(len(self.pairs), PAIRS_PER_STEP, 0, 0):
            tokens = rows = 0
            lengths = [len(self.pairs[i].prompt_ids) + len(self.pairs[i].chosen_ids) + len(self.pairs[i].rejected_ids)
                       for i in indices]
            for chunk in token_chunks(lengths, budget):
                items = pair_items([self.pairs[indices[k]] for k in chunk])
                for mb in build_rl_microbatches(_samples(items), max_tokens_per_microbatch=budget, pad_id=pad_id,
                                                share_prefix=True):
                    tokens, rows = tokens + mb.input_ids.numel(), rows + mb.input_ids.shape[0]
            out.append((tokens, rows))
        return out

    def step0(self, n: int) -> dict:
        """Our loss and reward metrics on pairs 0..n-1, no update (the gradients are dropped)."""
        self.model.train()
        m = self.step_fn(list(range(n)))
        m["grad_norm"] = grad_norm(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        return m

    def _next(self) -> list[int]:
        if not self.batches:
            self.epoch += 1
            self.batches = self.epoch_batches(len(self.pairs), PAIRS_PER_STEP, 0, self.epoch)
        return self.batches.pop(0)

    def run_round(self) -> None:
        import math

        from posttrain.train.optim import clip_grad_norm

        for _ in range(self.steps):
            indices = self._next()
            started = time.perf_counter()
            self.model.train()
            metrics = self.step_fn(indices)
            norm = clip_grad_norm(self.model, self.cfg.optim.grad_clip)
            if math.isfinite(metrics["loss"]) and math.isfinite(norm):
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.times.append(time.perf_counter() - started)


def check_same_ids(trl: TRLSide, raw: list[tuple], n: int) -> None:
    """TRL's collated first batch holds exactly our ids: prompt+chosen rows, then prompt+rejected rows."""
    batch = trl.first_batch(n)
    rows = [p + c for p, c, _ in raw[:n]] + [p + r for p, _, r in raw[:n]]
    masks = [[0] * len(p) + [1] * len(c) for p, c, _ in raw[:n]] + [[0] * len(p) + [1] * len(r) for p, _, r in raw[:n]]
    for k, (row, mask) in enumerate(zip(rows, masks)):
        got = batch["input_ids"][k][batch["attention_mask"][k].bool()].tolist()
        got_mask = batch["completion_mask"][k][batch["attention_mask"][k].bool()].tolist()
        if got != row or got_mask != mask:
            raise SystemExit(f"TRL's batch row {k} differs from our pair data (ids or completion mask)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="the sides take turns, --steps steps each, this many times")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads, both sides")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run: 32 pairs, 4 steps, 1 round, shorter sequences")
    args = ap.parse_args()
    lengths = dict(prompt=(32, 256), completion=(16, 128))
    if args.quick:
        args.pairs, args.steps, args.rounds = 32, 4, 1
        lengths = dict(prompt=(16, 64), completion=(8, 32))
    if args.pairs < PAIRS_PER_STEP:
        raise SystemExit(f"--pairs must be >= {PAIRS_PER_STEP}")
    torch.set_num_threads(args.threads)

    corpus = [f"Calculate {a} + {b}. Answer: {a + b}" for a in range(60) for b in range(60)]
    tokenizer = build_tokenizer(corpus, vocab_size=1024)
    base = make_tiny_model(tokenizer, family="qwen2", seed=0, hidden_size=256, num_layers=4, num_heads=4,
                           num_kv_heads=2, intermediate_size=704, max_position_embeddings=1024)
    raw = make_pairs(args.pairs, len(tokenizer), args.seed, **lengths)
    n_params = sum(p.numel() for p in base.parameters())
    tmp = tempfile.TemporaryDirectory(prefix="dpo_vs_trl_")
    model_dir = str(save_model(base, tokenizer, os.path.join(tmp.name, "model")))
    del base
    real = sum(2 * len(p) + len(c) + len(r) for p, c, r in raw)
    packed = sum(len(p) + len(c) + len(r) for p, c, r in raw)
    console.print(f"model: qwen2 hidden 256, 4 layers, {n_params / 1e6:.1f}M params, float32; torch threads "
                  f"{torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    console.print(f"data: {len(raw)} pairs, prompt {lengths['prompt'][0]}..{lengths['prompt'][1]}, completions "
                  f"{lengths['completion'][0]}..{lengths['completion'][1]} tokens; {real} tokens as 2 sequences a pair "
                  f"(TRL, before padding), {packed} with the prompt once (ours); {PAIRS_PER_STEP} pairs a step; "
                  f"{args.rounds} rounds x {args.steps} steps a side")

    trl = TRLSide(model_dir, raw, args.steps, args.threads, os.path.join(tmp.name, "trl"))
    ours = OursSide(model_dir, raw, args.steps, tokenizer.pad_token_id, os.path.join(tmp.name, "ours"))
    console.print(f"set-up (incl. reference logps): TRL {trl.setup_seconds:.1f} s, ours {ours.setup_seconds:.1f} s")

    # step-0 check: the same fixed batch, before any update
    check_same_ids(trl, raw, PAIRS_PER_STEP)
    idx = range(PAIRS_PER_STEP)
    ref_trl = torch.tensor([[trl.trainer.train_dataset[i][k] for k in ("ref_chosen_logps", "ref_rejected_logps")]
                            for i in idx]).T.flatten()
    ref_ours = torch.cat([ours.ref[0][0:2 * PAIRS_PER_STEP:2], ours.ref[0][1:2 * PAIRS_PER_STEP:2]])
    s_trl, s_ours = trl.step0(PAIRS_PER_STEP), ours.step0(PAIRS_PER_STEP)
    diff = abs(s_trl["loss"] - s_ours["loss"])
    checks = {  # name: (|diff|, tolerance)
        "step-0 loss": (diff, TOLERANCE),
        "reference logps, max over the 32 sequences (relative)":
            (float(((ref_trl - ref_ours).abs() / ref_trl.abs()).max()), REL_TOLERANCE),
        "policy logps/chosen, batch mean (relative)":
            (abs(s_trl["logps/chosen"] - s_ours["logps/chosen"]) / abs(s_trl["logps/chosen"]), REL_TOLERANCE),
        "policy logps/rejected, batch mean (relative)":
            (abs(s_trl["logps/rejected"] - s_ours["logps/rejected"]) / abs(s_trl["logps/rejected"]), REL_TOLERANCE),
        "step-0 gradient norm, before clipping (relative)":
            (abs(s_trl["grad_norm"] - s_ours["grad_norm"]) / s_trl["grad_norm"], GRAD_TOLERANCE),
    }
    console.print(f"step-0 check on pairs 0..{PAIRS_PER_STEP - 1} (before any update: policy = reference, so the "
                  "loss is ln 2 on both sides; the logps and the gradient are what is really compared):")
    console.print(f"  loss: TRL {s_trl['loss']:.6f}, ours {s_ours['loss']:.6f}; gradient norm: TRL "
                  f"{s_trl['grad_norm']:.6e}, ours {s_ours['grad_norm']:.6e}")
    for name, s in (("TRL", s_trl), ("ours", s_ours)):
        console.print(f"  {name:<4} logps/chosen {s['logps/chosen']:.4f} logps/rejected {s['logps/rejected']:.4f} "
                      f"rewards/chosen {s['rewards/chosen']:+.5f} rewards/rejected {s['rewards/rejected']:+.5f} "
                      f"margin {s.get('rewards/margin', float('nan')):+.5f} accuracy {s['rewards/accuracy']:.3f}")
    failed = []
    for name, (d, tol) in checks.items():
        ok = d <= tol
        failed += [] if ok else [name]
        console.print(f"  {'ok  ' if ok else '[red]FAIL[/]'} {name}: |diff| {d:.2e} (tolerance {tol:g})")

    sides = [("TRL DPOTrainer (padded)", trl), ("ours (shared-prompt packing)", ours)]
    for r in range(args.rounds):
        for name, side in sides if r % 2 == 0 else sides[::-1]:
            side.run_round()
        console.print(f"round {r + 1}: " + ", ".join(
            f"{name} {statistics.median(side.times[-args.steps:]):.3f} s/step" for name, side in sides)
            + f"; load {os.getloadavg()[0]:.1f}")

    real_step = real / len(raw) * PAIRS_PER_STEP
    t_tok = statistics.mean(t for t, _ in trl.layout)
    console.print(f"tokens computed a step (mean): TRL {t_tok:,.0f} in {trl.layout[0][1]} padded rows "
                  f"({real_step:,.0f} real, {real_step / t_tok:.0%} fill)")
    try:
        o_lay = ours.layout(tokenizer.pad_token_id)
        o_tok = statistics.mean(t for t, _ in o_lay)
        console.print(f"                                 ours {o_tok:,.0f} in {statistics.mean(r for _, r in o_lay):.1f} "
                      f"rows ({packed / len(raw) * PAIRS_PER_STEP:,.0f} real with the prompt once); TRL/ours "
                      f"{t_tok / o_tok:.2f}x the tokens")
    except Exception as e:  # a report only: our internals may move
        console.print(f"(our layout not reported: {type(e).__name__}: {e})")

    table = Table(title=f"DPO, {PAIRS_PER_STEP} pairs a step, median of {args.rounds * args.steps - WARMUP_STEPS} "
                        f"steps a side (after {WARMUP_STEPS} warm-up)")
    for col in ("side", "s/step median", "pairs/s", "step-0 loss"):
        table.add_column(col, justify="left" if col == "side" else "right")
    med = {}
    for (name, side), s in zip(sides, (s_trl, s_ours)):
        med[name] = median_after_warmup(side.times)
        table.add_row(name, f"{med[name]:.3f}", f"{PAIRS_PER_STEP / med[name]:.1f}", f"{s['loss']:.6f}")
    console.print(table)
    console.print(f"step-0 loss |TRL - ours| = {diff:.2e}; load average at end {os.getloadavg()[0]:.1f}")
    tmp.cleanup()
    if failed:
        console.print(f"[red]FAIL:[/] ours and TRL disagree at step 0: {'; '.join(failed)}")
    print(f"result: step time TRL/ours = {med[sides[0][0]] / med[sides[1][0]]:.2f} (target >= 1.5)")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
