"""A verifier's options on a task (read by the verifiers themselves; no registry needed)."""

from __future__ import annotations

from posttrain.core.types import Task


def verifier_options(task: Task, name: str) -> dict:
    """Options for verifier `name` on `task`: `task.metadata["verifier_options"][name]` (a JSONL
    task's metadata, or a domain's `verifier_options` in the config), else {}."""
    opts = (task.metadata or {}).get("verifier_options", {}).get(name, {})
    if not isinstance(opts, dict):
        raise ValueError(f"verifier_options[{name!r}] must be a mapping, got {type(opts).__name__}")
    return opts
