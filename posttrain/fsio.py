"""Writes that never leave a half-written file or directory where a reader would take it.

    write_text_atomic(path, text)   # temp file beside it, then os.replace
    replace_dir(built, dst)         # a fully built directory takes dst's place
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str, *, fsync: bool = False) -> Path:
    """Write `text` to `path` through a hidden temp file in the same directory; the old
    content stays until the new one is complete (fsync=True also survives a power cut)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def replace_dir(built: Path, dst: Path) -> None:
    """Put the complete directory `built` at `dst`, removing what was there."""
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(built, dst)
