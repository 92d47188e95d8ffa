"""The data that flows between phases: small frozen dataclasses with shape comments.

    Task ─► rollout ─► Trajectory ─► verify (Score) ─► Group ─► TrainBatch ─► update
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant"|"tool", "content": str}


@dataclass(frozen=True)
class Limits:
    max_turns: int = 1
    max_new_tokens: int = 256
    seconds: float = 60.0


@dataclass(frozen=True)
class Task:
    id: str  # unique within a run, e.g. "basic_arithmetic/1000003"
    domain: str
    prompt: tuple[Message, ...]  # chat messages up to the first assistant turn
    reference: Any  # gold answer, unit tests or checker data (owned by the domain)
    verifiers: tuple[str, ...] = ()  # names in the verifier registry
    env: str = "single_turn"
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
    logprobs: Sequence[float]  # [T] sampler logprobs (0.0 where loss_mask is 0)
    prompt_len: int
    text: str = ""  # the decoded completion (what verifiers read)
    policy_version: int = 0
    turns: int = 1
    finish_reason: str = "stop"  # "stop" | "length" | "error"
    scores: tuple[Score, ...] = ()
    reward: float | None = None  # shaped reward used for training
    timings: Mapping[str, float] = field(default_factory=dict)
    events: tuple[str, ...] = ()


@dataclass(frozen=True)
class Group:
    task: Task
    trajectories: tuple[Trajectory, ...]  # [samples_per_prompt], one policy version
    policy_version: int = 0


@dataclass(frozen=True)
class TrainBatch:
    input_ids: torch.Tensor  # [R, L] long, packed rows
    position_ids: torch.Tensor  # [R, L] long, reset to 0 at each sequence start
    loss_mask: torch.Tensor  # [R, L] float, 1 on trained tokens
    advantages: torch.Tensor | None = None  # [R, L] float
    old_logprobs: torch.Tensor | None = None  # [R, L] float
    ref_logprobs: torch.Tensor | None = None  # [R, L] float

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())
