"""Every shipped terminal task folder passes `posttrain tasks validate`: through the terminal env in the
real sandbox, its untouched state fails and its oracle solution passes (CI runs this on every change)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import posttrain.domains.terminal.validate as _validate
from posttrain.domains.terminal.validate import validate_dir

SHIPPED = Path(_validate.__file__).parent / "data"


def test_every_shipped_task_validates():
    folders = sorted(p.name for p in SHIPPED.iterdir() if p.is_dir())
    results = asyncio.run(validate_dir(SHIPPED, jobs=2))
    assert [r.task for r in results] == folders and len(folders) >= 12
    bad = [f"{r.task}: {r.reason}" for r in results if not r.ok]
    assert not bad, bad
    assert all(r.initial is not None and r.initial < 1.0 and r.oracle == 1.0 for r in results)
