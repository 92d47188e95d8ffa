"""Config of `posttrain run` (a pipeline of stages, each with its own section) and of
`posttrain base` (the embedded tiny base model). On top of the other config modules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from posttrain.config.base import Strict
from posttrain.config.common import LoggingConfig
from posttrain.config.eval import PipelineEvalConfig
from posttrain.config.pref import DPOConfig, RMConfig
from posttrain.config.rl import RLConfig
from posttrain.config.sft import SFTConfig


class BaseConfig(Strict):
    """The embedded default base: a tiny HF model pretrained on procedural text."""

    out_dir: str = "runs/base"
    cache_dir: str = ".cache/posttrain/base"  # a finished base is reused when its config matches
    family: Literal["llama", "qwen2"] = "qwen2"
    hidden_size: int = Field(128, gt=0)  # ~0.9M params: ~27k tokens/s on 2 cores (bf16), ~1000 steps in 150 s
    num_layers: int = Field(4, gt=0)
    num_heads: int = Field(4, gt=0)
    num_kv_heads: int = Field(2, gt=0)
    intermediate_size: int = Field(384, gt=0)
    vocab_size: int = Field(1024, ge=300)  # BPE vocabulary trained on the corpus
    max_position_embeddings: int = Field(1024, gt=0)
    domains: list[str] = ["basic_arithmetic", "chain_sum"]
    corpus_examples: int = Field(20000, gt=0)
    wrong_fraction: float = Field(0.3, ge=0.0, le=1.0)  # share of worked answers that are wrong
    seq_len: int = Field(256, gt=0)
    batch_size: int = Field(16, gt=0)
    lr: float = Field(2e-3, gt=0)
    max_steps: int = Field(1000, gt=0)
    max_seconds: float = Field(180.0, gt=0)  # pretraining stops at whichever comes first
    seed: int = 0
    # per-domain reasoning-gym options for part of the corpus (e.g. {"chain_sum": {"max_terms": 3}}):
    # corpus_easy_fraction of the documents use them, the rest the datasets' defaults
    # (options for domains not in `domains` are unused)
    corpus_options: dict[str, dict[str, Any]] = {
        "basic_arithmetic": {"max_terms": 3, "max_digits": 2},
        "chain_sum": {"max_terms": 3, "max_digits": 2},
    }
    corpus_easy_fraction: float = Field(0.8, ge=0.0, le=1.0)
    split_digits: bool = True  # tokenize numbers digit by digit (helps arithmetic)
    # matmuls in bf16 autocast (weights stay fp32); auto: bf16 where the CPU has native bf16 (avx512_bf16/amx)
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    probe_tasks: int = Field(32, ge=0)  # held-out tasks per domain for the raw-text accuracy probe
    logging: LoggingConfig = LoggingConfig()


class PipelineConfig(Strict):
    """`posttrain run`: stages in order, each with its own section."""

    run_dir: str = "runs/quickstart"
    stages: list[Literal["base", "sft", "rm", "dpo", "rl", "eval", "report"]] = ["base", "sft", "eval", "report"]
    base: BaseConfig = BaseConfig()
    sft: SFTConfig = SFTConfig()
    rm: RMConfig = RMConfig()
    dpo: DPOConfig = DPOConfig()
    rl: RLConfig = RLConfig()
    eval: PipelineEvalConfig = PipelineEvalConfig()  # suites x models side by side, gates (config/eval.py)
    # reasoning-gym options per domain, handed to every stage that does not set its own
    # (SFT data, evals), so training and eval draw from the same task distribution
    task_options: dict[str, dict[str, Any]] = {}
