"""BFCL v4's data in the user's cache: `posttrain tasks fetch bfcl`.

The `bfcl-eval` wheel pins dozens of model SDKs, so it cannot be a plain dependency; what we read
of it is data only (its JSON files, and the multi-turn API classes' sources as text, run inside the
sandbox). This module downloads the one wheel version the checker was validated on with
`pip download --no-deps` (the package registry is the only thing ever fetched), checks its sha256,
and unpacks just those files into

    $POSTTRAIN_CACHE/bfcl/<version>/bfcl_eval/      (POSTTRAIN_CACHE defaults to ~/.cache/posttrain)

atomically: a `.complete` marker naming the wheel's checksum is written last, so an interrupted
fetch leaves nothing that looks usable. Later runs read the cache offline; `fetch` is a no-op when
the cache is complete. `data.bfcl_dir()` looks here first, then at an installed `bfcl_eval`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from posttrain.core.errors import ConfigError, DataError, one_line
from posttrain.core.fsio import cache_root, replace_dir

VERSION = "2026.3.23"
REQUIREMENT = f"bfcl-eval=={VERSION}"
WHEEL = f"bfcl_eval-{VERSION}-py3-none-any.whl"
SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
FETCH_COMMAND = "posttrain tasks fetch bfcl"
# what is unpacked: the data files and the multi-turn classes' sources (read as text)
KEEP = ("bfcl_eval/data/", "bfcl_eval/eval_checker/multi_turn_eval/func_source_code/")
MARKER = ".complete"


def version_dir() -> Path:
    return cache_root() / "bfcl" / VERSION


def fetched_dir() -> Path | None:
    """The cached `bfcl_eval` directory when a complete fetch of the pinned version is there."""
    marker = version_dir() / MARKER
    try:
        if marker.read_text().strip() == SHA256:
            return version_dir() / "bfcl_eval"
    except OSError:
        pass
    return None


def _download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
           REQUIREMENT]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = dest / WHEEL
    if done.returncode != 0 or not wheel.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise ConfigError(f"bfcl: pip download {REQUIREMENT} failed: {one_line(tail[-1] if tail else 'no output')}")
    return wheel


def _check(wheel: Path) -> None:
    sha = hashlib.sha256()
    with open(wheel, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    if sha.hexdigest() != SHA256:
        raise DataError(f"bfcl: {wheel} has sha256 {sha.hexdigest()}, expected {SHA256} ({REQUIREMENT}): "
                        "refusing to use it")


def _unpack(wheel: Path, into: Path) -> int:
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(KEEP):
                continue
            parts = Path(name).parts
            if name.startswith("/") or ".." in parts:  # a wheel is data here: no path leaves `into`
                raise DataError(f"bfcl: {wheel} holds an unsafe path {name!r}")
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            n += 1
    if n == 0:
        raise DataError(f"bfcl: {wheel} holds none of {', '.join(KEEP)}")
    return n


def fetch(force: bool = False, wheel: str | os.PathLike | None = None) -> Path:
    """The cached `bfcl_eval` data directory, downloading and unpacking the pinned wheel unless a
    complete copy is there (`force`: fetch again). `wheel`: use this local wheel file instead of
    downloading (it must still match the pinned checksum)."""
    have = fetched_dir()
    if have is not None and not force:
        return have
    root = version_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{VERSION}.") as tmp:
        tmp_path = Path(tmp)
        source = Path(wheel) if wheel is not None else _download(tmp_path / "wheel")
        _check(source)
        built = tmp_path / "built"
        _unpack(source, built)
        (built / MARKER).write_text(SHA256 + "\n")
        replace_dir(built, root)  # the old copy stays whole until the new one is in place
    return root / "bfcl_eval"
