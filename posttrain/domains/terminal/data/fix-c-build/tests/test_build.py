"""make builds calc from a clean copy, the C sources are unchanged, calc is right on generated inputs."""

import hashlib
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
SOURCES = {"main.c": "0b9c2e175dbe7b9c233f197471aadede1510aa05d946a522e0036db76e5310fa", "mathutil.c": "96b97e56c90bf58c7cd16936b0ae22027021cfb94113c5d428ffd124940b0f30"}


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    build = tmp_path_factory.mktemp("build") / "src"
    shutil.copytree(WORK, build, ignore=shutil.ignore_patterns("tests", "*.o", "calc", ".pytest_cache"))
    run = subprocess.run(["make"], cwd=build, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (build / "calc").is_file()
    return build / "calc"


def result(calc, *args):
    run = subprocess.run([str(calc), *map(str, args)], capture_output=True, text=True, timeout=10)
    assert run.returncode == 0, (args, run.stderr)
    return int(run.stdout)


def test_sources_unchanged():
    for name, digest in SOURCES.items():
        assert hashlib.sha256((WORK / name).read_bytes()).hexdigest() == digest, name


def test_examples(calc):
    assert result(calc, "gcd", 12, 18) == 6
    assert result(calc, "lcm", 4, 6) == 12
    assert result(calc, "pow", 3, 4) == 81


def test_generated_inputs(calc):
    rng = random.Random(42)
    for _ in range(10):
        a, b = rng.randint(1, 10**6), rng.randint(1, 10**6)
        assert result(calc, "gcd", a, b) == math.gcd(a, b)
        assert result(calc, "lcm", a, b) == a * b // math.gcd(a, b)


def test_large_powers(calc):
    for base, exp in [(3, 30), (2, 40), (7, 20), (-5, 19), (10, 15)]:
        assert result(calc, "pow", base, exp) == base ** exp
