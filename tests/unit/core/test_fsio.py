"""core/fsio.py: the one place for atomic files and directories."""

from __future__ import annotations

import errno
import os
import re
import socket

import pytest

from posttrain.core.fsio import (
    atomic_file, atomic_path, fsync_tree, is_disk_full, remove_stale, replace_dir, write_text_atomic,
)


def test_atomic_file_keeps_the_old_content_on_error(tmp_path):
    path = write_text_atomic(tmp_path / "a" / "f.txt", "old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert path.read_text() == "old" and os.listdir(path.parent) == ["f.txt"]


def test_atomic_path_for_writers_that_want_a_name_and_perms(tmp_path):
    dst = tmp_path / "w.bin"
    with atomic_path(dst, perms=0o640) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".w.bin.tmp-")
        tmp.write_bytes(b"xyz")
    assert dst.read_bytes() == b"xyz" and (dst.stat().st_mode & 0o777) == 0o640


def test_replace_dir_swaps_a_complete_tree_in(tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "old").write_text("1")
    built = tmp_path / ".out.tmp"
    built.mkdir()
    (built / "new").write_text("2")
    fsync_tree(built)
    replace_dir(built, dst, fsync=True)
    assert os.listdir(dst) == ["new"] and sorted(os.listdir(tmp_path)) == ["out"]
    built.mkdir()
    replace_dir(built, tmp_path / "fresh")  # nothing there before
    assert (tmp_path / "fresh").is_dir()


def test_remove_stale_only_takes_dead_writers_of_this_host(tmp_path):
    pattern = re.compile(r"^\.tmp-(?P<host>.+)-(?P<pid>\d+)$")
    host = socket.gethostname()
    dead, alive, other = (tmp_path / f".tmp-{host}-999999999", tmp_path / f".tmp-{host}-{os.getppid()}",
                          tmp_path / ".tmp-elsewhere-999999999")
    for d in (dead, alive, other):
        d.mkdir()
    remove_stale(tmp_path, pattern)
    assert not dead.exists() and alive.exists() and other.exists()


def test_is_disk_full_follows_the_cause_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("write failed") from e
    except RuntimeError as e:
        assert is_disk_full(e)
    assert not is_disk_full(ValueError("x")) and not is_disk_full(None)
