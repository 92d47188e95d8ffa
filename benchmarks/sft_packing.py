"""SFT throughput: our packed SFT step vs TRL's SFTTrainer in its best mode (packed padding-free or padded), on CPU.

    .venv/bin/python benchmarks/sft_packing.py [--examples 240] [--rounds 3] [--threads 1] [--with-padded] [--quick]

Same model (Qwen2, hidden 256, 4 layers, vocab 1024, ~3M params, random init, built locally with
make_tiny_model + build_tokenizer: the weights do not change the cost), same data: `--examples`
sequences whose lengths are uniform in 16..512 tokens, the second half of each being the
completion (loss tokens). Same token budget per optimizer step: rows of 512 tokens, <= 4096
tokens (8 rows) per step, one micro-batch per step, so both take about the same number of steps
over the data (printed). Throughput counts real (non-pad) tokens per second of training steps
(forward + backward + AdamW update). Each side runs `--rounds` passes over the data, the sides
taking turns pass by pass so other load on the machine hits both alike; the fastest pass counts:

- ours: first-fit decreasing into rows of 512, block-diagonal attention from the position ids,
  LM head only on loss positions (posttrain.recipes.sft.train_step; batch collation timed too);
- TRL SFTTrainer, packed: `packing=True, packing_strategy="bfd"`, which TRL runs padding-free
  (the packed rows of a batch flattened into one sequence with position ids; transformers builds
  the block-diagonal mask from them), per_device_train_batch_size = 8 rows;
- TRL SFTTrainer, padded: no packing, per_device_train_batch_size = 8 examples padded to the
  longest of them (the same budget in padded tokens as ours);
both pre-tokenized, completion-only loss, timed from on_step_begin to on_step_end (its
collation left out), real tokens counted from the batches it trains on. The peer is whichever
TRL mode is faster here: TRL documents padding-free as its efficient mode, but it is meant for
FlashAttention's variable-length kernels; on a CPU the flattened sequence goes through SDPA with
a dense [tokens x tokens] mask, so it can lose to TRL's own padded mode (both are measured).
With `--with-padded`: our padded mode as an extra row (the gain packing brings us).

The last line is `result: SFT tokens/s ours packed / TRL SFTTrainer's fastest mode (MODE) = X (target >= 1.5)`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import tempfile
import time
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5.x renames inside TRL

import numpy as np  # noqa: E402
import torch  # noqa: E402

from posttrain.config.common import OptimConfig  # noqa: E402
from posttrain.recipes.sft import train_step  # noqa: E402
from posttrain.train.optim import build_optimizer, build_scheduler  # noqa: E402
from posttrain.train.packing import IGNORE, TokenizedExample, build_microbatches  # noqa: E402
from posttrain.train.tiny import make_tiny_model  # noqa: E402
from posttrain.train.tokenizer import build_tokenizer  # noqa: E402

BUDGET_TOKENS = 4096  # tokens per optimizer step (padded tokens for ours; TRL padding-free has none)
ROW_TOKENS = 512
BATCH_ROWS = BUDGET_TOKENS // ROW_TOKENS  # TRL: per_device_train_batch_size (rows packed, or examples padded)
LR = 1e-4
TRL_MODES = {True: "TRL SFTTrainer, packed (bfd, padding-free)", False: "TRL SFTTrainer, padded"}  # by packing


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


class Ours:
    """Our SFT step on our own copy of the model; `run_pass` trains once over the data, timed."""

    def __init__(self, base, examples, pad_id: int, packing: bool, rounds: int):
        self.mbs = build_microbatches(examples, packing=packing, row_tokens=ROW_TOKENS,
                                      max_tokens_per_microbatch=BUDGET_TOKENS, pad_id=pad_id, seed=0)
        self.model = copy.deepcopy(base).train()
        cfg = OptimConfig(lr=LR, warmup_steps=2)
        self.opt = build_optimizer(self.model, cfg)
        self.sched = build_scheduler(self.opt, cfg, total_steps=rounds * len(self.mbs) + 2)
        for i in range(2):  # warm-up, not timed
            self._step(i)
        self.tokens = sum(mb.n_tokens for mb in self.mbs)
        self.fill = self.tokens / sum(mb.input_ids.numel() for mb in self.mbs)
        self.steps, self.passes = len(self.mbs), []

    def _step(self, i: int) -> None:
        train_step(self.model, self.opt, [self.mbs[i]], 1.0, torch.device("cpu"), torch.float32)
        self.sched.step()

    def run_pass(self) -> None:
        started = time.perf_counter()
        for i in range(len(self.mbs)):
            self._step(i)
        self.passes.append((time.perf_counter() - started, self.tokens))


class TRL:
    """TRL's SFTTrainer on its own copy of the model; each pass is a fresh trainer (built untimed) over the data."""

    def __init__(self, base, tokenizer, examples, packing: bool):
        import datasets
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        datasets.disable_progress_bars()
        rows = []
        for ex in examples:
            mask = np.zeros(len(ex), dtype=np.int64)
            mask[len(ex) // 2 :] = 1
            rows.append({"input_ids": ex.input_ids.tolist(), "completion_mask": mask.tolist()})
        self.data, self.packing, self.tokenizer = datasets.Dataset.from_list(rows), packing, tokenizer
        self.model, self.passes, self.steps = copy.deepcopy(base), [], 0
        self._train(self.data.select(range(2 * BATCH_ROWS)))  # warm-up, not timed

    def _trainer(self, dataset, out: str):
        from transformers import TrainerCallback
        from trl import SFTConfig as TRLConfig
        from trl import SFTTrainer

        args = TRLConfig(
            output_dir=out, per_device_train_batch_size=BATCH_ROWS, num_train_epochs=1, learning_rate=LR,
            lr_scheduler_type="cosine", warmup_steps=2, max_grad_norm=1.0, weight_decay=0.0, adam_beta2=0.95,
            logging_strategy="no", save_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False,
            dataloader_num_workers=0, max_length=ROW_TOKENS, packing=self.packing, packing_strategy="bfd",
            padding_free=self.packing, completion_only_loss=True, disable_tqdm=True, seed=0,
        )
        trainer = SFTTrainer(model=self.model, args=args, train_dataset=dataset, processing_class=self.tokenizer)
        if self.packing and not trainer.padding_free:
            raise SystemExit("TRL did not turn padding-free on for bfd packing (its own best mode on this version)")
        clock = {"seconds": 0.0, "tokens": 0}
        step = trainer.training_step

        def counted(model, inputs, *a, **kw):  # real tokens: padding-free batches have no pads
            mask = inputs.get("attention_mask")
            clock["tokens"] += int(mask.sum()) if mask is not None else inputs["input_ids"].numel()
            return step(model, inputs, *a, **kw)

        class Clock(TrainerCallback):
            def on_step_begin(self, *a, **kw):
                clock["started"] = time.perf_counter()

            def on_step_end(self, *a, **kw):
                clock["seconds"] += time.perf_counter() - clock["started"]

        trainer.training_step = counted
        trainer.add_callback(Clock())
        return trainer, clock

    def _train(self, dataset) -> tuple[dict, int]:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):  # its metrics dicts
            trainer, clock = self._trainer(dataset, tmp)
            trainer.train()
        return clock, trainer.state.global_step

    def run_pass(self) -> None:
        clock, self.steps = self._train(self.data)
        self.passes.append((clock["seconds"], clock["tokens"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=240)
    ap.add_argument("--rounds", type=int, default=3, help="passes over the data per side; the fastest counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-padded", action="store_true", help="also our padded mode (an extra row)")
    ap.add_argument("--quick", action="store_true", help="--examples 96 --rounds 2 (about a third of the time)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: on a shared 2-core machine 2-thread ops stall many times over)")
    args = ap.parse_args()
    if args.quick:
        args.examples, args.rounds = 96, 2
    torch.set_num_threads(args.threads)

    corpus = [f"Calculate {a} + {b}. Answer: {a + b}" for a in range(60) for b in range(60)]
    tokenizer = build_tokenizer(corpus, vocab_size=1024)
    base = make_tiny_model(tokenizer, family="qwen2", seed=0, hidden_size=256, num_layers=4, num_heads=4,
                           num_kv_heads=2, intermediate_size=704, max_position_embeddings=1024)
    examples = make_data(args.examples, len(tokenizer), args.seed)
    load_start = os.getloadavg()
    print(f"model: qwen2 hidden 256, 4 layers, {sum(p.numel() for p in base.parameters()) / 1e6:.1f}M params; "
          f"torch threads {torch.get_num_threads()}; load average {load_start[0]:.1f} on {os.cpu_count()} CPUs "
          "(other work on the machine slows both sides alike: they take turns)")
    print(f"data: {len(examples)} sequences, lengths uniform 16..512, {sum(len(e) for e in examples)} tokens; "
          f"<= {BUDGET_TOKENS} tokens per step, rows of {ROW_TOKENS}")

    sides = {"ours, packed": Ours(base, examples, tokenizer.pad_token_id, True, args.rounds),
             TRL_MODES[True]: TRL(base, tokenizer, examples, True), TRL_MODES[False]: TRL(base, tokenizer, examples, False)}
    if args.with_padded:
        sides["ours, padded"] = Ours(base, examples, tokenizer.pad_token_id, False, args.rounds)
    for r in range(args.rounds):
        for side in sides.values():
            side.run_pass()
        print(f"round {r + 1}: " + ", ".join(f"{n} {s.passes[-1][1] / s.passes[-1][0]:,.0f} tok/s"
                                             for n, s in sides.items()), flush=True)

    print(f"\n{'side':<44} {'steps':>6} {'fill':>6} {'tokens':>8} {'seconds':>8} {'tokens/s':>10}")
    tps = {}
    for name, s in sides.items():
        seconds, tokens = min(s.passes)
        tps[name] = tokens / seconds
        fill = f"{s.fill:.2f}" if isinstance(s, Ours) else "1.00" if s.packing else "-"
        print(f"{name:<44} {s.steps:>6} {fill:>6} {tokens:>8} {seconds:>8.2f} {tps[name]:>10,.0f}")
    print("tokens/s: real (non-pad) tokens per second of training steps, fastest of "
          f"{args.rounds} passes; load average at end {os.getloadavg()[0]:.1f}")
    ours, best = tps["ours, packed"], max(TRL_MODES.values(), key=lambda name: tps[name])
    print(f"ours packed / TRL packed (padding-free) = {ours / tps[TRL_MODES[True]]:.2f}; ours packed / TRL padded = "
          f"{ours / tps[TRL_MODES[False]]:.2f}; TRL packed / TRL padded = "
          f"{tps[TRL_MODES[True]] / tps[TRL_MODES[False]]:.2f}")
    if args.with_padded:
        print(f"ours packed / ours padded = {ours / tps['ours, padded']:.2f}")
    mode = "packed, padding-free" if best == TRL_MODES[True] else "padded"
    print(f"result: SFT tokens/s ours packed / TRL SFTTrainer's fastest mode ({mode}) = {ours / tps[best]:.2f} "
          "(target >= 1.5)")


if __name__ == "__main__":
    main()
