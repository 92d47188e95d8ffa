"""Direct preference optimisation and its family, written out.

    final_dir = run(cfg)                # cfg: DPOConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)   # continue from the newest complete checkpoint

1. load the preference data (train/pairs.py: TRL's formats, token-exact pairs, bad lines by
   file:line) and hold out the eval pairs;
2. reference logprobs: every pair's summed completion logprobs under the starting model, computed
   once in a no-grad pass and cached on disk under a hash of (model, tokenizer, token ids), so no
   reference model stays in memory and a second run on the same data skips the pass (reference-free
   losses, SimPO and ORPO, need none);
3. the policy (fp32 master weights, optional LoRA) trains on `train.pairs_per_step` pairs a step:
   chosen and rejected of a pair are packed with their prompt computed once (shared-prefix
   packing, train/pair_forward.py), chunked by `max_tokens_per_microbatch`, the step's loss the
   mean over its pairs (exact accumulation across chunks);
4. the loss (algos/preference.py): sigmoid (DPO), ipo, hinge, robust, simpo, orpo, or kto on
   unpaired data;
5. metrics per step: loss, rewards/chosen, rewards/rejected, rewards/accuracy, rewards/margin, and
   the raw logps/chosen and logps/rejected (summed per sequence), with an alert when both fall
   together (the margin then grows by pushing the chosen answer down too); the same on the held-out
   pairs as eval/...;
6. with `online` set, the policy samples and ranks its own pairs each round (recipes/dpo_online.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from posttrain.algos import preference as P
from posttrain.config.pref import DPOConfig
from posttrain.recipes.dpo_online import run_online
from posttrain.recipes.pref_loop import (BothFallAlert, PairStep, console, item_lengths, logps_of, no_grad_eval,
                                        prepare_pairs, run_loop, start, trainable)
from posttrain.recipes.sft import autocast
from posttrain.core.hf import load_model
from posttrain.core.fsio import atomic_file
from posttrain.train.pair_forward import completion_logps, pair_items, token_chunks
from posttrain.train.run import export_final
from posttrain.train.weights import model_identity


# ---------------------------------------------------------------- items and losses


def example_items(examples, mismatched: bool = False) -> list[tuple]:
    """KTO's (prompt, completion) items; mismatched: example i's prompt with example i+1's completion
    (cyclic), the items KTO's reference point (the policy/reference KL) is estimated on."""
    n = len(examples)
    if not mismatched:
        return [(e.prompt_ids, e.completion_ids) for e in examples]
    return [(examples[i].prompt_ids, examples[(i + 1) % n].completion_ids) for i in range(n)]


# ---------------------------------------------------------------- reference logprobs


def _fingerprint(tokenizer) -> str:
    vocab = tokenizer.get_vocab()
    text = json.dumps([len(vocab), sorted(vocab.items())[:64], getattr(tokenizer, "chat_template", None)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reference_key(model_path: str, tokenizer, items) -> str:
    """Cache key of the reference logprobs of `items`: the model's identity, the tokenizer's, the ids."""
    h = hashlib.sha256(f"{model_identity(model_path)}|{_fingerprint(tokenizer)}|{len(items)}".encode())
    for prompt, completion in items:
        h.update(torch.tensor(list(prompt), dtype=torch.int32).numpy().tobytes())
        h.update(b"|")
        h.update(torch.tensor(list(completion), dtype=torch.int32).numpy().tobytes())
        h.update(b";")
    return h.hexdigest()[:32]


def reference_logps(cfg: DPOConfig, tokenizer, items, device, pad_id: int, *,
                    paired: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference model's summed logps of `items` (and token counts): from the cache when this
    model, tokenizer and data were seen before, else computed with a model loaded for it and freed."""
    key = reference_key(cfg.model.path, tokenizer, items)
    path = Path(cfg.reference_cache) / f"{key}.pt"
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        if saved["sums"].shape[0] == len(items):
            console.print(f"reference logprobs: {len(items)} sequences from the cache ({path.name})")
            return saved["sums"], saved["counts"]
    console.print(f"reference logprobs: {len(items)} sequences under {cfg.model.path} (cached as {path.name})")
    ref = load_model(cfg.model.path, dtype="float32", device=device).eval().requires_grad_(False)
    sums, counts = logps_of(ref, items, max_tokens=cfg.train.max_tokens_per_microbatch, pad_id=pad_id,
                            share_prompt=cfg.train.packing, paired=paired)
    del ref
    with atomic_file(path, "wb") as f:
        torch.save({"sums": sums, "counts": counts, "model": model_identity(cfg.model.path)}, f)
    return sums, counts


# ---------------------------------------------------------------- one step


class KTOStep:
    """KTO on unpaired examples: the reference point z0 is the batch's policy/reference KL on
    mismatched (prompt, completion) items, detached (the KTO paper's estimate)."""

    def __init__(self, cfg: DPOConfig, model, examples, ref, ref_kl, device, dtype, pad_id: int):
        self.cfg, self.model, self.examples, self.ref, self.ref_kl = cfg, model, examples, ref, ref_kl
        self.items, self.kl_items = example_items(examples), example_items(examples, mismatched=True)
        self.device, self.dtype, self.pad_id = device, dtype, pad_id

    def _z0(self, indices: list[int]) -> torch.Tensor:
        t = self.cfg.train
        policy, _ = logps_of(self.model, [self.kl_items[i] for i in indices], max_tokens=t.max_tokens_per_microbatch,
                             pad_id=self.pad_id, share_prompt=t.packing)
        return P.kto_reference_kl(policy, self.ref_kl[0][torch.tensor(indices)])

    def _run(self, indices: list[int], train: bool):
        a, t = self.cfg.algo, self.cfg.train
        z0 = self._z0(indices)
        losses, rewards, desirable = [], [], []
        for chunk in token_chunks(item_lengths([self.items[i] for i in indices]), t.max_tokens_per_microbatch):
            ids = [indices[k] for k in chunk]
            with autocast(self.device, self.dtype):
                sums, _ = completion_logps(self.model, [self.items[i] for i in ids], max_tokens_per_microbatch=t.max_tokens_per_microbatch,
                                           pad_id=self.pad_id, share_prefix=None if t.packing else False)
            want = torch.tensor([self.examples[i].desirable for i in ids])
            out = P.kto_loss(sums.float().cpu(), self.ref[0][torch.tensor(ids)], want, z0, beta=a.beta,
                             desirable_weight=a.kto_desirable_weight, undesirable_weight=a.kto_undesirable_weight)
            if train:
                (out.loss.sum() / len(indices)).backward()
            losses.append(out.loss.detach())
            rewards.append(out.chosen_reward)
            desirable.append(want)
        loss, reward, want = torch.cat(losses), torch.cat(rewards), torch.cat(desirable)
        return loss, reward, want, float(z0)

    @staticmethod
    def _metrics(loss, reward, want, z0, prefix=""):
        m = {"loss": float(loss.mean()), "kl_ref": z0}
        if want.any():
            m["rewards/desirable"] = float(reward[want].mean())
        if (~want).any():
            m["rewards/undesirable"] = float(reward[~want].mean())
        return {f"{prefix}{k}": v for k, v in m.items()}

    def __call__(self, indices: list[int]) -> dict:
        return {**self._metrics(*self._run(indices, train=True)), "pairs": len(indices)}

    def evaluate(self) -> dict:
        return self._metrics(*no_grad_eval(self.model, lambda: self._run(list(range(len(self.items))), train=False)),
                             prefix="eval/")


# ---------------------------------------------------------------- run


def run(cfg: DPOConfig, resume: bool = False) -> Path:
    """`posttrain dpo`: offline on `data`, or online (recipes/dpo_online.py) when `online` is set."""
    if cfg.online is not None:
        return run_online(cfg, resume=resume)
    out_dir = Path(cfg.out_dir)
    s = start(cfg)
    device, dtype, tokenizer, pad_id = s.device, s.dtype, s.tokenizer, s.pad_id
    kto = cfg.algo.loss == "kto"
    split = prepare_pairs(cfg.data, tokenizer, unpaired=kto)  # bad data fails before any model loads

    def refs(data):
        if cfg.algo.reference_free or not data:
            return None
        items = example_items(data) if kto else pair_items(data)
        return reference_logps(cfg, tokenizer, items, device, pad_id, paired=not kto)

    ref_train, ref_eval = refs(split.train), refs(split.eval)
    kl_train = reference_logps(cfg, tokenizer, example_items(split.train, True), device, pad_id) if kto else None
    kl_eval = (reference_logps(cfg, tokenizer, example_items(split.eval, True), device, pad_id)
               if kto and split.eval else None)

    model = trainable(load_model(cfg.model.path, dtype="float32", device=device), cfg.model)
    if kto:
        step_fn = KTOStep(cfg, model, split.train, ref_train, kl_train, device, dtype, pad_id)
        eval_step = KTOStep(cfg, model, split.eval, ref_eval, kl_eval, device, dtype, pad_id) if split.eval else None
    else:
        step_fn = PairStep(cfg, model, split.train, ref_train, device, dtype, pad_id)
        eval_step = PairStep(cfg, model, split.eval, ref_eval, device, dtype, pad_id) if split.eval else None
    alert = BothFallAlert(cfg.alert_both_fall)
    return run_loop(cfg, model, tokenizer, split, step_fn, eval_step.evaluate if eval_step else dict, name="dpo",
                    export=lambda: export_final(model, tokenizer, out_dir, dtype), resume=resume, on_metrics=alert)
