"""Replay buffer of the RL recipe: successful past trajectories, kept for ExGRPO-style mixing.

What it holds: `Entry(task, trajectory, score, step)` -- one scored trajectory of one task, `step` being the
step (policy version) at which it was added. The recipe calls `buf.add(task, traj, score, step)` for every
scored FRESH trajectory; an entry is kept iff its raw task score >= `min_score` ("successful"). With
min_score < 1, lower-quality successes (min_score <= score < 1) are kept as well: there is no dedup by
quality, and none by content either -- so add only fresh trajectories, never a replayed one again (it
would be stored a second time under a new step).

Replay by share of trajectories (`replay_plan`; placed by rl/plan.py). A step trains
on up to N = P x K trajectories (P = prompts_per_step groups of K = samples_per_prompt). With
ratio rho in [0, 0.5], R = round(rho N) of them are stored successes, placed in replay groups: a
past task with m <= M = floor(K/2) stored successes (distinct, of that task) + K - m fresh samples
of it from the current policy; ceil(R / M) such groups, the rest fresh tasks. Why this placement:

  Group-relative advantages (GRPO) with binary raw scores: a group with stored successes s = 1
  (m of them) and fresh pass rate p over K - m samples has mean mu = (m + (K - m) p) / K and
  std sigma = sqrt(mu (1 - mu)). Then
      A(stored success) = (1 - mu) / sigma = sqrt((1 - mu) / mu)   > 0
      A(fresh failure)  = -mu / sigma      = -sqrt(mu / (1 - mu))  < 0
  - whole replayed groups of stored successes have sigma = 0: every advantage is 0, nothing is
    learned, so replayed trajectories must share a group with fresh samples of the same task;
  - when the policy has forgotten the task (p -> 0), mu = m / K; at m = K/2 the stored successes
    get A = +1 and the current failures A = -1: the update moves probability back to a solution
    it once had and away from what it does now, which is what prevents forgetting;
  - when it still solves the task (p = 1), sigma = 0 and the group carries no signal: dynamic
    sampling drops it and draws another stored task, so the replay share is spent where the
    policy is failing a task it once solved;
  - m <= K/2 keeps at least half of every replay group's baseline from the current policy: with
    m = K - 1 a fresh success would get A = sqrt((1 - mu)/mu) with mu ~ 1, i.e. almost nothing;
  - rho = 0.5 is the largest share this allows (every group a replay group, half stored), hence
    the bound of `buffer.replay_ratio`.
  The stored trajectory keeps its sampler logprobs, its SamplingParams (temperature) and its
  policy version: the trainer recomputes its logprob at ITS temperature, so the PPO ratio
  pi_theta(y) / pi_old(y) is the importance weight against the policy that sampled it (1 before
  any update when nothing changed); with A > 0 a forgotten trajectory (ratio < 1) is not clipped.
  The share actually trained is logged per step: replay/share_trajectories, replay/share_tokens,
  replay/mean_age (policy versions). It falls short of rho when the buffer holds too few tasks
  or when replay groups are dropped for lack of signal more often than `max_attempts` refills.

Eviction ("oldest" = added earliest; steps only grow in the recipe, so this is also the lowest step):
  - a domain at `per_domain_quota` evicts ITS OWN oldest entry to make room;
  - otherwise a buffer at `capacity` evicts the globally oldest entry.

Files written by `save(directory)`:
  entries.pkl   the exact state: MAGIC line, then a pickle (protocol 5) of
                {"capacity", "per_domain_quota", "min_score", "stats", "entries": [(task, traj, score, step)]}
                (oldest first), then "sha256:<hex of the pickle bytes>". Pickle is used because Task.reference
                holds arbitrary JSON-like data (tuples, nested dicts) that JSON would not round-trip exactly;
                it is acceptable ONLY because these files are our own checkpoints: never load a buffer file
                from an untrusted source (unpickling can run code).
  summary.json  for people and dashboards: capacity, size, per-domain counts, oldest/newest step, counters.
                `load` does not read it.
Each file is written to a temp file beside it, then os.replace'd (entries first), so a failure mid-save
leaves the previously saved buffer intact. `load` only reads; a missing, truncated, corrupt or foreign
entries file raises CheckpointError naming the file.
"""

from __future__ import annotations

import json
import numbers
import os
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from posttrain.core.errors import CheckpointError, one_line
from posttrain.core.fsio import read_checked_pickle, write_checked_pickle, write_text_atomic
from posttrain.core.types import Task, Trajectory

ENTRIES_FILE = "entries.pkl"
SUMMARY_FILE = "summary.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Entry:
    task: Task
    trajectory: Trajectory
    score: float  # raw task score in [0, 1]
    step: int  # when added (policy version)


MAX_REPLAY_RATIO = 0.5


def replay_plan(ratio: float, prompts: int, samples: int) -> tuple[int, int]:
    """(R, M): how many of a step's prompts x samples trajectories are replayed, and how many
    stored successes one replay group holds at most (floor(K/2), at least 1). See the docstring."""
    if not 0.0 <= ratio <= MAX_REPLAY_RATIO:
        raise ValueError(f"buffer.replay_ratio must be in [0, {MAX_REPLAY_RATIO}], got {ratio}")
    per_group = max(1, samples // 2)
    return min(round(ratio * prompts * samples), prompts * per_group), per_group


class ReplayBuffer:
    """Bounded store of successful trajectories; see the module docstring for the rules."""

    def __init__(self, capacity: int, per_domain_quota: int | None = None, min_score: float = 1.0):
        if not _is_int(capacity) or capacity <= 0:
            raise ValueError(f"replay buffer capacity must be a positive int, got {capacity!r}")
        if per_domain_quota is not None and (not _is_int(per_domain_quota) or per_domain_quota <= 0):
            raise ValueError(f"replay buffer per_domain_quota must be a positive int or None, got {per_domain_quota!r}")
        if not _is_real(min_score) or not 0.0 <= float(min_score) <= 1.0:
            raise ValueError(f"replay buffer min_score must be a number in [0, 1], got {min_score!r}")
        self.capacity = int(capacity)
        self.per_domain_quota = None if per_domain_quota is None else int(per_domain_quota)
        self.min_score = float(min_score)
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # insertion number -> entry, oldest first
        self._by_domain: dict[str, deque[int]] = {}  # domain -> insertion numbers, oldest first
        self._next = 0  # insertion number of the next kept entry
        self._stats = {"added": 0, "rejected": 0, "evicted": 0}

    # ------------------------------------------------------------ adding and evicting

    def add(self, task: Task, trajectory: Trajectory, score: float, step: int) -> bool:
        """Store (task, trajectory) iff score >= min_score; True when kept. Evicts as needed."""
        if not isinstance(task, Task) or not isinstance(trajectory, Trajectory):
            raise ValueError(
                "replay buffer add needs a Task and a Trajectory, "
                f"got {type(task).__name__} and {type(trajectory).__name__}"
            )
        if trajectory.task_id != task.id:
            raise ValueError(f"replay buffer add: trajectory.task_id {trajectory.task_id!r} != task.id {task.id!r}")
        if not _is_real(score):  # NaN is a number: it fails `score >= min_score` and is rejected
            raise ValueError(f"replay buffer add: score must be a number, got {score!r} (task {task.id!r})")
        if not _is_int(step) or step < 0:
            raise ValueError(f"replay buffer add: step must be a non-negative int, got {step!r} (task {task.id!r})")
        if not float(score) >= self.min_score:  # written so that NaN is rejected too
            self._stats["rejected"] += 1
            return False
        self._make_room(task.domain)
        self._insert(Entry(task, trajectory, float(score), int(step)))
        self._stats["added"] += 1
        return True

    def _make_room(self, domain: str) -> None:
        """Evict by the rules above so that one more entry of `domain` fits."""
        domain_ids = self._by_domain.get(domain)
        if self.per_domain_quota is not None and domain_ids is not None and len(domain_ids) >= self.per_domain_quota:
            self._evict(self._entries[domain_ids[0]])
        elif len(self._entries) >= self.capacity:
            self._evict(next(iter(self._entries.values())))

    def _insert(self, entry: Entry) -> None:
        key = self._next
        self._next += 1
        self._entries[key] = entry
        self._by_domain.setdefault(entry.task.domain, deque()).append(key)

    def _evict(self, entry: Entry) -> None:
        """Remove `entry`, which is the oldest of its domain (true for both eviction rules)."""
        ids = self._by_domain[entry.task.domain]
        key = ids.popleft()
        assert self._entries[key] is entry
        del self._entries[key]
        if not ids:
            del self._by_domain[entry.task.domain]
        self._stats["evicted"] += 1

    # ------------------------------------------------------------ reading

    def sample(self, n: int, rng: random.Random, exclude_task_ids: Iterable[str] = (),
               per_task: int = 1) -> list[list[Entry]]:
        """Up to n distinct tasks not in exclude_task_ids, each with up to `per_task` of its entries:
        tasks uniformly, then entries of each uniformly without replacement. Deterministic given
        rng's state (and the buffer's contents)."""
        if not _is_int(n) or n < 0:
            raise ValueError(f"replay buffer sample: n must be a non-negative int, got {n!r}")
        if not _is_int(per_task) or per_task < 1:
            raise ValueError(f"replay buffer sample: per_task must be a positive int, got {per_task!r}")
        excluded = set(exclude_task_ids)
        by_task: dict[str, list[Entry]] = {}
        for entry in self._entries.values():
            if entry.task.id not in excluded:
                by_task.setdefault(entry.task.id, []).append(entry)
        chosen = rng.sample(list(by_task), min(int(n), len(by_task)))
        return [rng.sample(by_task[task_id], min(per_task, len(by_task[task_id]))) for task_id in chosen]

    def entries(self) -> list[Entry]:
        """All entries, oldest first."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def domain_counts(self) -> dict[str, int]:
        """Entries per domain, domains sorted by name."""
        return {d: len(ids) for d, ids in sorted(self._by_domain.items())}

    def num_tasks(self) -> int:
        """Distinct task ids held."""
        return len({e.task.id for e in self._entries.values()})

    def mean_age(self, step: int) -> float:
        """Mean of (step - entry.step) over the entries; 0.0 when empty."""
        if not self._entries:
            return 0.0
        return sum(step - e.step for e in self._entries.values()) / len(self._entries)

    def state_summary(self) -> dict[str, Any]:
        """JSON-ready numbers for metrics and summary.json."""
        steps = [e.step for e in self._entries.values()]
        return {
            "capacity": self.capacity,
            "per_domain_quota": self.per_domain_quota,
            "min_score": self.min_score,
            "size": len(self._entries),
            "tasks": self.num_tasks(),
            "domains": self.domain_counts(),
            "oldest_step": min(steps) if steps else None,
            "newest_step": max(steps) if steps else None,
            **self._stats,  # totals since the buffer was created: added, rejected (score < min_score), evicted
        }

    def seeded_from(self, directory: str | os.PathLike) -> "ReplayBuffer":
        """This (empty) buffer filled with the entries another run saved in `directory`, re-based so the
        newest source step becomes -1 (entry steps and policy versions then count back from this run's
        step 0: ages stay positive); added oldest first under this buffer's own capacity, quota and
        min_score. For continuing on new domains while replaying the old ones' successes."""
        source = ReplayBuffer.load(directory)
        entries = source.entries()
        offset = 1 + max((e.step for e in entries), default=-1)
        for e in entries:
            traj = replace(e.trajectory, policy_version=e.trajectory.policy_version - offset)
            if e.score >= self.min_score:
                self._make_room(e.task.domain)
                self._insert(Entry(e.task, traj, e.score, e.step - offset))
        return self

    # ------------------------------------------------------------ persistence

    def save(self, directory: str | os.PathLike) -> None:
        """Write entries.pkl (exact state) then summary.json into `directory`, each atomically."""
        directory = Path(directory)
        path = directory / ENTRIES_FILE
        payload = {
            "capacity": self.capacity,
            "per_domain_quota": self.per_domain_quota,
            "min_score": self.min_score,
            "stats": dict(self._stats),
            "entries": [(e.task, e.trajectory, e.score, e.step) for e in self._entries.values()],
        }
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_checked_pickle(path, payload)
            summary = {"format": "posttrain-replay-buffer", "version": FORMAT_VERSION, "entries_file": ENTRIES_FILE}
            text = json.dumps({**summary, **self.state_summary()}, indent=1) + "\n"
            write_text_atomic(directory / SUMMARY_FILE, text)
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"cannot save replay buffer to {directory}: {one_line(e, None)}") from e

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "ReplayBuffer":
        """Read a buffer written by `save`: same entries in the same order, same counters, same sampling."""
        path = Path(directory) / ENTRIES_FILE
        payload = read_checked_pickle(path)
        try:
            buf = cls(payload["capacity"], payload["per_domain_quota"], payload["min_score"])
            stats = payload["stats"]
            if set(stats) != set(buf._stats) or not all(_is_int(v) and v >= 0 for v in stats.values()):
                raise ValueError(f"bad stats {stats!r}")
            entries = payload["entries"]
            if not isinstance(entries, list) or len(entries) > buf.capacity:
                raise ValueError(f"entries must be a list of at most {buf.capacity}")
            for task, traj, score, step in entries:
                if not (isinstance(task, Task) and isinstance(traj, Trajectory) and traj.task_id == task.id):
                    raise ValueError(f"entry is not a matching (Task, Trajectory) pair: {type(task).__name__}")
                if not (_is_real(score) and _is_int(step)):
                    raise ValueError(f"entry of task {task.id!r} has score {score!r}, step {step!r}")
                buf._insert(Entry(task, traj, float(score), int(step)))
            quota = buf.per_domain_quota
            if quota is not None and any(len(ids) > quota for ids in buf._by_domain.values()):
                raise ValueError(f"a domain holds more than per_domain_quota={quota} entries")
            buf._stats = {k: int(stats[k]) for k in buf._stats}
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"replay buffer file {path} is malformed: {one_line(e, None)}") from None
        return buf


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)
