"""Config of `posttrain rl`: the task mixture, rollout, the algorithm, sampling, buffer, reward
shaping, monitors and the training loop (scheduler: sched.py; scale-out: cluster.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from posttrain.algos.advantages import ADVANTAGES, GROUP_RELATIVE
from posttrain.algos.kl import KL_KINDS
from posttrain.algos.off_policy import OFF_POLICY
from posttrain.algos.policy_loss import AGGREGATIONS, POLICY_LOSSES
from posttrain.algos.temperature import SCHEDULES
from posttrain.config.base import Strict, one_of
from posttrain.config.cluster import ClusterConfig
from posttrain.config.common import DomainConfig, LoggingConfig, ModelConfig, OptimConfig
from posttrain.config.eval import EvalSection
from posttrain.config.sched import SchedulerConfig


# AlgoConfig fields named by the algos/ registries: adding an estimator or a loss there is all it takes
_ALGO_NAMES = {"advantage": (ADVANTAGES, "advantage estimator"), "policy_loss": (POLICY_LOSSES, "policy loss"),
               "aggregation": (AGGREGATIONS, "loss aggregation"), "kl_estimator": (KL_KINDS, "KL estimator"),
               "off_policy": (OFF_POLICY, "off-policy correction")}


class TemperatureConfig(Strict):
    schedule: str = "linear"  # algos/temperature.py SCHEDULES
    start: float = Field(1.0, gt=0)  # 0.8-1.0 favours exploration
    end: float = Field(0.3, gt=0)  # 0.2-0.4 favours stability
    steps_per_epoch: int | None = Field(None, gt=0)  # None: the run is one epoch per 10% of its steps

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, v: str) -> str:
        return one_of(v, SCHEDULES, "temperature schedule")


class RolloutConfig(Strict):
    engine: Literal["hf", "paged", "remote", "vllm"] = "paged"  # posttrain/engine/registry.py ENGINES
    engine_options: dict[str, Any] = {}  # passed to the engine, e.g. {kv_dtype: int8} or {base_url: ...}
    # the paged engine's matmul weights (engine/paged/quant.py): exact (default: kill -9 resume
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
    advantage: str = "grpo"  # algos/advantages.py ADVANTAGES
    policy_loss: str = "ppo_clip"  # algos/policy_loss.py POLICY_LOSSES
    clip_low: float = Field(0.2, ge=0)
    clip_high: float = Field(0.28, ge=0)  # clip-higher (DAPO)
    dual_clip: float | None = Field(3.0, gt=1)  # None: off
    aggregation: str = "token_mean"  # algos/policy_loss.py AGGREGATIONS
    kl_coef: float = Field(0.0, ge=0)  # 0: no reference model is loaded at all
    kl_estimator: str = "k3"  # algos/kl.py KL_KINDS
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
    off_policy: str = "tis"  # algos/off_policy.py OFF_POLICY
    off_policy_low: float = Field(0.5, gt=0, le=1)
    off_policy_high: float = Field(2.0, ge=1)

    @field_validator(*_ALGO_NAMES)
    @classmethod
    def _registered(cls, v: str, info) -> str:
        names, what = _ALGO_NAMES[info.field_name]
        return one_of(v, names, what)


class DynamicSamplingConfig(Strict):
    enabled: bool = True  # drop groups whose raw scores all agree, backfill with fresh ones
    max_attempts: int = Field(3, ge=1)  # rollout rounds per step, the first included


class BufferConfig(Strict):
    enabled: bool = True
    # share of each step's trained trajectories that are replayed stored successes (rl/buffer.py: why <= 0.5)
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


class AnchorConfig(Strict):
    """Rehearsal of the start model's own behaviour (rl/anchors.py): PPO-ptx with self-generated data.

    At step 0 the start model answers `prompts` held-out prompts of the `tasks` domains greedily; each
    step trains `per_step` of them (drawn by (seed, step)) with the fixed advantage `weight` beside the
    RL groups, so the policy is pulled back wherever it drifted from the start model on prompts RL
    never shows it (PPO's clip stops the pull once it is 1 + clip_high above the start model).
    Pick domains that neither RL nor the regression suite uses: anchoring on a regression suite's
    domains would make it measure training, not retention."""

    tasks: list[str] = []  # eval-spec items, e.g. ["prime_factorization", "power_function:64"]; [] = off
    prompts: int = Field(64, gt=0)  # per domain without its own count
    per_step: int = Field(16, gt=0)  # anchor trajectories trained each step
    weight: float = Field(0.5, gt=0)  # their fixed advantage (A of an RL token is ~ +-1)
    seed: int = 2_000_000  # the anchor prompts' task seeds (apart from training's and eval's)
    keep_truncated: bool = False  # also rehearse answers the start model did not finish


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
    anchor: AnchorConfig = AnchorConfig()  # rehearsal of the start model's answers on other domains
    reward: RewardConfig = RewardConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5, warmup_steps=0, schedule="constant")
    train: RLTrainConfig = RLTrainConfig()
    monitor: MonitorConfig = MonitorConfig()
    eval: EvalSection = EvalSection()  # suites evaluated at step 0 and every train.eval_every; gates
    cluster: ClusterConfig = ClusterConfig()  # scale-out: ray workers, ddp / fsdp2, weight sync (config/cluster.py)
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
        anchored = sorted({i.split(":")[0] for i in self.anchor.tasks} & set(names))
        if anchored:
            raise ValueError(f"anchor.tasks: {anchored[0]!r} is also a training domain; anchor on domains RL "
                             f"does not train")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks: domain {dup[0]!r} appears more than once")
        if self.rollout.samples_per_prompt < 2 and self.algo.advantage in GROUP_RELATIVE:
            raise ValueError(
                f"rollout.samples_per_prompt=1 with the group-relative estimator {self.algo.advantage!r}: "
                "use a group of at least 2 or algo.advantage=reinforce_pp"
            )
        return self
