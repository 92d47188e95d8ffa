"""Extra tables an eval writes beside its pass@k rows, each from the tasks and sample records alone.

    extras = run_analyses(tasks, result.records, engine)   # {"long_context": {...}, "safety": {...}}

An analysis is a function `summarize(tasks, records, engine) -> dict | None` (None: none of its
tasks are in this eval); its dict is JSON-ready and lands under its key in the eval JSON, where
the report renders it. ANALYSES maps each key to "module:function", imported on use.
"""

from __future__ import annotations

from typing import Any, Sequence

from posttrain.core.registry import resolve
from posttrain.core.types import Task
from posttrain.eval.evaluate import SampleRecord

ANALYSES: dict[str, str] = {"long_context": "posttrain.domains.longctx.analysis:summarize",
                             "safety": "posttrain.domains.redteam.source:summarize"}


def run_analyses(tasks: Sequence[Task], records: Sequence[SampleRecord], engine=None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, target in ANALYSES.items():
        data = resolve(target)(tasks, records, engine)
        if data is not None:
            out[key] = data
    return out
