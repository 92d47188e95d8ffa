"""Config sections shared by several commands: the model (and its LoRA), logging, the optimizer,
and one domain of a task mixture (RL's `tasks`, online DPO's `online.tasks`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from posttrain.config.base import Strict
from posttrain.config.sched import CurriculumConfig


class LoraConfig(Strict):
    r: int = Field(8, gt=0)
    alpha: int = Field(16, gt=0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]


class ModelConfig(Strict):
    path: str = "runs/base/model"  # any HF causal LM directory (or hub id where downloads work)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: fp32 on CPU, bf16 on GPU
    lora: LoraConfig | None = None
    gradient_checkpointing: bool = False


class LoggingConfig(Strict):
    tensorboard: bool = True
    wandb: bool = False  # used only when the wandb package is installed
    wandb_project: str = "posttrain"
    progress: bool = True


class OptimConfig(Strict):
    lr: float = Field(3e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = Field(10, ge=0)
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    grad_clip: float = Field(1.0, gt=0)


class DomainConfig(Strict):
    """One domain of the task mixture: a reasoning-gym dataset by name, or a JSONL task file."""

    name: str  # reasoning-gym dataset name, or any label for a JSONL source
    weight: float = Field(1.0, ge=0)  # share of each step's prompts (normalised over the mixture; 0: off)
    quota: int | None = Field(None, gt=0)  # groups of a step at most (None: no cap)
    curriculum: CurriculumConfig | None = None  # difficulty levels moved by pass rate (config/sched.py)
    path: str | None = None  # JSONL tasks ({"prompt", "answer", "verifier"} per line); None: reasoning-gym
    options: dict[str, Any] = {}  # reasoning-gym dataset config, e.g. {"max_terms": 3}
    eval_tasks: int = Field(64, ge=0)  # held-out tasks for the in-loop eval (reasoning-gym: eval seeds)
    # reasoning-gym: eval items (from the eval seeds) whose questions training never sees; None: 1000
    # (fewer for slow domains). Lower it for a small question space, to at least the eval items you score.
    holdout: int | None = Field(None, gt=0)
    # verifiers to score this domain with, replacing the ones its tasks name (e.g. [numeric] for
    # exact-number rewards where reasoning-gym's own scorer gives partial credit to wrong answers)
    verifiers: list[str] | None = None
    verifier_options: dict[str, dict[str, Any]] = {}  # per verifier, e.g. {"code": {"score": "fraction"}}
    # how several verifiers' scores become the task score: mean | all | any | majority | weights
    combine: Literal["mean", "all", "any", "majority", "weights"] = "mean"
    verifier_weights: dict[str, float] | None = None  # for combine: weights
    # per-verifier pass thresholds (value >= t passes; others 0.5): inline {name: t}, or the path of
    # the file `posttrain verify calibrate` writes. Both are checked when the task mixture is built
    # (tasks/mixture.py), which puts a file's values here, so the saved config holds the thresholds
    # the run used.
    verifier_thresholds: dict[str, Any] | str | None = None
