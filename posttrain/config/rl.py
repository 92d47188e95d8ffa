"""Typed config tree: one pydantic model per stage, loaded from YAML with dotted overrides.

    cfg = load_config(SFTConfig, "configs/x.yaml", ["train.lr=1e-4", "model.path=/models/m"])

Unknown keys and wrong types are rejected with `ConfigError`, whose message is one line
naming the key and what was expected. `save_config` writes the resolved tree into a run
directory so that every run and checkpoint carries the exact config it ran with.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from posttrain.config.cluster import ClusterConfig
from posttrain.config.eval import EvalConfig, EvalSection, PipelineEvalConfig, Strict
from posttrain.config.sched import CurriculumConfig, SchedulerConfig
from posttrain.core.errors import ConfigError
from posttrain.core.fsio import write_text_atomic


# ---------------------------------------------------------------- shared sections


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


# ---------------------------------------------------------------- base (embedded tiny model)


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


# ---------------------------------------------------------------- SFT


class DataConfig(Strict):
    # A JSONL file of {"messages": [...]}, "hf:NAME[:SPLIT]" for HF datasets,
    # "gym:DOMAIN[,DOMAIN...]:N" for N reasoning-gym examples with worked answers, or
    # "tasks:NAME[,NAME...]:N" for gold demonstrations of registered task sources (e.g. BFCL's).
    train: str = "gym:basic_arithmetic,chain_sum:4000"
    eval: str | None = None  # same forms; None holds out eval_fraction of train
    eval_fraction: float = Field(0.02, ge=0.0, lt=1.0)
    max_seq_len: int = Field(512, gt=0)  # longer examples are truncated
    skip_bad_lines: bool = False  # count and report bad lines instead of failing
    # options per domain for gym: and tasks: sources, e.g. {"chain_sum": {"max_terms": 3}} or
    # {"bfcl_simple_python": {"split": "train"}}
    task_options: dict[str, dict[str, Any]] = {}
    seed: int = 0


class OptimConfig(Strict):
    lr: float = Field(3e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = Field(10, ge=0)
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    grad_clip: float = Field(1.0, gt=0)


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


# ---------------------------------------------------------------- eval


# EvalConfig, the suites and gates: posttrain/config/eval.py


# ---------------------------------------------------------------- RL


class DomainConfig(Strict):
    """One domain of the task mixture: a reasoning-gym dataset by name, or a JSONL task file."""

    name: str  # reasoning-gym dataset name, or any label for a JSONL source
    weight: float = Field(1.0, ge=0)  # share of each step's prompts (normalised over the mixture; 0: off)
    quota: int | None = Field(None, gt=0)  # groups of a step at most (None: no cap)
    curriculum: CurriculumConfig | None = None  # difficulty levels moved by pass rate (config_sched.py)
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
    # the file `posttrain verify calibrate` writes. A path is read and checked here, when the config
    # is loaded, and replaced by its values, so the saved config holds the thresholds the run used.
    verifier_thresholds: dict[str, float] | str | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolve_thresholds(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("verifier_thresholds") is not None:
            from posttrain.verifiers.calibrate import resolve_thresholds

            try:
                resolved = resolve_thresholds(data["verifier_thresholds"])
            except ConfigError as e:
                raise ValueError(f"verifier_thresholds: {e}") from None
            data = {**data, "verifier_thresholds": resolved}
        return data


class TemperatureConfig(Strict):
    schedule: Literal["linear", "cosine", "constant"] = "linear"
    start: float = Field(1.0, gt=0)  # 0.8-1.0 favours exploration
    end: float = Field(0.3, gt=0)  # 0.2-0.4 favours stability
    steps_per_epoch: int | None = Field(None, gt=0)  # None: the run is one epoch per 10% of its steps


class RolloutConfig(Strict):
    engine: Literal["hf", "paged", "remote", "vllm"] = "paged"  # posttrain/engine/registry.py ENGINES
    engine_options: dict[str, Any] = {}  # passed to the engine, e.g. {kv_dtype: int8} or {base_url: ...}
    # the paged engine's matmul weights (rollout/paged/quant.py): exact (default: kill -9 resume
    # replays bit for bit) | auto = bf16 or int8 on a CPU for models of >= 20M weights (4.7x HF
    # generate at 135M; a resumed run is not bit-identical, docs/LOG.md) | bf16 | int8;
    # trajectories sampled with inexact weights get TIS
    weights: Literal["auto", "exact", "bf16", "int8"] = "exact"
    prompts_per_step: int = Field(16, gt=0)
    samples_per_prompt: int = Field(8, gt=0)  # group size
    max_tokens: int = Field(128, gt=0)  # completion tokens per sample
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # 0: off
    temperature: TemperatureConfig = TemperatureConfig()
    max_batch_sequences: int = Field(256, gt=0)  # sequences decoded together
    # multi-turn episodes (envs/): the model's tool-call parser (auto: from its chat template),
    # what a chat template that fails the bridge self-check gets (envs/template.py), episodes in flight
    tool_parser: Literal["auto", "hermes", "llama3_json", "pythonic"] = "auto"
    template_check: Literal["refuse", "keep_history", "off"] = "refuse"
    max_concurrent_episodes: int = Field(256, gt=0)

    @model_validator(mode="after")
    def _weights_need_paged(self) -> "RolloutConfig":
        if self.weights in ("bf16", "int8") and self.engine != "paged":
            raise ValueError(f"rollout.weights={self.weights} needs rollout.engine=paged (got {self.engine}); "
                             f"other engines take their precision from model.dtype")
        return self


class AlgoConfig(Strict):
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"] = "grpo"
    policy_loss: Literal["ppo_clip"] = "ppo_clip"
    clip_low: float = Field(0.2, ge=0)
    clip_high: float = Field(0.28, ge=0)  # clip-higher (DAPO)
    dual_clip: float | None = Field(3.0, gt=1)  # None: off
    aggregation: Literal["token_mean", "seq_mean", "seq_sum_norm"] = "token_mean"
    kl_coef: float = Field(0.0, ge=0)  # 0: no reference model is loaded at all
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_in: Literal["loss", "reward"] = "loss"
    entropy_coef: float = Field(0.0, ge=0)
    # old logprobs: the sampler's (default), or recomputed by the trainer before the update
    # (every trajectory then gets the TIS weight below)
    recompute_old_logprobs: bool = False
    # truncated importance sampling: weight min(exp(trainer - sampler), tis_cap) for the sampler/
    # trainer gap, applied by default to fresh trajectories sampled with inexact rollout weights
    # (bf16/int8: in the loss at updates_per_step 1, recomputed old logprobs otherwise) and to all
    # when recompute_old_logprobs; None: off (the gap is still measured as mismatch/*)
    tis_cap: float | None = Field(2.0, gt=0)
    # how off-policy tokens (inexact sampler weights; older versions in asynchronous RL) are corrected
    # (algos/off_policy.py): tis = min(rho, tis_cap) | decoupled = rho (PPO's clip against the trainer's
    # policy is the trust region) | seq_mask / geo_mask = leave out sequences whose product / geometric
    # mean of rho lies outside [off_policy_low, off_policy_high] | none = PPO against the sampler alone
    off_policy: Literal["tis", "decoupled", "seq_mask", "geo_mask", "none"] = "tis"
    off_policy_low: float = Field(0.5, gt=0, le=1)
    off_policy_high: float = Field(2.0, ge=1)


class DynamicSamplingConfig(Strict):
    enabled: bool = True  # drop groups whose raw scores all agree, backfill with fresh ones
    max_attempts: int = Field(3, ge=1)  # rollout rounds per step, the first included


class BufferConfig(Strict):
    enabled: bool = True
    # share of each step's trained trajectories that are replayed stored successes (buffer.py: why <= 0.5)
    replay_ratio: float = Field(0.3, ge=0, le=0.5)
    capacity: int = Field(4096, gt=0)
    per_domain_quota: int | None = Field(None, gt=0)
    min_score: float = Field(1.0, ge=0, le=1)  # raw score that counts as a success
    # a saved buffer (a checkpoint's replay/ directory) to start from: its successes are replayed
    # while this run trains on other domains (benchmarks/replay_forgetting.py)
    load_from: str | None = None


class RewardConfig(Strict):
    format_pattern: str | None = None  # regex the completion should match (e.g. "Answer:")
    format_weight: float = 0.0  # added when it matches
    overlong_buffer: int = Field(0, ge=0)  # soft overlong penalty over the last N tokens of max_tokens (DAPO)
    overlong_penalty: float = Field(1.0, ge=0)
    length_target: int | None = Field(None, gt=0)  # penalise tokens beyond this ...
    length_weight: float = Field(0.0, ge=0)  # ... by weight x excess / target
    verify_workers: int | None = Field(None, gt=0)  # threads verifying a step's samples (default 2 per core)
    # the `code` verifier's sandbox: None = bubblewrap on this host; else a SandboxFusion-compatible
    # endpoint (`posttrain sandbox serve` or SandboxFusion), retried on infrastructure faults with
    # exponential backoff; when it stays unreachable the samples are left unscored and reported
    sandbox_url: str | None = None
    sandbox_retries: int = Field(3, ge=0)
    sandbox_backoff_s: float = Field(0.5, ge=0)


class MonitorConfig(Strict):
    """Reward-hacking and verifier-disagreement alarms (posttrain/verifiers/monitors.py, ensemble.py)."""

    gap_widen: float = Field(0.15, ge=0)  # train pass rate - held-out pass@1 may widen this much
    surge_factor: float = Field(3.0, gt=0)  # violations above this x their recent mean ...
    surge_min: int = Field(5, ge=0)  # ... and above this count raise an alert
    disagreement_rate: float = Field(0.2, ge=0, le=1)  # verifiers disagreeing on more than this warns
    disagreement_min: int = Field(20, gt=0)  # trajectories judged by >= 2 verifiers needed first
    rollout_log: bool = True  # write RUN_DIR/rollouts/step_NNNNNN.jsonl (spot checks read them)


class RLTrainConfig(Strict):
    steps: int = Field(100, gt=0)
    updates_per_step: int = Field(1, gt=0)  # optimizer updates per rollout batch (mini-batches)
    max_tokens_per_microbatch: int = Field(8192, gt=0)
    seed: int = 0
    task_seed: int = 500_000  # training tasks come from reasoning-gym seeds from here (below eval's)
    save_every: int = Field(25, gt=0)
    keep_last: int = Field(2, gt=0)
    eval_every: int = Field(25, gt=0)  # held-out greedy pass@1 per domain (and at the first and last step)
    max_bad_steps: int = Field(3, gt=0)  # non-finite losses in a row that stop the run
    max_seconds: float | None = Field(None, gt=0)  # stop (and save) at the first step past this
    # torch intra-op threads: None = torch's default; "auto" = whichever of (default, 1) measures faster,
    # re-checked every 50 steps (two threads are 1.6x faster on an idle 2-core machine for the quickstart
    # model, and 10-40x slower when another job holds a core)
    threads: int | Literal["auto"] | None = None


class RLConfig(Strict):
    out_dir: str = "runs/rl"
    model: ModelConfig = ModelConfig(path="runs/sft/final")
    tasks: list[DomainConfig] = [DomainConfig(name="basic_arithmetic"), DomainConfig(name="chain_sum")]
    rollout: RolloutConfig = RolloutConfig()
    algo: AlgoConfig = AlgoConfig()
    dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig()
    scheduler: SchedulerConfig = SchedulerConfig()  # work items, lanes, value, tail (posttrain/rl/)
    buffer: BufferConfig = BufferConfig()
    reward: RewardConfig = RewardConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5, warmup_steps=0, schedule="constant")
    train: RLTrainConfig = RLTrainConfig()
    monitor: MonitorConfig = MonitorConfig()
    eval: EvalSection = EvalSection()  # suites evaluated at step 0 and every train.eval_every; gates
    cluster: ClusterConfig = ClusterConfig()  # scale-out: ray workers, ddp / fsdp2, weight sync (config_cluster.py)
    logging: LoggingConfig = LoggingConfig()

    @model_validator(mode="after")
    def _check(self) -> "RLConfig":
        if not self.tasks:
            raise ValueError("tasks: the mixture is empty; name at least one domain")
        for d in self.tasks:
            if d.combine == "weights" and not d.verifier_weights:
                raise ValueError(f"tasks: domain {d.name!r} combines by weights but sets no verifier_weights")
        if not any(d.weight > 0 for d in self.tasks):
            raise ValueError("tasks: every domain has weight 0; give at least one a positive weight")
        want = self.rollout.prompts_per_step
        for d in self.tasks:
            if d.quota is not None and d.quota > want:
                raise ValueError(f"tasks: domain {d.name!r} has quota={d.quota} above the step's "
                                 f"rollout.prompts_per_step={want}")
        if all(d.quota is not None or d.weight == 0 for d in self.tasks):
            room = sum(d.quota for d in self.tasks if d.weight > 0 and d.quota is not None)
            if room < want:
                raise ValueError(f"tasks: the quotas allow {room} groups a step, fewer than "
                                 f"rollout.prompts_per_step={want}")
        ws = self.cluster.world_size
        if want % ws:
            raise ValueError(f"cluster.world_size={ws} does not divide rollout.prompts_per_step={want}: "
                             f"each trainer rank takes whole groups")
        names = [d.name for d in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks: domain {dup[0]!r} appears more than once")
        if self.rollout.samples_per_prompt < 2 and self.algo.advantage != "reinforce_pp":
            raise ValueError(
                f"rollout.samples_per_prompt=1 with the group-relative estimator {self.algo.advantage!r}: "
                "use a group of at least 2 or algo.advantage=reinforce_pp"
            )
        return self


# ---------------------------------------------------------------- pipeline


class PipelineConfig(Strict):
    """`posttrain run`: stages in order, each with its own section."""

    run_dir: str = "runs/quickstart"
    stages: list[Literal["base", "sft", "rm", "dpo", "rl", "eval", "report"]] = ["base", "sft", "eval", "report"]
    base: BaseConfig = BaseConfig()
    sft: SFTConfig = SFTConfig()
    # the preference stages' sections (config_pref.py builds on the sections above; it resolves
    # these two forward references when it is imported, which the end of this module does)
    rm: "RMConfig" = Field(default_factory=lambda: _pref.RMConfig())
    dpo: "DPOConfig" = Field(default_factory=lambda: _pref.DPOConfig())
    rl: RLConfig = RLConfig()
    eval: PipelineEvalConfig = PipelineEvalConfig()  # suites x models side by side, gates (config_eval.py)
    # reasoning-gym options per domain, handed to every stage that does not set its own
    # (SFT data, evals), so training and eval draw from the same task distribution
    task_options: dict[str, dict[str, Any]] = {}


# ---------------------------------------------------------------- loading

C = TypeVar("C", bound=BaseModel)


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _scalar(raw: str) -> Any:
    """A YAML scalar, except that 1e-4 is a float (YAML 1.1 reads it as a string)."""
    if _FLOAT.match(raw.strip()):
        number = float(raw)
        return int(raw) if re.fullmatch(r"[+-]?\d+", raw.strip()) else number
    try:
        return yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        return raw


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """["a.b=1", "c=x"] -> {"a": {"b": 1}, "c": "x"}; values are parsed as YAML scalars."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r}: expected KEY=VALUE with a dotted key, e.g. train.lr=1e-4")
        value = _scalar(raw)
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} was already given a value")
            node = child
        node[parts[-1]] = value
    return tree


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{p}:{where}: malformed YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of config keys at the top, got {type(data).__name__}")
    return data


def _describe(error: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "<root>"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {key!r}"
    if kind == "missing":
        return f"missing required key {key!r}"
    if kind == "value_error":  # a model validator's own message says what is wrong
        message = error["msg"].removeprefix("Value error, ")
        return message if key == "<root>" else f"{key}: {message}"
    got = error.get("input")
    shown = repr(got) if not isinstance(got, dict) else "a mapping"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{key}: {error['msg'].rstrip('.')} (got {shown})"


def validate(model: type[C], data: dict[str, Any], source: str = "config") -> C:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        first = _describe(errors[0])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}") from None


def load_config(model: type[C], path: str | os.PathLike | None, overrides: list[str] | None = None) -> C:
    data = read_yaml(path) if path is not None else {}
    data = deep_merge(data, parse_overrides(overrides or []))
    return validate(model, data, source=str(path) if path is not None else "config")


def config_text(cfg: BaseModel) -> str:
    """The resolved config as the YAML text `save_config` writes."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def save_config(cfg: BaseModel, run_dir: str | os.PathLike, name: str = "config.yaml") -> Path:
    """Write the resolved config into the run directory (atomically)."""
    return write_text_atomic(Path(run_dir) / name, config_text(cfg))


import posttrain.config.pref as _pref  # noqa: E402  (last: it imports the sections above)
