"""Terminal tasks as a task source: every task folder under posttrain/data/terminal_tasks/ (or `dir`).

    tasks = make_source_tasks("terminal", n=None, seed=0)                       # all, in name order
    tasks = make_source_tasks("terminal", n=5, seed=0, options={"dir": "my_tasks/"})

Each folder (format: docs/terminal.md) becomes one Task run by the `terminal` env: id
"terminal/NAME", the instruction as the user message, reference {"task_dir": absolute path},
verified by `env_score` (the env's own tests-in-a-fresh-sandbox score), limits from task.toml
(max_turns, seconds = the agent timeout, tool_timeout = the command timeout), and metadata with
the shell tool's schema, difficulty, category and tags. A fixed set: `n` takes the first n folders
by name, whatever the seed. A malformed folder is a ConfigError / DataError naming its path
(`posttrain tasks validate DIR` checks every folder, oracle included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from posttrain.errors import ConfigError
from posttrain.tasks.registry import register_source
from posttrain.types import Limits, Task

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "data" / "terminal_tasks"


def task_folders(root: str | Path) -> list[Path]:
    """`root` itself when it is one task folder (has task.toml or instruction.md), else its subfolders."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"terminal: {root} is not a directory")
    if (root / "task.toml").exists() or (root / "instruction.md").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def terminal_task(tt) -> Task:
    """The Task of a loaded TerminalTask (envs/terminal/task.py)."""
    from posttrain.envs.terminal.env import SHELL_TOOL

    return Task(
        id=f"terminal/{tt.name}",
        domain="terminal",
        prompt=({"role": "user", "content": tt.instruction},),
        reference={"task_dir": tt.path},
        verifiers=("env_score",),
        env="terminal",
        limits=Limits(max_turns=tt.max_turns, seconds=tt.agent_timeout, tool_timeout=tt.command_timeout),
        metadata={"tools": [SHELL_TOOL], "difficulty": tt.difficulty, "category": tt.category,
                  "tags": list(tt.tags)},
    )


@register_source("terminal", description="terminal tasks: a shell in the bubblewrap sandbox, scored by its tests")
def terminal(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    from posttrain.envs.terminal.task import load_task

    unknown = sorted(set(options) - {"dir"})
    if unknown:
        raise ConfigError(f"terminal: unknown option {unknown[0]!r} (valid: dir)")
    root = options.get("dir", DEFAULT_DIR)
    if not isinstance(root, (str, Path)):
        raise ConfigError(f"terminal: option dir must be a path, got {root!r}")
    folders = task_folders(root)
    if n is not None and n > len(folders):
        raise ConfigError(f"terminal: {n} tasks asked for, {root} has {len(folders)}")
    return [terminal_task(load_task(p)) for p in folders[: n if n is not None else len(folders)]]
