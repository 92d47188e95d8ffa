"""The generated terminal task source `terminal_gen`: task folders from (family, level, seed), run by the
`terminal` env (generate/ makes them; docs/terminal.md "Generated tasks").

    tasks = make_source_tasks("terminal_gen", n=8, seed=0, options={"level": 2})                  # train seeds
    tasks = make_source_tasks("terminal_gen", n=40, seed=0, options={"level": [1, 2, 3], "split": "test"})
    tasks = make_source_tasks("terminal_gen", n=4, seed=0, options={"family": "build", "dir": "out/"})

A generated domain (tasks/generated.py): training seeds below HELD_OUT_SEED, `split: test` the held-out
seeds from HELD_OUT_SEED up; `level` 1..3 (seed s gets level[s % len(level)]). Options: `family` ("" or
"all": every family, seed s gets families[s % len(families)]; else comma-separated names of text,
traceback, unittest, build) and `dir` (where the folders are written; default
$POSTTRAIN_CACHE/terminal_gen, POSTTRAIN_CACHE defaulting to ~/.cache/posttrain). Each task's folder is
written when its task is made (left alone when already identical), named FAMILY-lLEVEL-sSEED; the task is
the folder's terminal task with id `terminal_gen/L{level}/{seed}` and metadata family, seed and level.
The oracle (`posttrain tasks validate --source terminal_gen`, `episodes:terminal_gen:N` SFT data) runs
solve.sh's steps as the model would: one `shell` call per step (a turn each, from /work, where the shell
starts and no step leaves), then a final answer without a call; `posttrain tasks validate DIR` runs
solution/solve.sh the shipped tasks' way.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from posttrain.core.fsio import cache_root
from posttrain.core.types import Task
from posttrain.domains.terminal.generate import check_family, family_of, generate, write_task
from posttrain.domains.terminal.source import terminal_task
from posttrain.domains.terminal.task import cached_task
from posttrain.tasks.generated import OracleTurn, calls, register_generated

NAME = "terminal_gen"


def default_dir() -> Path:
    return cache_root() / NAME


def terminal_gen_oracle(task: Task) -> list[OracleTurn]:
    """The task's oracle steps (its solve.sh, regenerated from family, level and seed), one shell call a
    turn; then a final answer."""
    meta = task.metadata
    steps = generate(meta["family"], meta["level"], meta["seed"]).steps
    return [*(OracleTurn(calls=calls(("shell", {"command": step}))) for step in steps), OracleTurn(content="Done.")]


@register_generated(NAME, levels=3, oracle=terminal_gen_oracle, options={"family": (str, ""), "dir": (str, None)},
                    description="generated terminal tasks (text processing, tracebacks, unit tests, build fixes), "
                                "levels 1-3, held-out test seeds")
def terminal_gen_task(seed: int, level: int, options: Mapping[str, Any]) -> Task:
    family = family_of(seed, check_family(options["family"]))
    path = write_task(generate(family, level, seed), options["dir"] or default_dir())
    base = terminal_task(cached_task(path))
    return replace(base, id=f"{NAME}/L{level}/{seed}", domain=NAME,
                   metadata={**base.metadata, "family": family, "seed": seed, "level": level})
