"""ring.c: the harness passes, and a driver of ours matches a Python model on seeded random operations."""

import hashlib
import random
import shutil
import subprocess
from collections import deque
from pathlib import Path

import pytest

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
DRIVER = Path(__file__).resolve().parent / "driver.c"
UNCHANGED = {"ring.h": "915b6f6dce6ac66b8cb50ff981a7938764627df19be48aac9d74323121a8f5ef", "test_ring.c": "7983f5dea74048812ec430c4fe91d0823ed6c04aecc925104f4d2462eb640463", "Makefile": "2c41326d38c76693ae73f20a4c3d878e2dd6318056c1c5d72b7f6cafd86b45be"}


def test_other_files_unchanged():
    for name, digest in UNCHANGED.items():
        assert hashlib.sha256((WORK / name).read_bytes()).hexdigest() == digest, name


def test_harness_passes(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(WORK, src, ignore=shutil.ignore_patterns("tests", "test_ring", "*.o"))
    run = subprocess.run(["make", "test"], cwd=src, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all ring tests passed" in run.stdout


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    out = tmp_path_factory.mktemp("driver") / "driver"
    run = subprocess.run(["gcc", "-O0", "-Wall", "-I", str(WORK), "-o", str(out), str(DRIVER), str(WORK / "ring.c")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return out


def model(cap, ops):
    ring, out = deque(), []
    for op in ops:
        if op[0] == "u":
            out.append("ok" if len(ring) < cap else "full")
            if len(ring) < cap:
                ring.append(op[1])
        elif op[0] == "o":
            out.append(str(ring.popleft()) if ring else "empty")
        elif op[0] == "e":
            out.append(str(ring[op[1]]) if op[1] < len(ring) else "none")
        else:
            out.append(str(len(ring)))
    return out


@pytest.mark.parametrize("cap", [1, 2, 3, 5, 8])
def test_random_operations_match_the_model(driver, cap):
    rng = random.Random(cap * 1000 + 7)
    ops = []
    for _ in range(400):
        kind = rng.choices("uoec", [5, 3, 2, 1])[0]
        ops.append((kind, rng.randint(-1000, 1000)) if kind == "u" else (kind, rng.randint(0, cap)) if kind == "e"
                   else (kind,))
    text = "\n".join(" ".join(map(str, op)) for op in ops) + "\n"
    run = subprocess.run([str(driver), str(cap)], input=text, capture_output=True, text=True, timeout=10)
    got = run.stdout.splitlines()
    assert "GUARD" not in got, "the ring wrote outside its storage"
    assert run.returncode == 0
    assert got == model(cap, ops)
