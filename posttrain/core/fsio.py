"""Writes that never leave a half-written file or directory where a reader would take it,
and the one JSONL reader whose errors name the file and line.

    write_text_atomic(path, text)   # temp file beside it, then os.replace
    with atomic_file(path, "wb") as f: ...   # the same for any writer
    replace_dir(built, dst)         # a fully built directory takes dst's place
    for where, record in read_jsonl(path, required=("task_id",)): ...   # where = "file:line"
    write_checked_pickle(path, payload); read_checked_pickle(path, what)   # MAGIC + pickle + sha256 trailer
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from posttrain.core.errors import CheckpointError, DataError, one_line


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


# ---- checked pickles (the replay buffer's entries, the RL scheduler's queue)

_MAGIC = b"posttrain-replay-buffer 1\n"
_TRAILER = b"sha256:"
_DIGEST_HEX = 64
_PICKLE_PROTOCOL = 5



class _HashingWriter:
    """A file wrapper that hashes everything written through it (pickle streams; no big bytes copy)."""

    def __init__(self, f):
        self.f = f
        self.sha = hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.f.write(data)


def write_checked_pickle(path: Path, payload: dict) -> None:
    """MAGIC + pickle + 'sha256:<hex>', written atomically (temp file, fsync, os.replace)."""
    with atomic_file(path, "wb", fsync=True) as f:
        f.write(_MAGIC)
        writer = _HashingWriter(f)
        pickle.dump(payload, writer, protocol=_PICKLE_PROTOCOL)
        f.write(_TRAILER + writer.sha.hexdigest().encode("ascii"))


def read_checked_pickle(path: Path, what: str = "replay buffer") -> dict:
    """A payload written by `write_checked_pickle`, checked (header, checksum); `what` names it in errors."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{what} file {path} is missing") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {what} file {path}: {one_line(e, None)}") from None
    tail = len(_TRAILER) + _DIGEST_HEX
    if not data.startswith(_MAGIC):
        raise CheckpointError(f"{what} file {path} is not a posttrain {what} (bad header)")
    if len(data) < len(_MAGIC) + tail or not data[-tail:].startswith(_TRAILER):
        raise CheckpointError(f"{what} file {path} is truncated (no checksum trailer)")
    body = data[len(_MAGIC) : -tail]
    if hashlib.sha256(body).hexdigest().encode("ascii") != data[-_DIGEST_HEX:]:
        raise CheckpointError(f"{what} file {path} is corrupt (checksum mismatch)")
    try:
        payload = pickle.loads(body)
    except Exception as e:  # the classes it names may have moved or changed
        raise CheckpointError(f"{what} file {path} cannot be unpickled: {one_line(e, None)}") from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{what} file {path} is malformed: payload is {type(payload).__name__}, not dict")
    return payload
