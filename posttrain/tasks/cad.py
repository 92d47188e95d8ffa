"""The cad task source: a part to build in OpenSCAD step by step (env "cad", docs/cad.md).

    tasks = make_source_tasks("cad", n=8, seed=0, options={"level": 3})
    tasks = make_source_tasks("cad", n=8, seed=0, options={"level": [1, 5], "split": "test", "fn": 48})

Each task is one part drawn from (seed, level) by posttrain/envs/cad/levels.py; the task keeps only
the parameters (reference {"seed", "level", "fn", "params"}), from which the env rebuilds the steps,
the checks and the gold solid. Option `fn`: the $fn the prompt asks for, a multiple of 4 in 12..96
(default 32; the checks' volumes and section areas are those fn-gons'). The oracle writes the
script of steps 1..k, renders it and confirms step k, for every step, then answers without a call.
"""

from __future__ import annotations

from typing import Any, Mapping

from posttrain.envs.cad.env import TOOLS, goal_text
from posttrain.envs.cad.levels import build, sample
from posttrain.envs.cad.spec import script
from posttrain.errors import ConfigError
from posttrain.tasks.generated import OracleTurn, calls, register_generated
from posttrain.types import Limits, Task

FAMILY = {1: "block", 2: "plate", 3: "boss", 4: "bracket", 5: "flange"}
# a turn writes the whole script so far: level 5's (16 bolt and counterbore cuts) is up to ~1,400 characters
TURN_TOKENS = {1: 512, 2: 512, 3: 512, 4: 1024, 5: 1536}


def cad_oracle(task: Task) -> list[OracleTurn]:
    ref = task.reference
    part = build(ref["level"], ref["params"], ref["fn"])
    turns = [OracleTurn(calls(("write_script", {"code": script(part, k)}), ("render", {}),
                              ("confirm_step", {"step": k})), content=f"Step {k}.")
             for k in range(1, len(part.steps) + 1)]
    return turns + [OracleTurn(content=f"Done: {part.title}, all {len(part.steps)} steps confirmed.")]


@register_generated("cad", levels=5, oracle=cad_oracle, options={"fn": (int, 32)},
                    description="cad: build a part in OpenSCAD step by step (block, plate, boss, bracket, flange), "
                                "each step confirmed against mesh checks")
def cad_task(seed: int, level: int, options: Mapping[str, Any]) -> Task:
    fn = options["fn"]
    if fn is None or fn % 4 or not 12 <= fn <= 96:
        raise ConfigError(f"cad: option fn must be a multiple of 4 in 12..96, got {fn!r}")
    params = sample(seed, level)
    part = build(level, params, fn)
    steps = len(part.steps)
    return Task(
        id=f"cad/L{level}/{seed}",
        domain="cad",
        prompt=({"role": "user", "content": goal_text(part)},),
        reference={"seed": seed, "level": level, "fn": fn, "params": params},
        verifiers=("env_score",),
        env="cad",
        limits=Limits(max_turns=8 + 3 * steps, max_new_tokens=TURN_TOKENS[level],
                      seconds=60.0 + 30.0 * steps, tool_timeout=20.0),
        metadata={"tools": TOOLS, "level": level, "seed": seed, "family": FAMILY[level], "steps": steps},
    )
