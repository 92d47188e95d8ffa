"""Verifiers: plain functions `(task, trajectory) -> Score | None`, registered by name."""

from posttrain.verifiers.registry import (
    VERIFIERS,
    events_of,
    get_verifier,
    register,
    run_verifiers,
    run_verifiers_many,
    verify_groups,
    task_score,
    verifier_options,
)

__all__ = [
    "VERIFIERS", "events_of", "get_verifier", "register", "run_verifiers", "run_verifiers_many", "verify_groups", "task_score", "verifier_options",
]  # fmt: skip
