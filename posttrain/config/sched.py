"""Configuration of the RL scheduler (posttrain/rl/) and of per-domain curricula.

    scheduler:
      over_provision: 1.5        # groups started per group the step needs
      close: enough              # close when prompts_per_step groups with signal are done, carry the
                                 # tail over (default all: wait for every group; bit-exact reruns)
      max_staleness: 1           # asynchronous RL: the next rollout overlaps the update (0: synchronous);
                                 # carried-over episodes older than this many versions are re-queued
      value: {floor: 0.1, ...}   # sampling by expected GRPO signal, an exploration floor per domain
      lanes: {fast_tokens: 256, long_share: 0.25}
      breaker: {failures: 5, cooldown_steps: 5}

    tasks:
      - name: basic_arithmetic
        quota: 0.5                                  # at most half of a step's groups
        curriculum: {start: 1, raise_at: 0.8, lower_at: 0.2}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from posttrain.config.base import Strict as _Strict


class CurriculumConfig(_Strict):
    """A domain's difficulty level, moved by its recent pass rate (scheduler/curriculum.py).

    reasoning-gym domains use the dataset's own curriculum (`reasoning_gym.factory.create_curriculum`,
    one level index for every attribute named, default all of them); generated domains (sql,
    document, cad, terminal) their `level` option."""

    start: int = Field(1, ge=1)  # 1-based level the run starts at
    min_level: int = Field(1, ge=1)
    max_level: int | None = Field(None, ge=1)  # None: the domain's highest level
    raise_at: float = Field(0.8, gt=0, le=1)  # pass rate over `window` steps at or above this: one level up
    lower_at: float = Field(0.2, ge=0, lt=1)  # at or below this: one level down
    window: int = Field(3, gt=0)  # steps of the domain's pass rate averaged (and waited after a move)
    attributes: list[str] | None = None  # reasoning-gym: the curriculum attributes moved (None: all)

    @model_validator(mode="after")
    def _check(self) -> "CurriculumConfig":
        if self.lower_at >= self.raise_at:
            raise ValueError(f"curriculum: lower_at={self.lower_at} must be below raise_at={self.raise_at}")
        if self.max_level is not None and self.max_level < self.min_level:
            raise ValueError(f"curriculum: max_level={self.max_level} is below min_level={self.min_level}")
        if self.start < self.min_level or (self.max_level is not None and self.start > self.max_level):
            raise ValueError(f"curriculum: start={self.start} is outside [min_level, max_level]")
        return self


class ValueConfig(_Strict):
    """Sampling by training value: a group's expected GRPO signal 1 - p^k - (1-p)^k from pass-rate estimates."""

    enabled: bool = True
    floor: float = Field(0.1, ge=0, le=1)  # every domain keeps at least this share of its weight (no starving)
    prior: float = Field(0.5, ge=0, le=1)  # pass rate assumed before any observation
    decay: float = Field(0.7, ge=0, lt=1)  # domain estimate: new = decay * old + (1 - decay) * step's rate
    task_memory: int = Field(4096, ge=0)  # per-task estimates kept (the oldest forgotten first)


class LaneConfig(_Strict):
    """Fast lane for short work, fixed slots for long episodes (a share of the concurrent episodes)."""

    fast_tokens: int = Field(512, gt=0)  # predicted tokens per episode (sampled + tool text) at or under: fast
    fast_env_seconds: float = Field(2.0, ge=0)  # ... and predicted env seconds at or under: fast
    long_share: float = Field(0.25, ge=0, lt=1)  # of max_concurrent_episodes, reserved for long episodes


class BreakerConfig(_Strict):
    """A domain whose environment keeps failing (infra or env errors) is paused and reported."""

    failures: int = Field(5, gt=0)  # failed episodes in a row that trip it
    cooldown_steps: int = Field(5, gt=0)  # steps it stays paused before one trial group


class SchedulerConfig(_Strict):
    over_provision: float = Field(1.0, ge=1)  # groups started per group needed (first round)
    # all: a step waits for every group it started (a rerun or a resumed run repeats it bit for bit);
    # enough: it closes once prompts_per_step groups with signal are done and carries the tail over
    # (throughput first: which groups finish first depends on timing, so runs are not bit-reproducible)
    close: Literal["enough", "all"] = "all"
    # the staleness bound, in policy versions: 0 = synchronous (each step's rollout waits for the last
    # update; bit-identical to a run without the async machinery); >= 1 = asynchronous RL: the next
    # step's rollout overlaps the update (recipes/rl.py, one step ahead) and carried-over episodes
    # (close: enough) at most this many versions old are kept, older ones re-queued
    max_staleness: int = Field(0, ge=0)
    max_groups_factor: float = Field(4.0, ge=1)  # groups started per step at most this x prompts_per_step
    episode_seconds: float | None = Field(None, gt=0)  # wall time per episode (None: the task's own limit)
    infra_retries: int = Field(2, ge=0)  # per episode, for infrastructure faults only
    retry_backoff_s: float = Field(0.2, ge=0)  # first retry's wait, doubled each time
    value: ValueConfig = ValueConfig()
    lanes: LaneConfig = LaneConfig()
    breaker: BreakerConfig = BreakerConfig()
