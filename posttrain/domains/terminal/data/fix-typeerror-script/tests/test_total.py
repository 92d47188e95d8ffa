"""total.py sums its integer arguments: checked over fixed and seeded generated inputs."""

import random
import shutil
import subprocess
import sys
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
PY = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def run(*args):
    return subprocess.run([PY, "total.py", *map(str, args)], cwd=WORK, capture_output=True, text=True, timeout=10)


def test_example():
    out = run(3, 4, 5)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Total: 12\n"


def test_no_numbers():
    out = run()
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Total: 0\n"


def test_generated_inputs():
    rng = random.Random(1234)
    for _ in range(8):
        nums = [rng.randint(-500, 500) for _ in range(rng.randint(1, 9))]
        out = run(*nums)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"Total: {sum(nums)}\n", nums
