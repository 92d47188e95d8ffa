"""Config of `posttrain sft`: supervised fine-tuning on chat data, with sequence packing."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from posttrain.config.base import Strict
from posttrain.config.common import LoggingConfig, ModelConfig, OptimConfig
from posttrain.config.eval import EvalSection


class DataConfig(Strict):
    # A JSONL file of {"messages": [...]}, "hf:NAME[:SPLIT]" for HF datasets,
    # "gym:DOMAIN[,DOMAIN...]:N" for N reasoning-gym examples with worked answers, or
    # "tasks:NAME[,NAME...]:N" for gold demonstrations of registered task sources (e.g. BFCL's), or
    # "episodes:NAME[,NAME...]:N" for oracle episodes (generated domains' oracles: sql, document, cad;
    # sources' gold demos: BFCL) played through RL's episode loop, trained on the policy's tokens only
    # (tasks/episode_sft.py; training tasks only, full-marks episodes only).
    train: str = "gym:basic_arithmetic,chain_sum:4000"
    eval: str | None = None  # same forms; None holds out eval_fraction of train
    eval_fraction: float = Field(0.02, ge=0.0, lt=1.0)
    max_seq_len: int = Field(512, gt=0)  # longer examples are truncated
    skip_bad_lines: bool = False  # count and report bad lines instead of failing
    # options per domain for gym: and tasks: sources, e.g. {"chain_sum": {"max_terms": 3}} or
    # {"bfcl_simple_python": {"split": "train"}}
    task_options: dict[str, dict[str, Any]] = {}
    # how episodes: writes the oracle's tool calls, as rollout.tool_parser in RL (auto: the chat template's)
    tool_parser: Literal["auto", "hermes", "llama3_json", "pythonic"] = "auto"
    seed: int = 0


class TrainConfig(Strict):
    epochs: int = Field(1, gt=0)
    max_steps: int | None = Field(None, gt=0)  # None: epochs over the data
    packing: bool = True
    row_tokens: int = Field(512, gt=0)  # length of one packed row
    max_tokens_per_microbatch: int = Field(4096, gt=0)
    microbatches_per_step: int = Field(1, gt=0)  # gradient accumulation
    seed: int = 0
    eval_every: int = Field(50, gt=0)
    save_every: int = Field(50, gt=0)
    keep_last: int = Field(2, gt=0)
    log_every: int = Field(1, gt=0)

    @model_validator(mode="after")
    def _row_fits(self) -> "TrainConfig":
        if self.row_tokens > self.max_tokens_per_microbatch:
            raise ValueError(
                f"row_tokens ({self.row_tokens}) must be <= max_tokens_per_microbatch "
                f"({self.max_tokens_per_microbatch})"
            )
        return self


class SFTConfig(Strict):
    out_dir: str = "runs/sft"
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalSection = EvalSection()  # suites evaluated at step 0 and every train.eval_every; gates
    logging: LoggingConfig = LoggingConfig()
