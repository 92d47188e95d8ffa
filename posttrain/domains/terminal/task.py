"""One terminal task folder (Harbor / Terminal-Bench shape), loaded and checked into a frozen `TerminalTask`.

    task = load_task("posttrain/domains/terminal/data/fix-typeerror-script")
    task.instruction, task.environment["total.py"].data, task.command_timeout, task.checks

The folder (docs/terminal.md has the whole format):

    NAME/instruction.md         the user message
    NAME/task.toml              settings: [metadata] [agent] [verifier] [limits] [[checks]]
    NAME/environment/...        initial files of the working directory (setup.sh: run once, then deleted)
    NAME/solution/solve.sh      the oracle (only `posttrain tasks validate` runs it)
    NAME/tests/test_*.py | test.sh   run after the episode, in a fresh sandbox

Loading reads every file of environment/, tests/ and solution/ once, as bytes with their modes;
episodes write those bytes, never the folder again (`cached_task` keeps one load per folder and
process). Everything wrong is found here: a missing file, TOML that does not parse, an unknown
key or a value of the wrong type is a ConfigError / DataError naming the path (and the key).
Symlinks and special files in a task folder are refused (a task is plain files).
"""

from __future__ import annotations

import math
import os
import re
import stat
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from posttrain.core.errors import ConfigError, DataError

NAME_RE = re.compile(r"^[a-z0-9_-]+$")
DIFFICULTIES = ("easy", "medium", "hard")
MAX_TASK_BYTES = 32 << 20  # environment + tests + solution
MAX_TEST_SH_BYTES = 100_000  # test.sh is run as `bash -c <text>` (one argv string, < 128 KiB)
TEST_SH = "test.sh"


@dataclass(frozen=True)
class TaskFile:
    data: bytes
    mode: int  # permission bits (0o755 keeps a script executable)


@dataclass(frozen=True)
class Check:
    name: str
    tests: tuple[str, ...]  # files in tests/ (test_*.py or test.sh); the check passes when all of them pass
    weight: float


@dataclass(frozen=True)
class TerminalTask:
    name: str
    path: str  # absolute path of the folder
    instruction: str
    environment: Mapping[str, TaskFile]  # relative path -> file (setup.sh included)
    tests: Mapping[str, TaskFile]
    solution: Mapping[str, TaskFile]
    difficulty: str = "easy"
    category: str = "debugging"
    tags: tuple[str, ...] = ()
    agent_timeout: float = 180.0  # the episode's wall time
    max_turns: int = 16
    verifier_timeout: float = 60.0
    command_timeout: float = 10.0
    max_output_bytes: int = 8192
    checks: tuple[Check, ...] = ()

    @property
    def pytest_files(self) -> tuple[str, ...]:
        return tuple(sorted(p for p in self.tests if "/" not in p and p.startswith("test_") and p.endswith(".py")))

    @property
    def has_test_sh(self) -> bool:
        return TEST_SH in self.tests


# section -> key -> (accepted types, default)
_SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "metadata": {"difficulty": ((str,), "easy"), "category": ((str,), "debugging"), "tags": ((list,), [])},
    "agent": {"timeout_sec": ((int, float), 180.0), "max_turns": ((int,), 16)},
    "verifier": {"timeout_sec": ((int, float), 60.0)},
    "limits": {"command_timeout_sec": ((int, float), 10.0), "max_output_bytes": ((int,), 8192)},
}
_TOP = {"version", "checks", *_SCHEMA}


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join({"str": "a string", "list": "a list", "int": "an integer", "float": "a number"}[t.__name__]
                       for t in types)


def _settings(doc: dict, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in doc:
        if key not in _TOP:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_TOP))})")
    version = doc.get("version", "1.0")
    if not isinstance(version, str):
        raise ConfigError(f"{where}: version must be a string, got {version!r}")
    for section, keys in _SCHEMA.items():
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        for key in table:
            if key not in keys:
                raise ConfigError(f"{where}: unknown key {section}.{key} (known: {', '.join(keys)})")
        for key, (types, default) in keys.items():
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, types):
                raise ConfigError(f"{where}: {section}.{key} must be {_type_name(types)}, got {value!r}")
            if isinstance(value, (int, float)) and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{where}: {section}.{key} must be positive, got {value!r}")
            out[f"{section}.{key}"] = value
    if out["metadata.difficulty"] not in DIFFICULTIES:
        raise ConfigError(f"{where}: metadata.difficulty must be one of {', '.join(DIFFICULTIES)}, "
                          f"got {out['metadata.difficulty']!r}")
    if not all(isinstance(t, str) for t in out["metadata.tags"]):
        raise ConfigError(f"{where}: metadata.tags must be a list of strings")
    return out


def _checks(doc: dict, tests: Mapping[str, TaskFile], where: str) -> tuple[Check, ...]:
    raw = doc.get("checks", [])
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise ConfigError(f"{where}: checks must be an array of tables ([[checks]])")
    known = {"name", "tests", "weight"}
    checks, names = [], set()
    for i, c in enumerate(raw):
        at = f"{where}: checks[{i}]"
        for key in c:
            if key not in known:
                raise ConfigError(f"{at}: unknown key {key!r} (known: name, tests, weight)")
        name, files, weight = c.get("name"), c.get("tests"), c.get("weight", 1.0)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at}: name must be a non-empty string, got {name!r}")
        if name in names:
            raise ConfigError(f"{at}: name {name!r} is used twice")
        names.add(name)
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise ConfigError(f"{at} ({name}): tests must be a non-empty list of file names in tests/")
        runnable = set(_runnable(tests))
        for f in files:
            if f not in runnable:
                raise ConfigError(f"{at} ({name}): tests/{f} is not a test file of this task "
                                  f"(have: {', '.join(sorted(runnable))})")
        number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (number and math.isfinite(weight) and weight > 0):
            raise ConfigError(f"{at} ({name}): weight must be a positive number, got {weight!r}")
        checks.append(Check(name, tuple(files), float(weight)))
    return tuple(checks)


def _runnable(tests: Mapping[str, TaskFile]) -> list[str]:
    return [p for p in tests if "/" not in p and (p == TEST_SH or (p.startswith("test_") and p.endswith(".py")))]


def _read_tree(root: Path, budget: list[int]) -> dict[str, TaskFile]:
    """Every regular file under `root` (relative path -> bytes and mode); links and special files refused."""
    files: dict[str, TaskFile] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode) or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise DataError(f"{full}: a task folder holds only plain files and directories")
            if stat.S_ISREG(st.st_mode):
                budget[0] -= st.st_size
                if budget[0] < 0:
                    raise DataError(f"{root.parent}: the task's files are larger than {MAX_TASK_BYTES >> 20} MiB")
                with open(full, "rb") as f:
                    files[os.path.relpath(full, root)] = TaskFile(f.read(), stat.S_IMODE(st.st_mode))
    return files


def load_task(path: str | os.PathLike) -> TerminalTask:
    """Read and check one task folder (ConfigError / DataError naming the path and the key)."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise DataError(f"{root}: not a task folder (no such directory)")
    if not NAME_RE.match(root.name):
        raise DataError(f"{root}: a task folder's name must match [a-z0-9_-]+")
    for need in ("instruction.md", "task.toml", "solution/solve.sh"):
        if not (root / need).is_file():
            raise DataError(f"{root / need}: missing (a task folder needs instruction.md, task.toml, "
                            "environment/, solution/solve.sh and tests/)")
    for need in ("environment", "tests"):
        if not (root / need).is_dir():
            raise DataError(f"{root / need}/: missing directory")
    toml_path = root / "task.toml"
    try:
        doc = tomllib.loads((root / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{toml_path}: not valid TOML ({e})") from None
    settings = _settings(doc, str(toml_path))
    try:
        instruction = (root / "instruction.md").read_text()
    except UnicodeDecodeError:
        raise DataError(f"{root / 'instruction.md'}: not UTF-8 text") from None
    if not instruction.strip():
        raise DataError(f"{root / 'instruction.md'}: empty")
    budget = [MAX_TASK_BYTES]
    environment = _read_tree(root / "environment", budget)
    tests = _read_tree(root / "tests", budget)
    solution = _read_tree(root / "solution", budget)
    if not _runnable(tests):
        raise DataError(f"{root / 'tests'}/: no test_*.py or test.sh")
    if TEST_SH in tests and len(tests[TEST_SH].data) > MAX_TEST_SH_BYTES:
        raise DataError(f"{root / 'tests' / TEST_SH}: larger than {MAX_TEST_SH_BYTES} bytes")
    checks = _checks(doc, tests, str(toml_path))
    return TerminalTask(
        name=root.name, path=str(root), instruction=instruction, environment=environment, tests=tests,
        solution=solution, difficulty=settings["metadata.difficulty"], category=settings["metadata.category"],
        tags=tuple(settings["metadata.tags"]), agent_timeout=float(settings["agent.timeout_sec"]),
        max_turns=settings["agent.max_turns"], verifier_timeout=float(settings["verifier.timeout_sec"]),
        command_timeout=float(settings["limits.command_timeout_sec"]),
        max_output_bytes=settings["limits.max_output_bytes"], checks=checks,
    )


_cache: dict[str, TerminalTask] = {}
_cache_lock = threading.Lock()


def cached_task(path: str | os.PathLike) -> TerminalTask:
    """`load_task`, once per folder and process (episodes of one task share the loaded bytes)."""
    key = str(Path(path).resolve())
    with _cache_lock:
        task = _cache.get(key)
    if task is None:
        task = load_task(key)
        with _cache_lock:
            _cache.setdefault(key, task)
    return task
