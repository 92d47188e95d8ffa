"""Request checks and the per-run work directory: write inputs, measure, fetch outputs safely.

Every run gets a fresh host directory, filled only from the request, and removed afterwards,
so two runs of the same request start from the same files. Fetching never follows a link:
each path component is opened with O_NOFOLLOW relative to the work dir, and only regular
files are read, so a program cannot plant a symlink (or FIFO) that makes the host read
something outside its work dir or block.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import stat
import tempfile
from typing import Mapping

from posttrain.sandbox.types import LANGUAGES, RunRequest

SOURCE_NAMES = {"python": "main.py", "bash": "main.sh", "c": "main.c", "cpp": "main.cpp"}
BINARY_NAME = "main"  # compiled languages write their program here


def check_relative_path(field: str, path: object) -> str:
    """Return `path` normalised; ValueError naming the field unless it is a plain relative path."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"{field}: path must be a non-empty string, got {path!r}")
    if "\x00" in path:
        raise ValueError(f"{field}: path {path!r} contains a NUL byte")
    if path.startswith("/"):
        raise ValueError(f"{field}: path {path!r} is absolute; use a path relative to the work dir")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise ValueError(f"{field}: path {path!r} names the work dir itself, not a file")
    if ".." in parts:
        raise ValueError(f"{field}: path {path!r} contains '..'; it must stay inside the work dir")
    return "/".join(parts)


def _positive(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field}: must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{field}: must be a positive finite number, got {value!r}")


def validate(request: RunRequest) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """Check a request before anything runs; return (normalised files, normalised fetch paths)."""
    if request.language not in LANGUAGES:
        raise ValueError(
            f"language: unknown {request.language!r} (expected one of {', '.join(LANGUAGES)})"
        )
    if not isinstance(request.code, str):
        raise ValueError(f"code: must be a string, got {type(request.code).__name__}")
    if not isinstance(request.stdin, str):
        raise ValueError(f"stdin: must be a string, got {type(request.stdin).__name__}")
    _positive("compile_timeout", request.compile_timeout)
    _positive("run_timeout", request.run_timeout)
    _positive("memory_limit_mb", request.memory_limit_mb)
    _positive("output_limit_bytes", request.output_limit_bytes)
    reserved = {SOURCE_NAMES[request.language]}
    if request.language in ("c", "cpp"):
        reserved.add(BINARY_NAME)
    files: dict[str, bytes] = {}
    if not isinstance(request.files, Mapping):
        raise ValueError(f"files: must map relative paths to bytes, got {type(request.files).__name__}")
    for raw, content in request.files.items():
        path = check_relative_path("files", raw)
        if path in reserved:
            raise ValueError(f"files: {path!r} is reserved for the program itself in {request.language}")
        if isinstance(content, str):
            content = content.encode()
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise ValueError(f"files[{raw!r}]: content must be bytes, got {type(content).__name__}")
        files[path] = bytes(content)
    names = set(files)
    for path in files:  # "a" and "a/b" cannot both be files
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise ValueError(f"files: {path!r} needs {'/'.join(parts[:i])!r} to be a directory")
    if isinstance(request.fetch_files, (str, bytes)):
        raise ValueError("fetch_files: must be a list of paths, not a single string")
    fetch = tuple(check_relative_path("fetch_files", p) for p in request.fetch_files)
    return files, fetch


def make_work_dir(root: str, source_name: str, code: str, files: Mapping[str, bytes]) -> str:
    """A fresh directory under `root` holding the program and the input files."""
    path = tempfile.mkdtemp(prefix="run-", dir=root)
    for rel, content in {**files, source_name: code.encode()}.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(content)
    return path


def remove_work_dir(path: str) -> None:
    """Delete a work dir whatever the program did to its permissions."""

    def _retry(func, p, _exc):  # e.g. a directory chmod 000 when not running as root
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700, follow_symlinks=False)
        except OSError:
            pass
        try:
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=_retry)


def disk_usage(path: str, max_entries: int = 20000, max_depth: int = 64) -> float:
    """Bytes allocated under `path`; inf past `max_entries` entries or `max_depth` levels.

    Runs while the program may be renaming things, so it walks by directory fds opened with
    O_NOFOLLOW: a directory swapped for a symlink is skipped, never followed.
    """
    seen = 0

    def walk(dir_fd: int, depth: int) -> float:
        nonlocal seen
        if depth > max_depth:
            return math.inf
        total = 0.0
        try:
            with os.scandir(dir_fd) as it:
                for entry in it:
                    seen += 1
                    if seen > max_entries:
                        return math.inf
                    try:
                        st = entry.stat(follow_symlinks=False)
                        total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            fd = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
                            try:
                                total += walk(fd, depth + 1)
                            finally:
                                os.close(fd)
                    except OSError:
                        continue
                    if total == math.inf:
                        return total
        except OSError:
            pass
        return total

    try:
        root = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return 0
    try:
        return walk(root, 0)
    finally:
        os.close(root)


def fetch(work_dir: str, rel: str, max_bytes: int) -> bytes | None | str:
    """Content of a regular file at `rel`; None if absent; a reason string if refused."""
    fds: list[int] = []
    try:
        fds.append(os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY))
        parts = rel.split("/")
        for part in parts[:-1]:
            try:
                fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
            except NotADirectoryError:
                if stat.S_ISLNK(os.lstat(part, dir_fd=fds[-1]).st_mode):
                    return "symlink in path"
                return None  # a file where a directory should be: the path does not exist
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1])
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size > max_bytes:
            return f"larger than {max_bytes} bytes"
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= max_bytes else f"larger than {max_bytes} bytes"
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink in path"
        return f"unreadable ({e.strerror})"
    finally:
        for fd in fds:
            os.close(fd)
