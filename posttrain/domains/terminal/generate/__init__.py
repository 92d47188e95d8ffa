"""Generated terminal tasks: task folders in the shipped format (docs/terminal.md) from (family, level, seed).

    task = generate("traceback", level=2, seed=7)        # GenTask: instruction, files, oracle steps
    path = write_task(task, "out/")                       # out/traceback-l2-s7/ (instruction.md, task.toml, ...)
    family_of(seed, ["text", "build"])                   # the family a seed gets when several are allowed

Families (one module each): `text` (file and text processing: delimited records into output files),
`traceback` (a Python script with seeded bugs that raise), `unittest` (make a module's unit tests pass:
implement a stub, fix wrong functions), `build` (a C program's Makefile with seeded faults). Levels 1-3
add inputs, outputs, bugs or faults. A task is a pure function of (family, level, seed): the same
arguments give the same bytes on any machine (the random stream is seeded from their SHA-256).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from posttrain.core.errors import ConfigError
from posttrain.core.fsio import replace_dir
from posttrain.domains.terminal.generate import build, fix_script, text, unit_tests
from posttrain.domains.terminal.generate.common import GenTask, rng_for

FAMILIES: dict[str, Callable] = {"text": text.make, "traceback": fix_script.make, "unittest": unit_tests.make,
                                 "build": build.make}
LEVELS = 3


def family_of(seed: int, families: list[str]) -> str:
    return families[seed % len(families)]


def check_family(family: str) -> list[str]:
    """The families option `family` names ("" or "all": every family; else comma-separated names)."""
    if family in ("", "all"):
        return list(FAMILIES)
    names = [f.strip() for f in family.split(",") if f.strip()]
    bad = [f for f in names if f not in FAMILIES]
    if not names or bad:
        raise ConfigError(f"terminal_gen: unknown family {(bad or [family])[0]!r} (known: {', '.join(FAMILIES)})")
    return names


def generate(family: str, level: int, seed: int) -> GenTask:
    if family not in FAMILIES:
        raise ConfigError(f"terminal_gen: unknown family {family!r} (known: {', '.join(FAMILIES)})")
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= LEVELS:
        raise ConfigError(f"terminal_gen: level must be an integer in 1..{LEVELS}, got {level!r}")
    return FAMILIES[family](level, seed, rng_for(family, level, seed))


def _same(path: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    """`path` holds exactly `files` (bytes and modes)."""
    if not path.is_dir():
        return False
    found = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}
    if found != set(files):
        return False
    return all((path / rel).read_bytes() == data and (os.stat(path / rel).st_mode & 0o777) == mode
               for rel, (data, mode) in files.items())


def write_task(task: GenTask, root: str | os.PathLike, steps: list[str] | None = None,
               name: str | None = None) -> Path:
    """Write `task` as the folder root/NAME (replaced whole when it differs; left alone when identical).
    `steps`: another oracle (the tests drop a step); `name`: another folder name."""
    files = task.files(steps)
    root = Path(root)
    dst = root / (name or task.name)
    if _same(dst, files):
        return dst
    root.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".build-{dst.name}-", dir=root))
    try:
        for rel, (data, mode) in files.items():
            full = built / rel
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(data)
            os.chmod(full, mode)
        os.chmod(built, 0o755)
        replace_dir(built, dst)
    finally:
        if built.exists():
            shutil.rmtree(built, ignore_errors=True)
    return dst
