"""The cad task source: a part to build in OpenSCAD step by step (env "cad", docs/cad.md).

    tasks = make_source_tasks("cad", n=8, seed=0, options={"level": 3})
    tasks = make_source_tasks("cad", n=8, seed=0, options={"level": [1, 5], "split": "test", "fn": 48})
    tasks = make_source_tasks("cad", n=8, seed=0, options={"level": [4, 5], "unit": "step"})   # sub-units

Each task is one part drawn from (seed, level) by posttrain/domains/cad/levels.py; the task keeps only
the parameters (reference {"seed", "level", "fn", "params"}), from which the env rebuilds the steps,
the checks and the gold solid. Option `fn`: the $fn the prompt asks for, a multiple of 4 in 12..96
(default 32; the checks' volumes and section areas are those fn-gons'). The oracle writes the
script of steps 1..k, renders it and confirms step k, for every step, then answers without a call.

Option `unit`: "whole" (the default) is the whole part, id `cad/L{level}/{seed}`. "step" is one
sub-unit of it: seed s gives step k = `subunit_step(seed, level, steps)` (drawn uniformly from the
seed and level, so it does not follow the level cycle) of the part of seed s, id
`cad/L{level}/{seed}/s{k}`, reference + {"step": k}. The episode starts with the gold script of
steps 1..k-1 in part.scad and those steps confirmed; confirm_step(k) runs every check of the part
after step k, and the reward counts step k's own checks only (its probes and the global checks it
changes), 0 when a check the given steps pass fails (domains/cad/checks.py unit_value): the given
script rendered unchanged scores 0. The oracle plays step k only. Limits are sized for one step
(`subunit_limits`). metadata: "unit" ("whole" | "step"), "steps" (the part's), and "step" (k) for a
sub-unit.
"""

from __future__ import annotations

import math
import random
from typing import Any, Mapping

from posttrain.domains.cad.env import TOOLS, goal_text, subunit_text
from posttrain.domains.cad.levels import build, sample
from posttrain.domains.cad.spec import Part, script
from posttrain.core.errors import ConfigError
from posttrain.tasks.generated import OracleTurn, calls, register_generated
from posttrain.core.types import Limits, Task

FAMILY = {1: "block", 2: "plate", 3: "boss", 4: "bracket", 5: "flange"}
# a turn writes the whole script so far: level 5's (16 bolt and counterbore cuts) is up to ~1,400 characters
TURN_TOKENS = {1: 512, 2: 512, 3: 512, 4: 1024, 5: 1536}
UNITS = ("whole", "step")
TOOL_TIMEOUT = 20.0


def subunit_step(seed: int, level: int, steps: int) -> int:
    """The step (1..steps) that sub-unit seed `seed` covers: uniform, deterministic in (seed, level)."""
    return 1 + random.Random(f"cad/step/{level}/{seed}").randrange(steps)


def whole_limits(level: int, steps: int) -> Limits:
    return Limits(max_turns=8 + 3 * steps, max_new_tokens=TURN_TOKENS[level], seconds=60.0 + 30.0 * steps,
                  tool_timeout=TOOL_TIMEOUT)


def subunit_limits(part: Part, level: int, k: int) -> Limits:
    """One step's limits: 3 turns for the step + 5 (the whole task: 3 per step + 8), 30 s for the step + 30
    (the whole: 30 per step + 60), and a turn's tokens sized by the script after step k (one per character
    + 256, in 128s; the oracle's turn takes ~0.7 per character + 80), at most the level's whole-task turn."""
    tokens = 128 * math.ceil((256 + len(script(part, k))) / 128)
    return Limits(max_turns=8, max_new_tokens=min(TURN_TOKENS[level], tokens), seconds=60.0,
                  tool_timeout=TOOL_TIMEOUT)


def cad_oracle(task: Task) -> list[OracleTurn]:
    ref = task.reference
    part = build(ref["level"], ref["params"], ref["fn"])
    total = len(part.steps)
    if "step" in ref:  # a sub-unit: steps before it are given, the oracle plays step k only
        k = ref["step"]
        return [OracleTurn(calls(("write_script", {"code": script(part, k)}), ("render", {}),
                                 ("confirm_step", {"step": k})), content=f"Step {k}."),
                OracleTurn(content=f"Done: step {k} of {total} of {part.title} confirmed.")]
    turns = [OracleTurn(calls(("write_script", {"code": script(part, k)}), ("render", {}),
                              ("confirm_step", {"step": k})), content=f"Step {k}.")
             for k in range(1, total + 1)]
    return turns + [OracleTurn(content=f"Done: {part.title}, all {total} steps confirmed.")]


@register_generated("cad", levels=5, oracle=cad_oracle, options={"fn": (int, 32), "unit": (str, "whole")},
                    description="cad: build a part in OpenSCAD step by step (block, plate, boss, bracket, flange), "
                                "each step confirmed against mesh checks; unit: step gives one step of a part")
def cad_task(seed: int, level: int, options: Mapping[str, Any]) -> Task:
    fn, unit = options["fn"], options["unit"]
    if fn is None or fn % 4 or not 12 <= fn <= 96:
        raise ConfigError(f"cad: option fn must be a multiple of 4 in 12..96, got {fn!r}")
    if unit not in UNITS:
        raise ConfigError(f"cad: option unit must be 'whole' or 'step', got {unit!r}")
    params = sample(seed, level)
    part = build(level, params, fn)
    steps = len(part.steps)
    reference = {"seed": seed, "level": level, "fn": fn, "params": params}
    metadata = {"tools": TOOLS, "level": level, "seed": seed, "family": FAMILY[level], "steps": steps,
                "unit": unit}
    if unit == "whole":
        return Task(id=f"cad/L{level}/{seed}", domain="cad", prompt=({"role": "user", "content": goal_text(part)},),
                    reference=reference, verifiers=("env_score",), env="cad", limits=whole_limits(level, steps),
                    metadata=metadata)
    k = subunit_step(seed, level, steps)
    return Task(id=f"cad/L{level}/{seed}/s{k}", domain="cad",
                prompt=({"role": "user", "content": subunit_text(part, k)},),
                reference={**reference, "step": k}, verifiers=("env_score",), env="cad",
                limits=subunit_limits(part, level, k), metadata={**metadata, "step": k})
