"""Writes that never leave a half-written file or directory where a reader would take it,
and the one JSONL reader whose errors name the file and line.

    write_text_atomic(path, text)   # temp file beside it, then os.replace
    with atomic_file(path, "wb") as f: ...   # the same for any writer
    with atomic_path(path) as tmp: save_file(..., tmp)   # for writers that want a file name
    replace_dir(built, dst)         # a fully built directory takes dst's place
    fsync_tree(top); fsync_dir(d)   # durability of a directory built by hand
    for where, record in read_jsonl(path, required=("task_id",)): ...   # where = "file:line"
    write_checked_pickle(path, payload); read_checked_pickle(path, what)   # MAGIC + pickle + sha256 trailer
"""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import re
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from posttrain.core.errors import CheckpointError, DataError, one_line


def cache_root() -> Path:
    """Where posttrain keeps fetched and generated data: $POSTTRAIN_CACHE, else ~/.cache/posttrain."""
    return Path(os.environ.get("POSTTRAIN_CACHE") or Path.home() / ".cache" / "posttrain")


@contextmanager
def atomic_path(path: str | os.PathLike, fsync: bool = True, perms: int | None = None) -> Iterator[Path]:
    """A hidden temp path beside `path` for the block to write; moved over `path` only once the block
    finishes without error (fsync=True also survives a power cut; `perms` sets its mode bits first).
    On error the temp file is removed and the old content stays."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if fsync:
            _fsync_file(tmp)
        if perms is not None:
            os.chmod(tmp, perms)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", fsync: bool = True, perms: int | None = None) -> Iterator[IO]:
    """A file object writing a hidden temp file beside `path` (see `atomic_path`)."""
    with atomic_path(path, fsync=fsync, perms=perms) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def write_text_atomic(path: str | os.PathLike, text: str, fsync: bool = False) -> Path:
    """Write `text` to `path` atomically (see `atomic_file`)."""
    with atomic_file(path, "w", fsync=fsync) as f:
        f.write(text)
    return Path(path)


def replace_dir(built: Path, dst: Path, fsync: bool = False) -> None:
    """Put the complete directory `built` at `dst`: what was there is renamed aside
    (`.old-<name>-<host>-<pid>`), `built` renamed in, then the old one removed, so `dst` is never
    missing a complete tree. fsync=True also syncs the parent directory after the rename."""
    built, dst = Path(built), Path(dst)
    old = None
    if dst.exists():
        old = dst.with_name(f".old-{dst.name}-{socket.gethostname()}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(dst, old)
    os.rename(built, dst)
    if fsync:
        fsync_dir(dst.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def fsync_tree(top: str | os.PathLike) -> None:
    """fsync every file and folder under `top` (bottom up), `top` included."""
    for dirpath, _, filenames in os.walk(top, topdown=False):
        for name in filenames:
            _fsync_file(os.path.join(dirpath, name))
        fsync_dir(dirpath)


def fsync_dir(d: str | os.PathLike) -> None:
    """fsync a directory (its entries survive a power cut); filesystems that cannot are skipped."""
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _fsync_file(f: str | os.PathLike) -> None:
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale(root: Path, pattern: re.Pattern) -> None:
    """Remove folders under `root` left by crashed writers of this host: names matching `pattern`,
    whose `host` group is this host and whose `pid` group names a process that is gone."""
    host = socket.gethostname()
    for child in root.iterdir():
        m = pattern.match(child.name)
        if not m or m.group("host") != host or not child.is_dir():
            continue
        pid = int(m.group("pid"))
        if pid != os.getpid() and _pid_alive(pid):
            continue
        shutil.rmtree(child, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_disk_full(e: BaseException | None) -> bool:
    """Whether `e` or an error in its cause/context chain says the disk (or quota) is full."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e).lower()
        if "no space left" in text or "os error 28" in text or "disk quota" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


class WriteRecorder:
    """File wrapper that keeps the first OSError of a write (torch.save, for one, reports a failed
    write as 'unexpected pos'; `error` holds the real one)."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.fh.flush()


def read_jsonl(path: str | os.PathLike, required: tuple[str, ...] = (),
               errors: list[str] | None = None) -> list[tuple[str, dict]]:
    """(`file:line`, object) for each non-blank line of a JSONL file (`.gz` read as gzip); each
    `required` key must hold a string. The whole file is read first: bad lines are one DataError that
    names the first (`file:line: why`) and counts the rest, with their lines (`bad_lines`); or, when
    `errors` is a list, they are appended to it ("file:line: why") and skipped."""
    import gzip
    import json

    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found")
    opener = gzip.open if p.suffix == ".gz" else open
    out, bad = [], []
    with opener(p, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{p}:{lineno}"
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                bad.append(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
                continue
            except json.JSONDecodeError as e:
                bad.append(f"{where}: not valid JSON ({e.msg})")
                continue
            if not isinstance(record, dict):
                bad.append(f"{where}: expected a JSON object, got {type(record).__name__}")
                continue
            missing = [k for k in required if not isinstance(record.get(k), str)]
            if missing:
                key = missing[0]
                what = "missing" if key not in record else f"a {type(record[key]).__name__}, not a string"
                bad.append(f"{where}: {key!r} is {what}")
                continue
            out.append((where, record))
    if bad and errors is None:
        raise bad_lines(bad)
    if errors is not None:
        errors.extend(bad)
    return out


def bad_lines(problems: list[str], shown: int = 5) -> DataError:
    """One DataError for every bad line of a file, found in one pass: the first in full, then the
    count and the next few lines' places (`problems`: "file:line: why" each)."""
    first, rest = problems[0], problems[1:]
    if not rest:
        return DataError(first)
    tails = [q.split(": ", 1)[0].rpartition(":")[2] for q in rest[:shown]]
    places = ("line " if all(t.isdigit() for t in tails) else "") + ", ".join(tails)
    more = f" and {len(rest) - shown} more" if len(rest) > shown else ""
    return DataError(f"{first} (and {len(rest)} more bad line{'s' * (len(rest) > 1)}: {places}{more})")


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
