"""Terminal tasks as a task source: every task folder under posttrain/domains/terminal/data/ (or `dir`).

    tasks = make_source_tasks("terminal", n=None, seed=0)                       # all, in name order
    tasks = make_source_tasks("terminal", n=5, seed=0, options={"dir": "my_tasks/"})
    tasks = make_source_tasks("terminal", n=None, seed=0, options={"level": 2})   # the medium ones

Each folder (format: docs/terminal.md) becomes one Task run by the `terminal` env: id
"terminal/NAME", the instruction as the user message, reference {"task_dir": absolute path},
verified by `env_score` (the env's own tests-in-a-fresh-sandbox score), limits from task.toml
(max_turns, seconds = the agent timeout, tool_timeout = the command timeout), and metadata with
the shell tool's schema, difficulty (and its `level`: 1 easy, 2 medium, 3 hard), category and tags.
A fixed set: `n` takes the first n folders by name, whatever the seed.

Option `level` (an int in 1..LEVELS or a list of them) keeps only the tasks of those difficulties
(task.toml's metadata.difficulty); the scheduler's curriculum moves it (scheduler/curriculum.py).
A level with no task is a ConfigError. A malformed folder is a ConfigError / DataError naming its
path (`posttrain tasks validate DIR` checks every folder, oracle included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from posttrain.core.errors import ConfigError
from posttrain.core.types import Limits, Task

DEFAULT_DIR = Path(__file__).resolve().parent / "data"
LEVEL_DIFFICULTIES = ("easy", "medium", "hard")  # level 1, 2, 3 (domains/terminal/task.py DIFFICULTIES)
LEVELS = len(LEVEL_DIFFICULTIES)


def level_difficulties(level: Any) -> tuple[str, ...]:
    """The difficulties option `level` (an int in 1..LEVELS or a list of them) selects; else a ConfigError."""
    wanted = level if isinstance(level, (list, tuple)) else [level]
    if not wanted or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= LEVELS for v in wanted):
        raise ConfigError(f"terminal: option level must be an integer in 1..{LEVELS} or a list of them, got {level!r}")
    return tuple(LEVEL_DIFFICULTIES[v - 1] for v in wanted)


def task_folders(root: str | Path) -> list[Path]:
    """`root` itself when it is one task folder (has task.toml or instruction.md), else its subfolders."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"terminal: {root} is not a directory")
    if (root / "task.toml").exists() or (root / "instruction.md").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def terminal_task(tt) -> Task:
    """The Task of a loaded TerminalTask (domains/terminal/task.py)."""
    from posttrain.domains.terminal.env import SHELL_TOOL

    return Task(
        id=f"terminal/{tt.name}",
        domain="terminal",
        prompt=({"role": "user", "content": tt.instruction},),
        reference={"task_dir": tt.path},
        verifiers=("env_score",),
        env="terminal",
        limits=Limits(max_turns=tt.max_turns, seconds=tt.agent_timeout, tool_timeout=tt.command_timeout),
        metadata={"tools": [SHELL_TOOL], "difficulty": tt.difficulty,
                  "level": LEVEL_DIFFICULTIES.index(tt.difficulty) + 1, "category": tt.category, "tags": list(tt.tags)},
    )


def terminal(n: int | None, seed: int, options: Mapping[str, Any]) -> list[Task]:
    from posttrain.domains.terminal.task import load_task

    unknown = sorted(set(options) - {"dir", "level"})
    if unknown:
        raise ConfigError(f"terminal: unknown option {unknown[0]!r} (valid: dir, level)")
    wanted = level_difficulties(options["level"]) if "level" in options else None
    root = options.get("dir", DEFAULT_DIR)
    if not isinstance(root, (str, Path)):
        raise ConfigError(f"terminal: option dir must be a path, got {root!r}")
    folders = task_folders(root)
    if wanted is None:  # only the folders handed out are loaded
        folders = folders if n is None or n > len(folders) else folders[:n]
    loaded = [load_task(p) for p in folders]
    if wanted is not None:
        loaded = [tt for tt in loaded if tt.difficulty in wanted]
        if not loaded:
            raise ConfigError(f"terminal: no task of difficulty {' or '.join(wanted)} "
                              f"(level {options['level']}) in {root}")
    if n is not None and n > len(loaded):
        which = f" of difficulty {' or '.join(wanted)}" if wanted is not None else ""
        raise ConfigError(f"terminal: {n} tasks asked for, {root} has {len(loaded)}{which}")
    return [terminal_task(tt) for tt in loaded[: n if n is not None else len(loaded)]]
