"""A trained reward model as a verifier (RLHF): `reward_model`, configured per domain.

    # an RL config's domain: the RM's score mixed with a verifiable reward
    - name: arithmetic
      verifiers: [exact, reward_model]
      combine: weights
      verifier_weights: {exact: 0.7, reward_model: 0.3}
      verifier_options:
        reward_model: {path: runs/rm/final, batch: 16, timeout_s: 60, gate: "Answer:"}

    get_verifier("reward_model")(task, traj)          # Score(value, "reward_model", details) or None
    get_verifier("reward_model").many(task, trajs)    # a group, `batch` sequences per forward

Options (`verifier_options.reward_model`):
  path        required: a reward-model directory in HF sequence-classification layout
              (num_labels=1, tokenizer next to it), e.g. what `posttrain rm` saves
  normalise   "stats": value = sigmoid((logit - mean) / std) with the mean and std of the RM's
              logits read from `reward_stats.json` in `path` ({"mean", "std", "n", "version": 1});
              the default when that file exists | "sigmoid": value = sigmoid(logit), the default
              otherwise
  batch       sequences per forward (16)
  timeout_s   seconds one batch may take (60); past it the batch's trajectories get None
              (cannot judge) and a warning "reward model timed out after Xs" is logged
  max_length  tokens per conversation (1024); longer ones are cut (details["truncated"])
  gate        a regex: a completion it does not match (re.search) scores 0.0 with
              details {"gated": True}, and the RM is not run on it
  device      "cpu" (default), "cuda", "cuda:1", ...

Each distinct (path, device, max_length) is loaded once per process and shared by every domain
and verifier thread (`judge_for`); the completion is encoded as untrusted text (judge.py).
A Score's details: "logit" (raw), "value" (normalised), "normalise", "truncated".

The timeout runs each batch's forward in its own daemon thread and waits up to `timeout_s` for
it. A thread cannot be killed: a forward that overruns keeps running (and holding its compute)
until it finishes, and its result is thrown away. The deadline bounds how long the RL step
waits, not the work done.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from posttrain.core.errors import ConfigError
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.options import verifier_options

if TYPE_CHECKING:  # judge.py imports torch: loaded on first use, so registering this verifier stays cheap
    from posttrain.verifiers.rm_judge import RewardModelJudge

log = logging.getLogger(__name__)

NAME = "reward_model"
STATS_FILE = "reward_stats.json"  # core/hf.py STATS_FILE (imported lazily: core.hf needs torch)
NORMALISE = ("stats", "sigmoid")
OPTIONS = ("path", "normalise", "batch", "timeout_s", "max_length", "gate", "device")

_LOCK = threading.Lock()  # guards the dicts below; loads hold a per-key lock instead
_JUDGES: dict[tuple[str, str, int], "RewardModelJudge"] = {}
_KEY_LOCKS: dict[tuple[str, str, int], threading.Lock] = {}
_STATS: dict[str, tuple[float, float] | None] = {}


def judge_for(path: str, device: str = "cpu", max_length: int = 1024) -> RewardModelJudge:
    """The process's one RewardModelJudge for (path, device, max_length), loaded on first use.
    Thread-safe: concurrent first calls load it once; different models load in parallel."""
    key = (str(path), str(device), int(max_length))
    with _LOCK:
        if key in _JUDGES:
            return _JUDGES[key]
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:
        with _LOCK:
            if key in _JUDGES:
                return _JUDGES[key]
        from posttrain.verifiers.rm_judge import RewardModelJudge

        judge = RewardModelJudge(key[0], device=key[1], max_length=key[2])  # a failed load is not cached
        with _LOCK:
            _JUDGES[key] = judge
        return judge


def clear_cache() -> None:
    """Forget the loaded models and stats (tests; a process that swaps reward models)."""
    with _LOCK:
        _JUDGES.clear()
        _KEY_LOCKS.clear()
        _STATS.clear()


def _read_stats(path: str) -> tuple[float, float] | None:
    """(mean, std) from `path`/reward_stats.json (train/reward_model.py wrote it); None when there
    is no such file; a malformed one is a one-line ConfigError naming it."""
    if not (Path(path) / STATS_FILE).is_file():
        return None
    from posttrain.core.errors import ModelLoadError
    from posttrain.core.hf import load_reward_stats

    try:
        stats = load_reward_stats(path)
    except ModelLoadError as e:
        raise ConfigError(str(e)) from None
    return stats.mean, stats.std


def stats_for(path: str) -> tuple[float, float] | None:
    """`_read_stats`, read once per process per path."""
    with _LOCK:
        if path in _STATS:
            return _STATS[path]
    stats = _read_stats(path)  # a malformed file raises every time, it is not cached
    with _LOCK:
        _STATS[path] = stats
    return stats


def _number(opts: dict, name: str, default: float, kind: type, low: float) -> Any:
    x = opts.get(name, default)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (kind is int and int(x) != x) or not x >= low:
        raise ConfigError(f"verifier_options.{NAME}.{name} must be {'an integer' if kind is int else 'a number'} "
                          f">= {low}, got {x!r}")
    return kind(x)


def _options(task: Task) -> dict[str, Any]:
    """The task's reward_model options, checked, with defaults filled in."""
    opts = verifier_options(task, NAME)
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"verifier_options.{NAME}: unknown option(s) {', '.join(unknown)}; "
                          f"known: {', '.join(OPTIONS)}")
    path = opts.get("path")
    if not path or not isinstance(path, str):
        raise ConfigError(f"verifier {NAME} needs verifier_options.{NAME}.path")
    stats = stats_for(path)
    normalise = opts.get("normalise", "stats" if stats is not None else "sigmoid")
    if normalise not in NORMALISE:
        raise ConfigError(f"verifier_options.{NAME}.normalise must be one of {', '.join(NORMALISE)}, got {normalise!r}")
    if normalise == "stats" and stats is None:
        raise ConfigError(f"verifier_options.{NAME}.normalise is 'stats' but {Path(path) / STATS_FILE} does not exist")
    gate = opts.get("gate")
    if gate is not None:
        try:
            gate = re.compile(gate)
        except (re.error, TypeError) as e:
            raise ConfigError(f"verifier_options.{NAME}.gate is not a valid regex ({gate!r}): {e}") from None
    return {
        "path": path, "normalise": normalise, "stats": stats, "gate": gate,
        "batch": _number(opts, "batch", 16, int, 1),
        "timeout_s": _number(opts, "timeout_s", 60.0, float, 1e-9),
        "max_length": _number(opts, "max_length", 1024, int, 8),
        "device": str(opts.get("device", "cpu")),
    }


def _with_deadline(fn, timeout_s: float) -> tuple[bool, Any]:
    """(finished, result) of `fn()` run in a daemon thread, waited on for `timeout_s` seconds.
    An exception in `fn` is re-raised here. An overrunning thread is left to finish on its own."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    worker = threading.Thread(target=work, name=f"{NAME}-forward", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return False, None
    if "error" in box:
        raise box["error"]
    return True, box["result"]


def score_many(task: Task, trajs: Sequence[Trajectory]) -> list[Score | None]:
    """The reward model's Score for each trajectory of `task` (None: its batch timed out)."""
    opts = _options(task)
    out: list[Score | None] = [None] * len(trajs)
    todo = []
    for i, traj in enumerate(trajs):
        if opts["gate"] is not None and opts["gate"].search(traj.text) is None:
            out[i] = Score(0.0, NAME, {"gated": True})
        else:
            todo.append(i)
    if not todo:
        return out
    from posttrain.verifiers.rm_judge import scaled

    judge = judge_for(opts["path"], opts["device"], opts["max_length"])
    for start in range(0, len(todo), opts["batch"]):
        chunk = todo[start : start + opts["batch"]]

        def forward(chunk=chunk):
            encoded = [judge.encode(task.prompt, trajs[i].text) for i in chunk]
            return encoded, judge.logits_of([ids for ids, _ in encoded], len(encoded))

        finished, result = _with_deadline(forward, opts["timeout_s"])
        if not finished:
            log.warning("%s: task %s: reward model timed out after %gs (%d trajectories not judged)",
                        NAME, task.id, opts["timeout_s"], len(chunk))
            continue
        encoded, logits = result
        for i, (_, truncated), logit in zip(chunk, encoded, logits):
            if not math.isfinite(logit):
                log.warning("%s: task %s: reward model returned a non-finite logit %r", NAME, task.id, logit)
                continue
            value = scaled(logit, opts["normalise"], stats=opts["stats"])
            out[i] = Score(value, NAME, {"logit": logit, "value": value, "normalise": opts["normalise"],
                                         "truncated": bool(truncated)})
    return out


def reward_model(task: Task, traj: Trajectory) -> Score | None:
    return score_many(task, [traj])[0]


reward_model.many = score_many  # type: ignore[attr-defined]
