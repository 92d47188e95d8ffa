"""The messages that flow between phases: small frozen, picklable dataclasses with shape comments.

    Task ─► rollout (SamplingParams) ─► Trajectory ─► verify (Score) ─► Group ─► train_step

What crosses a phase boundary (and later a process boundary) is one of these; statistics
travel separately, as plain metric dicts. Nothing reads a trajectory's meaning from a dict key.
Packed micro-batches are built inside `train/` from Groups and never leave it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant"|"tool", "content": str}


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # drop tokens below min_p x the most likely token's probability (0 = off)
    max_tokens: int = 128  # new tokens at most, >= 1
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()  # stop strings (checked on the decoded completion)
    seed: int | None = None  # same seed + same weights -> same completion, whatever else is in the batch
    # scheduling only (higher = more urgent; the paged engine admits and keeps higher priorities first):
    # never changes a completion, so it is left out of == and hash (params differing only here sample alike)
    priority: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if isinstance(self.stop, str) or isinstance(self.stop_token_ids, int):
            raise ValueError("SamplingParams.stop and stop_token_ids are tuples, not a single value")
        if any(not s for s in self.stop):
            raise ValueError("SamplingParams.stop holds an empty stop string")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"SamplingParams.priority must be an int (higher = more urgent), got {self.priority!r}")

    @property
    def logprob_temperature(self) -> float:
        """The temperature of the sampler's logprobs: log_softmax(logits / T); greedy (T = 0) reports T = 1.
        top-k / top-p / min-p never enter a logprob (the engines report them before truncation)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class Limits:
    """An episode's limits (envs/episode.py enforces them; each one hit has its stop reason)."""

    max_turns: int = 1  # sampled assistant turns at most (max_turns)
    max_new_tokens: int = 256  # new tokens per turn (a turn cut here: max_tokens)
    seconds: float = 60.0  # episode wall time, tools included (timeout)
    max_total_tokens: int | None = None  # prompt + every turn + every bridge (truncated); None: the engine's context
    tool_timeout: float = 30.0  # seconds per tool call (its observation says it timed out)
    max_observation_tokens: int = 1024  # an observation longer than this is cut, with a marker


@dataclass(frozen=True)
class Task:
    id: str  # unique within a run, e.g. "basic_arithmetic/1000003"
    domain: str
    prompt: tuple[Message, ...]  # chat messages up to the first assistant turn
    reference: Any  # gold answer, unit tests or checker data (owned by the domain)
    verifiers: tuple[str, ...] = ()  # names in the verifier registry
    env: str = "single_turn"  # name in posttrain.envs.ENVS: how an episode of this task runs
    limits: Limits = Limits()
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    value: float  # in [0, 1]
    verifier: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    task_id: str
    token_ids: Sequence[int]  # [T] the whole conversation, prompt included
    loss_mask: Sequence[int]  # [T] 1 only on tokens the policy sampled
    logprobs: Sequence[float]  # [T] sampler logprobs (0.0 where loss_mask is 0), at sampling.logprob_temperature
    prompt_len: int
    sampling: SamplingParams = SamplingParams()  # what it was sampled with: the trainer uses its temperature
    text: str = ""  # the decoded completion (what verifiers read)
    policy_version: int = 0  # version of the weights that sampled it
    turns: int = 1
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    scores: tuple[Score, ...] = ()
    reward: float | None = None  # shaped reward used for training
    timings: Mapping[str, float] = field(default_factory=dict)  # seconds: "rollout" (its batch), "verify" (its group)
    events: tuple[str, ...] = ()  # what verifiers / the sandbox reported: limits hit, tampering, injections
    # what weights sampled it: "exact" = the trainer's fp32 masters, else the engine's `weights_precision`
    # ("bfloat16", "int8", ...), whose sampler/trainer gap the trainer corrects (train/step.py)
    sampler_weights: str = "exact"
    # multi-turn episodes (envs/episode.py); single-turn trajectories keep the defaults
    token_sources: Sequence[int] = ()  # [T] 0 policy (sampled), 1 env (task and tool text), 2 template; () = prompt then policy
    token_versions: Sequence[int] = ()  # [T] policy version that sampled each token (-1 where not sampled); () = policy_version
    stop_reason: str = "done"  # envs.base.STOP_REASONS
    final_state: Any = None  # the env's JSON-able state at the end: what its score is re-run from
    stats: Mapping[str, float] = field(default_factory=dict)  # tool_calls, tool_errors/KIND, env_seconds, ...


@dataclass(frozen=True)
class Group:
    """The trajectories of one task and their raw task scores: the unit the trainer receives.

    The first `replayed` trajectories came from the replay buffer (older policy versions, their
    own sampling params); the rest were sampled fresh at `policy_version`."""

    task: Task
    trajectories: tuple[Trajectory, ...]  # [n] rewards and scores filled in; replayed ones first
    raw: tuple[float | None, ...]  # [n] raw task score per trajectory (None: no verifier could judge it)
    replayed: int = 0
    policy_version: int = 0  # the version the fresh trajectories were sampled with
    # rehearsal of the start model's own answers (rl/anchors.py): each trajectory is trained with its
    # `reward` as a fixed advantage, not a group-relative one
    anchor: bool = False

    @property
    def has_signal(self) -> bool:
        """Two or more judged trajectories whose raw scores differ (else every advantage is 0)."""
        valid = [r for r in self.raw if r is not None]
        return len(valid) >= 2 and max(valid) > min(valid)

    @property
    def fresh(self) -> tuple[Trajectory, ...]:
        return self.trajectories[self.replayed:]
