"""What every family of generated terminal tasks shares: the generated task, task.toml, test helpers.

    task = GenTask(name, instruction, environment={"data.csv": text}, tests={"test_x.py": text},
                   steps=["python3 - <<'PY'\\n...\\nPY"], category="data", tags=[...], level=2)
    task.files()     # {relative path: (bytes, mode)}: the folder in the shipped format (docs/terminal.md)

The oracle is a list of `steps` (shell snippets run in order from /work by solution/solve.sh); every
step does part of the work the tests check, so a solve.sh without any one step fails them (the
generator's tests drop a step and validate).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

LEVEL_DIFFICULTY = {1: "easy", 2: "medium", 3: "hard"}
LEVEL_LIMITS = {1: (150.0, 10), 2: (240.0, 16), 3: (360.0, 24)}  # agent timeout_sec, max_turns

WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kelp",
         "lumen", "maple", "nectar", "onyx", "pepper", "quartz", "raven", "sable", "tundra", "umber", "velvet",
         "willow", "xenon", "yarrow", "zephyr", "birch", "coral", "dune", "fern", "glacier", "heath", "iris",
         "jade", "krill", "lotus", "moss", "nova", "orchid", "pine", "quill", "reef", "slate", "thorn")
NOUNS = ("orders", "readings", "visits", "shipments", "tickets", "samples", "invoices", "requests", "batches")
KEYS = ("region", "team", "store", "site", "host", "channel", "station", "branch", "zone", "project")
VALUES = ("amount", "units", "weight", "latency", "score", "cost", "count", "duration", "size", "load")

# the first lines of every generated pytest file: the workspace, python3, a subprocess runner
TEST_HEAD = '''import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
HERE = Path(__file__).resolve().parent
PY = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run(args, cwd=WORK, stdin=None, timeout=20):
    return subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
'''


@dataclass
class GenTask:
    name: str  # the folder's name ([a-z0-9_-]+)
    instruction: str
    environment: dict[str, str]  # relative path -> text
    tests: dict[str, str]
    steps: list[str]  # the oracle: shell snippets run in order, cwd /work
    category: str
    tags: list[str]
    level: int
    modes: dict[str, int] = field(default_factory=dict)  # environment path -> mode (default 0o644)

    @property
    def difficulty(self) -> str:
        return LEVEL_DIFFICULTY[self.level]

    def solve_sh(self, steps: list[str] | None = None) -> str:
        body = "\n\n".join(f"# step {i + 1}\n{s.rstrip()}" for i, s in enumerate(self.steps if steps is None else steps))
        return f"#!/bin/bash\n# the oracle of a generated task: {len(self.steps)} steps\nset -e\ncd /work\n\n{body}\n"

    def task_toml(self) -> str:
        timeout, turns = LEVEL_LIMITS[self.level]
        tags = ", ".join(f'"{t}"' for t in self.tags)
        return (f'version = "1.0"\n\n[metadata]\ndifficulty = "{self.difficulty}"\ncategory = "{self.category}"\n'
                f"tags = [{tags}]\n\n[agent]\ntimeout_sec = {timeout}\nmax_turns = {turns}\n\n[verifier]\n"
                "timeout_sec = 90.0\n\n[limits]\ncommand_timeout_sec = 15.0\nmax_output_bytes = 8192\n")

    def files(self, steps: list[str] | None = None) -> dict[str, tuple[bytes, int]]:
        """The task folder: relative path -> (bytes, mode)."""
        out = {"instruction.md": (self.instruction.encode(), 0o644), "task.toml": (self.task_toml().encode(), 0o644),
               "solution/solve.sh": (self.solve_sh(steps).encode(), 0o755)}
        out.update({f"environment/{p}": (t.encode(), self.modes.get(p, 0o644)) for p, t in self.environment.items()})
        out.update({f"tests/{p}": (t.encode(), 0o644) for p, t in self.tests.items()})
        return out


def rng_for(family: str, level: int, seed: int) -> random.Random:
    """The one random stream of task (family, level, seed): independent of Python's hash seed."""
    digest = hashlib.sha256(f"terminal_gen/{family}/{level}/{seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def replace_step(path: str, old: str, new: str) -> str:
    """An oracle step: replace the exact text `old` by `new` once in `path` (fails when `old` is not there)."""
    return (f"python3 - <<'PYEOF'\nfrom pathlib import Path\np = Path({path!r})\ns = p.read_text()\n"
            f"old, new = {old!r}, {new!r}\nassert old in s, 'not found in ' + str(p)\n"
            "p.write_text(s.replace(old, new, 1))\nPYEOF")


def write_step(path: str, text: str) -> str:
    """An oracle step: write `text` to `path` (a python3 heredoc, so any bytes of text are safe)."""
    return f"python3 - <<'PYEOF'\nfrom pathlib import Path\nPath({path!r}).write_text({text!r})\nPYEOF"


def unchanged_test(files: dict[str, str]) -> str:
    """A pytest function asserting `files` (path -> original text) are byte-identical in /work."""
    want = {p: sha(t) for p, t in sorted(files.items())}
    return (f"\n\nORIGINALS = {want!r}\n\n\ndef test_originals_unchanged():\n"
            "    for rel, digest in ORIGINALS.items():\n"
            "        path = WORK / rel\n        assert path.is_file() and not path.is_symlink(), rel\n"
            "        assert sha256(path) == digest, f'{rel} was changed'\n")
