"""Writes that never leave a half-written file or directory where a reader would take it.

    write_text_atomic(path, text)   # temp file beside it, then os.replace
    with atomic_file(path, "wb") as f: ...   # the same for any writer
    replace_dir(built, dst)         # a fully built directory takes dst's place
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", fsync: bool = True) -> Iterator[IO]:
    """A file object writing a hidden temp file beside `path`, moved over `path` only once the
    block finishes without error (fsync=True also survives a power cut); on error the temp file
    is removed and the old content stays."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str, fsync: bool = False) -> Path:
    """Write `text` to `path` atomically (see `atomic_file`)."""
    with atomic_file(path, "w", fsync=fsync) as f:
        f.write(text)
    return Path(path)


def replace_dir(built: Path, dst: Path) -> None:
    """Put the complete directory `built` at `dst`, removing what was there."""
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(built, dst)
