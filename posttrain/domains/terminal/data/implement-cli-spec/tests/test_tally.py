"""tally.py against a reference over seeded generated texts, every flag, and the exit codes."""

import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
PY = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
VOCAB = ["apple", "Apple", "APPLE", "pear", "Zoo", "zoo", "a", "I", "it", "banana", "kiwi", "Kiwi", "fig", "date"]
SEPARATORS = [" ", "  ", "\n", ", ", ". ", "--", "3", "_", "'", "\t", "!? "]


def tally(*args):
    return subprocess.run([PY, "tally.py", *map(str, args)], cwd=WORK, capture_output=True, text=True, timeout=10)


def reference(text, ignore_case=False, top=None, min_length=1):
    words = re.findall(r"[A-Za-z]+", text)
    if ignore_case:
        words = [w.lower() for w in words]
    counts = Counter(w for w in words if len(w) >= min_length)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "".join(f"{c} {w}\n" for w, c in rows[:top])


def make_text(rng):
    return "".join(rng.choice(VOCAB) + rng.choice(SEPARATORS) for _ in range(rng.randint(20, 120)))


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    rng = random.Random(77)
    paths = []
    for i in range(5):
        path = tmp_path_factory.mktemp("texts") / f"text{i}.txt"
        path.write_text(make_text(rng), encoding="utf-8")
        paths.append(path)
    return paths


def test_plain_counts(texts):
    for path in texts:
        run = tally(path)
        assert run.returncode == 0, run.stderr
        assert run.stdout == reference(path.read_text(encoding="utf-8")), path.read_text(encoding="utf-8")


@pytest.mark.parametrize("flags", [
    {"ignore_case": True},
    {"top": 1},
    {"top": 4},
    {"min_length": 4},
    {"ignore_case": True, "top": 3, "min_length": 3},
    {"top": 100},
])
def test_flags(texts, flags):
    for path in texts:
        args = (["--ignore-case"] if flags.get("ignore_case") else []) + \
               (["--top", flags["top"]] if "top" in flags else []) + \
               (["--min-length", flags["min_length"]] if "min_length" in flags else [])
        run = tally(*args, path)
        assert run.returncode == 0, run.stderr
        assert run.stdout == reference(path.read_text(encoding="utf-8"), **flags), (args, path.read_text())


def test_flags_after_the_file(texts):
    run = tally(texts[0], "--top", 2, "--ignore-case")
    assert run.returncode == 0, run.stderr
    assert run.stdout == reference(texts[0].read_text(encoding="utf-8"), ignore_case=True, top=2)


def test_no_words_prints_nothing(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("123 -- ... 456\n")
    run = tally(path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""


def test_missing_file_exits_1(tmp_path):
    run = tally(tmp_path / "nope.txt")
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr.startswith("tally: ")
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [[], ["--top", "0", "FILE"], ["--top", "x", "FILE"], ["--min-length", "two", "FILE"],
                                  ["--bogus", "FILE"]])
def test_bad_usage_exits_2(texts, args):
    run = tally(*[str(texts[0]) if a == "FILE" else a for a in args])
    assert run.returncode == 2, (args, run.stdout, run.stderr)
    assert run.stdout == ""
