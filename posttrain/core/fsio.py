"""Writes that never leave a half-written file or directory where a reader would take it,
and the one JSONL reader whose errors name the file and line.

    write_text_atomic(path, text)   # temp file beside it, then os.replace
    with atomic_file(path, "wb") as f: ...   # the same for any writer
    replace_dir(built, dst)         # a fully built directory takes dst's place
    for where, record in read_jsonl(path, required=("task_id",)): ...   # where = "file:line"
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from posttrain.core.errors import DataError


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


def read_jsonl(path: str | os.PathLike, required: tuple[str, ...] = ()) -> Iterator[tuple[str, dict]]:
    """(`file:line`, object) for each non-blank line of a JSONL file (`.gz` read as gzip); each
    `required` key must hold a string. Anything else is a DataError naming the file and line."""
    import gzip
    import json

    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{p}:{lineno}"
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise DataError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
            for key in required:
                if not isinstance(record.get(key), str):
                    what = "missing" if key not in record else f"a {type(record[key]).__name__}, not a string"
                    raise DataError(f"{where}: {key!r} is {what}")
            yield where, record
