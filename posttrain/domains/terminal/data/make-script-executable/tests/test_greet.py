"""tools/greet runs as a command (execute bit + shebang, exec'd without a shell) and greets every name."""

import os
import random
import stat
import subprocess
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
GREET = WORK / "tools" / "greet"


def run(*names):
    try:
        return subprocess.run([str(GREET), *names], cwd=WORK, capture_output=True, text=True, timeout=10,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except OSError as e:  # no execute bit, or no shebang (ENOEXEC): exec itself fails
        raise AssertionError(f"cannot run tools/greet directly: {e}") from e


def test_is_executable_with_a_shebang():
    assert GREET.stat().st_mode & stat.S_IXUSR
    assert GREET.read_text().startswith("#!")


def test_greets_names():
    rng = random.Random(12)
    pool = ["Ada", "Linus", "Grace", "Ken", "Barbara", "Dennis", "Margaret"]
    for _ in range(4):
        names = rng.sample(pool, rng.randint(1, 4))
        out = run(*names)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "".join(f"Hello, {n}!\n" for n in names)


def test_default_name():
    out = run()
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Hello, world!\n"
