"""`posttrain tasks validate`: a good folder passes; a free task, a broken oracle, a malformed folder and
an episode-visible solution are each reported by name; --json and the exit code."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.domains.terminal.validate import validate_dir

FIX = "cat > add.py <<'EOF'\nimport sys\nprint(sum(int(x) for x in sys.argv[1:]))\nEOF\n"
TEST_SUM = """import subprocess
def test_two():
    out = subprocess.run(["python3", "add.py", "2", "3"], cwd="/work", capture_output=True, text=True, timeout=10)
    assert out.stdout == "5\\n"
"""


def write_task(root, name, **overrides):
    files = {
        "instruction.md": "Make add.py print the sum of its arguments.\n",
        "task.toml": 'version = "1.0"\n',
        "environment/add.py": "print(0)\n",
        "solution/solve.sh": FIX,
        "tests/test_sum.py": TEST_SUM,
    }
    files.update(overrides)
    for rel, text in files.items():
        if text is None:
            continue
        full = root / name / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return root / name


def test_each_folder_gets_its_verdict(tmp_path):
    write_task(tmp_path, "good")
    write_task(tmp_path, "free", **{"environment/add.py": "import sys\nprint(sum(map(int, sys.argv[1:])))\n"})
    write_task(tmp_path, "wrong-oracle", **{"solution/solve.sh": "echo 'print(6)' > add.py\n"})
    write_task(tmp_path, "slow-oracle", **{"task.toml": 'version = "1.0"\n[agent]\ntimeout_sec = 1.0\n',
                                           "solution/solve.sh": "sleep 30\n"})
    write_task(tmp_path, "peeks", **{"solution/solve.sh": "test -d /solution && " + FIX,
                                     "environment/add.py": "print(open('/solution/solve.sh').read())\n"})
    write_task(tmp_path, "bad-toml", **{"task.toml": "[agent]\nmax_turns = 'many'\n"})
    write_task(tmp_path, "no-instruction", **{"instruction.md": None})
    results = {r.task: r for r in asyncio.run(validate_dir(tmp_path, jobs=3))}
    assert list(results) == sorted(results)
    assert results["good"].ok and (results["good"].initial, results["good"].oracle) == (0.0, 1.0)
    assert not results["free"].ok and "initial state already passes" in results["free"].reason
    assert not results["wrong-oracle"].ok and "scores 0.00" in results["wrong-oracle"].reason
    assert "test_sum.py" in results["wrong-oracle"].reason
    assert not results["slow-oracle"].ok and "timed out" in results["slow-oracle"].reason
    # the oracle sees /solution; an episode never does (its initial state still fails)
    assert results["peeks"].ok
    assert not results["bad-toml"].ok and "task.toml: agent.max_turns must be an integer" in results["bad-toml"].reason
    assert not results["no-instruction"].ok and "no-instruction/instruction.md: missing" in results["no-instruction"].reason


def test_the_cli_prints_json_and_fails_on_any_bad_folder(tmp_path):
    write_task(tmp_path, "good")
    write_task(tmp_path, "broken", **{"tests/test_sum.py": None, "tests/data.txt": "not a test\n"})
    runner = CliRunner()
    out = runner.invoke(app, ["tasks", "validate", str(tmp_path), "--json"])
    assert out.exit_code == 1
    rows = json.loads(out.stdout)
    assert [(r["task"], r["ok"]) for r in rows] == [("broken", False), ("good", True)]
    assert "no test_*.py or test.sh" in rows[0]["reason"] and set(rows[0]) == {"task", "ok", "reason"}
    one = runner.invoke(app, ["tasks", "validate", str(tmp_path / "good")])
    assert one.exit_code == 0 and "good" in one.stdout and "1 tasks, 0 failing" in one.stdout
