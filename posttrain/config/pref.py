"""Configs of the preference stages: `posttrain rm` (RMConfig) and `posttrain dpo` (DPOConfig).

    cfg = load_config(DPOConfig, None, ["model.path=runs/sft/final", "data.train=pairs.jsonl"])

Data is given the way `sft` takes it: a JSONL file, `hf:DIR[:SPLIT]` (a dataset saved with
`save_to_disk`), or `pref:KIND[,KIND...]:N` for the built-in synthetic preferences with a known
ground truth (posttrain/tasks/preferences.py). Records are TRL's preference formats:
prompt/chosen/rejected as text or message lists, the implicit prompt (two conversations sharing
a prefix), or unpaired prompt/completion/label for KTO (posttrain/train/pairs.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from posttrain.config.base import Strict
from posttrain.config.common import DomainConfig, LoggingConfig, ModelConfig, OptimConfig


class PrefDataConfig(Strict):
    # JSONL | hf:DIR[:SPLIT] | pref:KIND[,KIND...]:N (correct_vs_wrong, concise_vs_rambling,
    # polite_vs_curt, gym_DOMAIN: a reasoning-gym domain's correct vs wrong worked answers)
    train: str = "pref:correct_vs_wrong:2000"
    eval: str | None = None  # same forms; None holds out eval_fraction of train
    eval_fraction: float = Field(0.05, ge=0.0, lt=1.0)
    max_prompt_len: int = Field(512, gt=0)  # longer prompts are bad lines
    max_len: int = Field(1024, gt=0)  # prompt + completion; longer pairs are bad lines
    skip_bad_lines: bool = False  # count and report bad lines instead of failing at the first
    seed: int = 0  # seed of pref: data (the held-out set uses seed + 1_000_000) and of the split
    # reasoning-gym options per domain for pref:gym_DOMAIN data, e.g. {"chain_sum": {"max_terms": 3}}
    task_options: dict[str, dict[str, Any]] = {}

    @model_validator(mode="after")
    def _lengths(self) -> "PrefDataConfig":
        if self.max_prompt_len >= self.max_len:
            raise ValueError(f"max_prompt_len ({self.max_prompt_len}) must be below max_len ({self.max_len})")
        return self


class PrefTrainConfig(Strict):
    epochs: int = Field(1, gt=0)
    max_steps: int | None = Field(None, gt=0)  # None: epochs over the data
    pairs_per_step: int = Field(16, gt=0)  # preference pairs (KTO: examples) per optimizer step
    max_tokens_per_microbatch: int = Field(4096, gt=0)  # one forward/backward takes at most this many tokens
    packing: bool = True  # False: one sequence per row (the unpacked reference computation)
    seed: int = 0
    eval_every: int = Field(50, gt=0)
    save_every: int = Field(50, gt=0)
    keep_last: int = Field(2, gt=0)
    log_every: int = Field(1, gt=0)


class RMConfig(Strict):
    """`posttrain rm`: a Bradley-Terry reward model, a scalar head on a causal LM."""

    out_dir: str = "runs/rm"
    model: ModelConfig = ModelConfig(path="runs/sft/final")
    data: PrefDataConfig = PrefDataConfig()
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=5)
    train: PrefTrainConfig = PrefTrainConfig()
    use_margin: bool = True  # subtract a record's "margin" column from the reward difference
    center_coef: float = Field(0.0, ge=0)  # reward centering: + coef x (r_chosen + r_rejected)^2
    logging: LoggingConfig = LoggingConfig()


class PrefAlgoConfig(Strict):
    """The preference loss (posttrain/algos/preference.py)."""

    # sigmoid = DPO | ipo | hinge (SLiC) | robust (rDPO) | simpo, orpo (reference-free) | kto (unpaired data)
    loss: Literal["sigmoid", "ipo", "hinge", "robust", "simpo", "orpo", "kto"] = "sigmoid"
    beta: float = Field(0.1, gt=0)  # simpo: 2.0 is usual
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)  # cDPO (sigmoid) / rDPO (robust): assumed label noise
    simpo_gamma: float = Field(0.5, ge=0)  # SimPO's target reward margin
    orpo_lambda: float = Field(0.1, gt=0)  # ORPO's weight of the odds-ratio term
    # RPO: + coef x the chosen answer's mean token NLL, which keeps DPO from lowering the chosen
    # answer's likelihood along with the rejected one's (the "both fall" failure; docs/LOG.md)
    sft_coef: float = Field(0.0, ge=0)
    kto_desirable_weight: float = Field(1.0, gt=0)
    kto_undesirable_weight: float = Field(1.0, gt=0)

    @property
    def reference_free(self) -> bool:
        return self.loss in ("simpo", "orpo")


class OnlineConfig(Strict):
    """Online / iterative DPO: each round the current policy samples `samples_per_prompt`
    completions per prompt from `tasks`, the domain's verifiers (a `reward_model` verifier
    included) rank them, the best and the worst (scores differing) become a pair, and the policy
    at the start of the round is the reference for that round's pairs."""

    tasks: list[DomainConfig] = [DomainConfig(name="chain_sum", options={"max_terms": 3, "max_digits": 2})]
    rounds: int = Field(4, gt=0)
    prompts_per_round: int = Field(32, gt=0)
    samples_per_prompt: int = Field(4, ge=2)
    max_tokens: int = Field(64, gt=0)
    temperature: float = Field(1.0, gt=0)
    steps_per_round: int = Field(4, gt=0)  # optimizer steps on each round's pairs
    task_seed: int = 700_000


class DPOConfig(Strict):
    """`posttrain dpo`: direct preference optimisation and its family, offline or online."""

    out_dir: str = "runs/dpo"
    model: ModelConfig = ModelConfig(path="runs/sft/final")
    data: PrefDataConfig = PrefDataConfig()
    algo: PrefAlgoConfig = PrefAlgoConfig()
    optim: OptimConfig = OptimConfig(lr=5e-6, warmup_steps=5)
    train: PrefTrainConfig = PrefTrainConfig()
    # reference logprobs are computed once, before training, and cached here by a hash of
    # (model, tokenizer, data, loss): no reference model stays in memory
    reference_cache: str = ".cache/posttrain/reference"
    online: OnlineConfig | None = None  # set: online / iterative DPO instead of the offline data
    # both the chosen and the rejected logprobs falling this much (nats, mean over the last
    # log_every steps, vs step 0) raises the "both fall" alert: the margin grows by pushing both down
    alert_both_fall: float = Field(5.0, gt=0)
    logging: LoggingConfig = LoggingConfig()
