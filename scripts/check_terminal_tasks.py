"""Local checker for the terminal task folders: every oracle passes, every initial state fails.

    .venv/bin/python scripts/check_terminal_tasks.py                      # all of posttrain/domains/terminal/data
    .venv/bin/python scripts/check_terminal_tasks.py fix-typeerror-script  # some tasks by name
    .venv/bin/python scripts/check_terminal_tasks.py --root DIR           # another folder of tasks

For each task folder it does what the terminal environment does, without a sandbox:
1. copy environment/ into a fresh temp working dir, run setup.sh there (then delete it), copy
   tests/ in (replacing any tests/ the environment shipped) and score: the reward must be < 1;
2. a fresh copy, setup.sh, `bash solve.sh` run from inside the working dir (the solution folder
   is a sibling dir, its path in $SOLUTION_DIR), tests/ copied in, score: the reward must be 1.

Scoring follows the folder format: without [[checks]] the reward is 1 when every test passes,
else 0; with [[checks]] it is the weight of the passing checks over the total weight; a
tests/test.sh writes its reward to $REWARD_FILE. It also checks the folder's shape (name,
instruction.md, task.toml keys and types, solution/solve.sh, tests/, size under 50 KB).

Decisions: runs as the current user with the host's tools (no isolation: only for our own
trusted tasks); pytest runs with -p no:cacheprovider so no cache is left in the work dir;
one line per task, exit status 1 when any task is wrong. The terminal env's own check, which
runs the same steps in the real sandbox, is `posttrain tasks validate DIR`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = REPO / "posttrain" / "domains" / "terminal" / "data"
PYTEST = [str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
MAX_TASK_BYTES = 50_000
SECTIONS = {
    "metadata": {"difficulty": str, "category": str, "tags": list},
    "agent": {"timeout_sec": float, "max_turns": int},
    "verifier": {"timeout_sec": float},
    "limits": {"command_timeout_sec": float, "max_output_bytes": int},
}
CHECK_KEYS = {"name": str, "tests": list, "weight": float}


def shape_errors(task: Path) -> list[str]:
    """What is wrong with the folder's layout and task.toml (empty when nothing)."""
    errors = []
    if not re.fullmatch(r"[a-z0-9_-]+", task.name):
        errors.append(f"name {task.name!r} is not [a-z0-9_-]+")
    missing = [part for part in ("instruction.md", "task.toml", "environment", "solution/solve.sh", "tests")
               if not (task / part).exists()]
    if missing:
        return errors + [f"missing {part}" for part in missing]
    size = sum(p.stat().st_size for p in task.rglob("*") if p.is_file())
    if size > MAX_TASK_BYTES:
        errors.append(f"{size} bytes > {MAX_TASK_BYTES}")
    try:
        conf = tomllib.loads((task / "task.toml").read_text())
    except tomllib.TOMLDecodeError as e:
        return errors + [f"task.toml: {e}"]
    if conf.get("version") != "1.0":
        errors.append("task.toml: version must be \"1.0\"")
    for key, value in conf.items():
        if key in ("version", "checks"):
            continue
        if key not in SECTIONS or not isinstance(value, dict):
            errors.append(f"task.toml: unknown key {key!r}")
            continue
        for sub, v in value.items():
            want = SECTIONS[key].get(sub)
            if want is None:
                errors.append(f"task.toml: unknown key {key}.{sub}")
            elif not isinstance(v, want) or isinstance(v, bool):
                errors.append(f"task.toml: {key}.{sub} must be {want.__name__}")
    if conf.get("metadata", {}).get("difficulty", "easy") not in ("easy", "medium", "hard"):
        errors.append("task.toml: metadata.difficulty must be easy, medium or hard")
    for i, check in enumerate(conf.get("checks", [])):
        for sub, v in check.items():
            want = CHECK_KEYS.get(sub)
            if want is None or not isinstance(v, want):
                errors.append(f"task.toml: checks[{i}].{sub} is unknown or of the wrong type")
        for name in check.get("tests", []):
            if not (task / "tests" / name).is_file():
                errors.append(f"task.toml: checks[{i}] names {name!r}, not a file in tests/")
    return errors


def prepare(task: Path, tmp: Path) -> Path:
    """A fresh working dir with the task's environment, setup.sh run and deleted."""
    work = tmp / "work"
    shutil.copytree(task / "environment", work, symlinks=True)
    setup = work / "setup.sh"
    if setup.exists():
        run = subprocess.run(["bash", "setup.sh"], cwd=work, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise RuntimeError(f"setup.sh exited {run.returncode}: {run.stderr.strip()[-300:]}")
        setup.unlink()
    return work


def score(task: Path, work: Path) -> tuple[float, str]:
    """Copy tests/ in and compute the reward as the folder format defines it; also the last output."""
    left = work / "tests"  # whatever the episode left there is replaced
    if left.is_dir() and not left.is_symlink():
        shutil.rmtree(left)
    elif left.exists() or left.is_symlink():
        left.unlink()
    shutil.copytree(task / "tests", left)
    conf = tomllib.loads((task / "task.toml").read_text())
    timeout = conf.get("verifier", {}).get("timeout_sec", 60.0)
    checks = conf.get("checks", [])
    if (work / "tests" / "test.sh").exists() and not checks:
        reward_file = work.parent / "reward.txt"
        env = dict(os.environ, REWARD_FILE=str(reward_file))
        run = subprocess.run(["bash", "tests/test.sh"], cwd=work, env=env, capture_output=True, text=True,
                             timeout=timeout)
        text = reward_file.read_text().strip() if reward_file.exists() else "0"
        return float(text), run.stdout[-2000:]

    def passes(paths: list[str]) -> tuple[bool, str]:
        run = subprocess.run(PYTEST + paths, cwd=work, capture_output=True, text=True, timeout=timeout)
        return run.returncode == 0, run.stdout[-2000:]

    if not checks:
        ok, out = passes(["tests"])
        return float(ok), out
    total = passed = 0.0
    outs = []
    for check in checks:
        ok, out = passes([f"tests/{name}" for name in check["tests"]])
        weight = check.get("weight", 1.0)
        total += weight
        passed += weight if ok else 0.0
        outs.append(f"[{check['name']}: {'pass' if ok else 'fail'}] {out}")
    return passed / total, "\n".join(outs)


def check_task(task: Path, verbose: bool) -> bool:
    errors = shape_errors(task)
    if errors:
        print(f"FAIL {task.name}: " + "; ".join(errors))
        return False
    with tempfile.TemporaryDirectory(prefix=f"tt-{task.name}-") as tmp:
        initial, out0 = score(task, prepare(task, Path(tmp) / "initial"))
        root = Path(tmp) / "solved"
        root.mkdir()
        work = prepare(task, root)
        solution = shutil.copytree(task / "solution", root / "solution")
        env = dict(os.environ, SOLUTION_DIR=str(solution))
        run = subprocess.run(["bash", str(solution / "solve.sh")], cwd=work, env=env, capture_output=True,
                             text=True, timeout=120)
        solved, out1 = score(task, work)
    ok = initial < 1.0 and solved == 1.0 and run.returncode == 0
    print(f"{'ok  ' if ok else 'FAIL'} {task.name}: initial reward {initial:.2f}, solved reward {solved:.2f}"
          f", solve.sh exit {run.returncode}")
    if verbose or not ok:
        if initial >= 1.0:
            print("  initial state passes:\n" + out0)
        if solved < 1.0 or run.returncode != 0:
            print("  solve.sh:\n" + (run.stdout + run.stderr)[-2000:] + "\n  tests:\n" + out1)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="task folder names (default: all)")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder of task folders")
    ap.add_argument("-v", "--verbose", action="store_true", help="print test output for passing tasks too")
    args = ap.parse_args(argv)
    tasks = [args.root / n for n in args.names] or sorted(p for p in args.root.iterdir() if p.is_dir())
    missing = [t.name for t in tasks if not t.is_dir()]
    if missing:
        print(f"error: no task folder {', '.join(missing)} under {args.root}")
        return 2
    results = [check_task(t, args.verbose) for t in tasks]
    print(f"{sum(results)}/{len(results)} tasks ok")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
