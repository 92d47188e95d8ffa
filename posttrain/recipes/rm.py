"""Bradley-Terry reward models, written out.

    final_dir = run(cfg)                # cfg: RMConfig; returns cfg.out_dir/final
    final_dir = run(cfg, resume=True)

1. load the preference data (train/pairs.py, as `posttrain dpo` takes it) and hold out the eval pairs;
2. the reward model: the causal LM's body with a scalar head, in the HF sequence-classification
   layout (`AutoModelForSequenceClassification.from_pretrained(final_dir)` loads it);
3. each step scores the chosen and rejected sequences of `train.pairs_per_step` pairs (packed, a
   pair's shared prompt computed once where the attention allows it, the reward read at each
   sequence's last token, train/reward_model.py) and
   minimises -log sigmoid(r_chosen - r_rejected - margin) (+ optional reward centering), the
   margin being a record's `margin` column when `use_margin`;
4. metrics: loss, accuracy (r_chosen > r_rejected), mean margin, mean rewards; the same on the
   held-out pairs as eval/...;
5. out_dir/final: the reward model, its tokenizer and `reward_stats.json` (mean and std of the
   rewards of every held-out sequence, else of the training ones): what the `reward_model`
   verifier normalises scores with (value = sigmoid((r - mean) / std)).
"""

from __future__ import annotations

from pathlib import Path

import torch

from posttrain.algos.preference import bradley_terry_loss, pair_metrics
from posttrain.config.pref import RMConfig
from posttrain.recipes.pref_loop import no_grad_eval, prepare_pairs, run_loop, start, trainable
from posttrain.recipes.sft import autocast
from posttrain.train.pair_forward import token_chunks
from posttrain.core.hf import RewardStats
from posttrain.train.reward_model import reward_model_from_causal_lm, save_reward_model, sequence_rewards


def pair_sequences(pairs) -> list[list[int]]:
    """[prompt + chosen, prompt + rejected, ...] per pair, in order."""
    return [list(p.prompt_ids) + list(c) for p in pairs for c in (p.chosen_ids, p.rejected_ids)]


class RMStep:
    def __init__(self, cfg: RMConfig, model, pairs, device, dtype, pad_id: int):
        self.cfg, self.model, self.pairs, self.device, self.dtype, self.pad_id = cfg, model, pairs, device, dtype, pad_id

    def rewards(self, indices: list[int], train: bool):
        """(chosen, rejected, loss) for `indices`, chunked by token budget; backward when training."""
        t = self.cfg.train
        lengths = [2 * len(self.pairs[i].prompt_ids) + len(self.pairs[i].chosen_ids) + len(self.pairs[i].rejected_ids)
                   for i in indices]
        parts = []
        for chunk in token_chunks(lengths, t.max_tokens_per_microbatch):
            pairs = [self.pairs[indices[k]] for k in chunk]
            with autocast(self.device, self.dtype):
                r = sequence_rewards(self.model, pair_sequences(pairs), max_tokens_per_microbatch=t.max_tokens_per_microbatch,
                                     pad_id=self.pad_id).float().cpu()
            margin = None
            if self.cfg.use_margin and any(p.margin is not None for p in pairs):
                margin = torch.tensor([p.margin or 0.0 for p in pairs], dtype=torch.float32)
            out = bradley_terry_loss(r[0::2], r[1::2], margin=margin, center_coef=self.cfg.center_coef)
            if train:
                (out.loss.sum() / len(indices)).backward()
            parts.append((out.loss.detach(), r[0::2].detach(), r[1::2].detach()))
        return [torch.cat([p[k] for p in parts]) for k in range(3)]

    @staticmethod
    def metrics(loss, chosen, rejected, prefix: str = "") -> dict[str, float]:
        from posttrain.algos.preference import PrefLoss

        m = {"loss": float(loss.mean()), **pair_metrics(PrefLoss(loss, chosen, rejected))}
        return {f"{prefix}{k}": v for k, v in m.items()}

    def __call__(self, indices: list[int]) -> dict:
        loss, chosen, rejected = self.rewards(indices, train=True)
        return {**self.metrics(loss, chosen, rejected), "pairs": len(indices)}

    def evaluate(self) -> dict:
        loss, chosen, rejected = no_grad_eval(self.model, lambda: self.rewards(list(range(len(self.pairs))), False))
        return self.metrics(loss, chosen, rejected, "eval/")

    def stats(self) -> RewardStats:
        """Mean and std of the rewards of every sequence of these pairs."""
        _, chosen, rejected = no_grad_eval(self.model, lambda: self.rewards(list(range(len(self.pairs))), False))
        r = torch.cat([chosen, rejected]).double()
        return RewardStats(mean=float(r.mean()), std=float(r.std(unbiased=False)), n=int(r.numel()))


def run(cfg: RMConfig, resume: bool = False) -> Path:
    out_dir = Path(cfg.out_dir)
    s = start(cfg)
    device, dtype, tokenizer, pad_id = s.device, s.dtype, s.tokenizer, s.pad_id
    split = prepare_pairs(cfg.data, tokenizer)
    model = reward_model_from_causal_lm(cfg.model.path, dtype="float32", device=device, seed=cfg.train.seed)
    model = trainable(model, cfg.model, modules_to_save=["score"])
    step_fn = RMStep(cfg, model, split.train, device, dtype, pad_id)
    eval_step = RMStep(cfg, model, split.eval, device, dtype, pad_id) if split.eval else None

    def export() -> Path:
        from posttrain.train.lora import merge_lora

        stats = (eval_step or step_fn).stats()
        return save_reward_model(merge_lora(model), tokenizer, out_dir / "final", stats, dtype=dtype)

    return run_loop(cfg, model, tokenizer, split, step_fn, eval_step.evaluate if eval_step else dict, name="rm",
                    export=export, resume=resume)
