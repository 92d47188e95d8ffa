"""Book-keeping for building reasoning-gym items: skipped items, build times, the held-out cache.

    record_skip("maze", key, 1000939)    # an item whose generator raised (counted once per item)
    skipped_items()                      # -> {"maze": 1}
    build_report()                       # -> {"maze": {"items": 1000, "seconds": 0.12, "skipped": 1, "cached": 0}}
    cached_questions(domain, key, size, build)   # held-out questions: memory, else disk, else build()
    reset()                              # forget counts and the in-memory cache (tests)

`posttrain.domains.reasoning_gym.source` calls these while it builds items and re-exports the readers. The
on-disk cache holds held-out question sets as gzip JSON under `cache_dir()` (env
`POSTTRAIN_RG_CACHE`, default `.cache/posttrain/rg_holdout`, `off` disables it), one file per
(domain, config key, size, reasoning-gym version); a file that cannot be read is rebuilt.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

from posttrain.core.fsio import atomic_file

DEFAULT_CACHE = ".cache/posttrain/rg_holdout"

_skipped: dict[str, set[tuple[str, int]]] = {}  # domain -> {(config key, item seed)}
_report: dict[str, dict[str, float]] = {}  # domain -> items, seconds, cached
_memory: dict[tuple[str, str, int], frozenset[str]] = {}


def record_skip(domain: str, config_key: str, item_seed: int) -> None:
    """Count an item whose generator raised; the same item counts once however often it is built."""
    _skipped.setdefault(domain, set()).add((config_key, item_seed))


def record_build(domain: str, items: int, seconds: float, cached: int = 0) -> None:
    """Add `items` built in `seconds` (and `cached` items read from the cache instead) to the report."""
    row = _report.setdefault(domain, {"items": 0, "seconds": 0.0, "cached": 0})
    row["items"] += items
    row["seconds"] += seconds
    row["cached"] += cached


def skipped_items() -> dict[str, int]:
    """Per domain, how many distinct items were skipped because their generator raised."""
    return {d: len(items) for d, items in sorted(_skipped.items()) if items}


def build_report() -> dict[str, dict[str, float]]:
    """Per domain: `items` generated, `seconds` spent generating them, `skipped` items whose generator
    raised, `cached` held-out items read from the cache instead of generated (since the last `reset`)."""
    domains = sorted(set(_report) | set(_skipped))
    out = {}
    for d in domains:
        row = _report.get(d, {"items": 0, "seconds": 0.0, "cached": 0})
        out[d] = {"items": int(row["items"]), "seconds": round(row["seconds"], 3),
                  "skipped": len(_skipped.get(d, ())), "cached": int(row["cached"])}
    return out


def reset() -> None:
    """Forget skip counts, the build report and the in-memory held-out sets (the disk cache stays)."""
    _skipped.clear()
    _report.clear()
    _memory.clear()


def cache_dir() -> Path | None:
    """Where held-out question sets are cached; None when `POSTTRAIN_RG_CACHE=off`."""
    where = os.environ.get("POSTTRAIN_RG_CACHE", DEFAULT_CACHE)
    return None if where.strip().lower() in ("", "off", "none", "0") else Path(where)


def _rg_version() -> str:
    import reasoning_gym

    return str(getattr(reasoning_gym, "__version__", "unknown"))


def cache_path(domain: str, config_key: str, size: int) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(json.dumps([domain, config_key, size, _rg_version()]).encode()).hexdigest()[:20]
    return root / f"{domain}-{size}-{digest}.json.gz"


def _read(path: Path, size: int) -> tuple[list[str], list[int]] | None:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        questions, skipped = data["questions"], data.get("skipped", [])
        if data.get("size") != size or not isinstance(questions, list) or len(questions) != size:
            return None
        return [str(q) for q in questions], [int(s) for s in skipped]
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None


def _write(path: Path, domain: str, config_key: str, size: int, questions: list[str], skipped: list[int]) -> None:
    try:
        with atomic_file(path, "wb", fsync=False) as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
            json.dump({"domain": domain, "config": config_key, "size": size, "rg_version": _rg_version(),
                       "skipped": skipped, "questions": questions}, f)
    except OSError:  # a read-only or full disk only costs the next run a rebuild
        pass


def cached_questions(domain: str, config_key: str, size: int,
                     build: Callable[[], tuple[list[str], list[int]]]) -> frozenset[str]:
    """The held-out questions of (domain, config key, size): from memory, else the disk cache (counted as
    `cached` in the report, its skipped items counted), else `build()` -> (questions, seeds of the items
    it skipped), then stored in both."""
    mem_key = (domain, config_key, size)
    if mem_key in _memory:
        return _memory[mem_key]
    path = cache_path(domain, config_key, size)
    found = _read(path, size) if path is not None and path.exists() else None
    if found is not None:  # its skipped items count as if built here
        questions, skipped = found
        record_build(domain, 0, 0.0, cached=len(questions))
        for seed in skipped:
            record_skip(domain, config_key, seed)
    else:
        questions, skipped = build()
        if path is not None:
            _write(path, domain, config_key, size, questions, skipped)
    _memory[mem_key] = frozenset(questions)
    return _memory[mem_key]


def timed() -> Callable[[], float]:
    """A stopwatch: call the result for the seconds since `timed()`."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
