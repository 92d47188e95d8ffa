"""The long-context analysis of an eval: accuracy of the needle probes by (prompt length, depth).

    ANALYSES["long_context"] = "posttrain.domains.longctx.analysis:summarize"      # in analyses.py
    data = summarize(tasks, result.records, engine)                   # None: no long-context tasks
    html = render_long_context(data)                                  # posttrain/domains/longctx/report.py

The probes are the task sources `needle`, `needle_multi` and `needle_multihop` (posttrain/domains/longctx/source.py,
verified by `needle`); their tasks carry `metadata = {"source": "longctx", "variant", "length", "depth"}`.
With the paged engine their long prompts are prefilled in chunks of the engine's
`max_num_batched_tokens` (its scheduler's step budget), and a prompt at or beyond its `max_model_len`
is refused, so the nominal lengths must stay within the model's context.

Format (JSON-ready):

    {"variants": {VARIANT: {"lengths": [L0, L1, ...],            # nominal lengths present, ascending
                            "depths": [d0, d1, ...],             # depths present, ascending
                            "accuracy": [[...], ...],            # [length row][depth col]: correct samples /
                                                                 #   samples, None for a cell without any
                                                                 #   (a cell no task fell in, or unsampled)
                            "n": [[...], ...],                   # samples per cell (tasks x K)
                            "prompt_tokens": [[...], ...]}},     # mean rendered prompt tokens, None if empty
     "kv_bytes_per_token": int | None,   # engine.kv_stats()["bytes_per_token"]; None without kv_stats
     "max_prompt_tokens": int}           # the longest prompt among the probes' samples

A sample is correct as the eval counts it (every value exact, see posttrain/domains/longctx/needle.py).
Variants appear in the order of their first task.
"""

from __future__ import annotations

from typing import Any, Sequence

from posttrain.core.types import Task

SampleRecord = Any  # eval/evaluate.py SampleRecord: eval passes its records in (domains never import eval)

SOURCE = "longctx"


def _grid(cells: dict[tuple[int, float], list[SampleRecord]]) -> dict[str, Any]:
    lengths = sorted({length for length, _ in cells})
    depths = sorted({depth for _, depth in cells})

    def table(fn) -> list[list[Any]]:
        return [[fn(cells.get((length, depth), [])) for depth in depths] for length in lengths]

    return {
        "lengths": lengths,
        "depths": depths,
        "accuracy": table(lambda rs: sum(r.correct for r in rs) / len(rs) if rs else None),
        "n": table(len),
        "prompt_tokens": table(lambda rs: sum(r.prompt_tokens for r in rs) / len(rs) if rs else None),
    }


def _cell(meta) -> tuple[int, float]:
    return int(meta["length"]), float(meta["depth"])


def kv_bytes_per_token(engine) -> int | None:
    stats = getattr(engine, "kv_stats", None)
    if stats is None:
        return None
    value = stats().get("bytes_per_token")
    return None if value is None else int(value)


def summarize(tasks: Sequence[Task], records: Sequence[SampleRecord], engine=None) -> dict[str, Any] | None:
    """The long-context table of an eval (module docstring), None when it has no probe tasks."""
    probes = {t.id: t.metadata for t in tasks if (t.metadata or {}).get("source") == SOURCE}
    if not probes:
        return None
    variants: dict[str, dict[tuple[int, float], list[SampleRecord]]] = {}
    for meta in probes.values():  # every task's cell, in task order, even one whose samples are missing
        variants.setdefault(str(meta["variant"]), {}).setdefault(_cell(meta), [])
    mine = [r for r in records if r.task_id in probes]
    for r in mine:
        meta = probes[r.task_id]
        variants[str(meta["variant"])][_cell(meta)].append(r)
    return {
        "variants": {name: _grid(cells) for name, cells in variants.items()},
        "kv_bytes_per_token": kv_bytes_per_token(engine),
        "max_prompt_tokens": max((r.prompt_tokens for r in mine), default=0),
    }
