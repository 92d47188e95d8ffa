"""Terminal task folders: what loads, what is rejected (naming the path and the key), and the `terminal` source."""

from __future__ import annotations

import os

import pytest

from posttrain.domains.terminal.task import load_task
from posttrain.core.errors import ConfigError, DataError
from posttrain.tasks.registry import make_source_tasks

TOML = """version = "1.0"
[metadata]
difficulty = "medium"
category = "data"
tags = ["csv"]
[agent]
timeout_sec = 90.0
max_turns = 7
[verifier]
timeout_sec = 30
[limits]
command_timeout_sec = 4.5
max_output_bytes = 1000
"""


def write_task(root, name="demo", toml=TOML, files=None, drop=()):
    files = {
        "instruction.md": "Make answer.txt hold 42.\n",
        "task.toml": toml,
        "environment/data.csv": "a,b\n1,2\n",
        "environment/run.sh": "#!/bin/bash\necho hi\n",
        "solution/solve.sh": "echo 42 > answer.txt\n",
        "tests/test_answer.py": "def test_answer():\n    assert open('/work/answer.txt').read().strip() == '42'\n",
        **(files or {}),
    }
    path = root / name
    for rel, text in files.items():
        if rel in drop:
            continue
        full = path / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(text if isinstance(text, bytes) else text.encode())
    for d in ("environment", "tests"):
        (path / d).mkdir(parents=True, exist_ok=True)
    if (path / "environment/run.sh").exists():
        os.chmod(path / "environment/run.sh", 0o755)
    return path


def test_a_folder_loads_with_its_settings_and_bytes(tmp_path):
    path = write_task(tmp_path, files={"environment/blob.bin": bytes(range(256))})
    t = load_task(path)
    assert (t.name, t.path) == ("demo", str(path.resolve()))
    assert t.instruction == "Make answer.txt hold 42.\n"
    assert (t.difficulty, t.category, t.tags) == ("medium", "data", ("csv",))
    assert (t.agent_timeout, t.max_turns, t.verifier_timeout) == (90.0, 7, 30.0)
    assert (t.command_timeout, t.max_output_bytes) == (4.5, 1000)
    assert t.environment["blob.bin"].data == bytes(range(256))
    assert t.environment["run.sh"].mode == 0o755 and t.environment["data.csv"].mode & 0o111 == 0
    assert set(t.tests) == {"test_answer.py"} and t.pytest_files == ("test_answer.py",) and not t.has_test_sh
    assert t.solution["solve.sh"].data == b"echo 42 > answer.txt\n"
    assert t.checks == ()


def test_defaults_apply_to_a_minimal_toml(tmp_path):
    t = load_task(write_task(tmp_path, toml='version = "1.0"\n'))
    assert (t.difficulty, t.category, t.agent_timeout, t.max_turns) == ("easy", "debugging", 180.0, 16)
    assert (t.verifier_timeout, t.command_timeout, t.max_output_bytes) == (60.0, 10.0, 8192)


def test_loading_reads_the_files_once(tmp_path):
    path = write_task(tmp_path)
    t = load_task(path)
    (path / "environment/data.csv").write_text("changed\n")
    assert t.environment["data.csv"].data == b"a,b\n1,2\n"


@pytest.mark.parametrize("missing", ["instruction.md", "solution/solve.sh", "task.toml"])
def test_a_missing_file_is_named(tmp_path, missing):
    path = write_task(tmp_path, drop=(missing,))
    with pytest.raises(DataError, match=str(path / missing).replace("/", "/")):
        load_task(path)


def test_a_missing_or_empty_tests_dir_is_rejected(tmp_path):
    path = write_task(tmp_path, drop=("tests/test_answer.py",))
    with pytest.raises(DataError, match=r"demo/tests/: no test_\*\.py or test\.sh"):
        load_task(path)
    (path / "tests" / "helper.txt").write_text("data only\n")
    with pytest.raises(DataError, match="no test_"):
        load_task(path)
    os.remove(path / "tests" / "helper.txt")
    os.rmdir(path / "tests")
    with pytest.raises(DataError, match=r"demo/tests/: missing directory"):
        load_task(path)


def test_bad_toml_syntax_names_the_file(tmp_path):
    path = write_task(tmp_path, toml="[agent\nmax_turns = 3\n")
    with pytest.raises(ConfigError, match=r"demo/task.toml: not valid TOML"):
        load_task(path)


@pytest.mark.parametrize("toml, key", [
    ('[agent]\nmax_turn = 3\n', "agent.max_turn"),
    ('[limits]\ncommand_timeout = 3\n', "limits.command_timeout"),
    ('[verifer]\ntimeout_sec = 3\n', "verifer"),
    ('[[checks]]\nname = "a"\ntests = ["test_answer.py"]\nweigth = 2\n', "weigth"),
])
def test_an_unknown_key_is_named(tmp_path, toml, key):
    with pytest.raises(ConfigError, match=rf"task.toml.*unknown key.*{key}"):
        load_task(write_task(tmp_path, toml=toml))


@pytest.mark.parametrize("toml, key", [
    ('[agent]\nmax_turns = "8"\n', "agent.max_turns must be an integer"),
    ('[agent]\nmax_turns = 2.5\n', "agent.max_turns must be an integer"),
    ('[agent]\ntimeout_sec = true\n', "agent.timeout_sec must be"),
    ('[limits]\nmax_output_bytes = -5\n', "limits.max_output_bytes must be positive"),
    ('[metadata]\ntags = "a"\n', "metadata.tags must be a list"),
    ('[metadata]\ndifficulty = "trivial"\n', "metadata.difficulty must be one of"),
    ('version = 1\n', "version must be a string"),
    ('[[checks]]\nname = "a"\ntests = ["test_answer.py"]\nweight = 0\n', r"checks\[0\] \(a\): weight must be a positive"),
    ('[[checks]]\nname = "a"\ntests = "test_answer.py"\n', r"checks\[0\] \(a\): tests must be a non-empty list"),
])
def test_a_wrong_type_is_named(tmp_path, toml, key):
    with pytest.raises(ConfigError, match=rf"task.toml: .*{key}"):
        load_task(write_task(tmp_path, toml=toml))


def test_checks_must_name_test_files_of_the_task(tmp_path):
    toml = '[[checks]]\nname = "a"\ntests = ["test_missing.py"]\n'
    with pytest.raises(ConfigError, match=r"checks\[0\] \(a\): tests/test_missing.py is not a test file"):
        load_task(write_task(tmp_path, toml=toml))
    toml = '[[checks]]\nname = "a"\ntests = ["test_answer.py"]\n[[checks]]\nname = "a"\ntests = ["test.sh"]\n'
    with pytest.raises(ConfigError, match=r"checks\[1\]: name 'a' is used twice"):
        load_task(write_task(tmp_path, name="two", toml=toml, files={"tests/test.sh": "echo 1 > $REWARD_FILE\n"}))
    toml = '[[checks]]\nname = "py"\ntests = ["test_answer.py"]\nweight = 2\n[[checks]]\nname = "sh"\ntests = ["test.sh"]\n'
    t = load_task(write_task(tmp_path, name="three", toml=toml, files={"tests/test.sh": "echo 1 > $REWARD_FILE\n"}))
    assert [(c.name, c.tests, c.weight) for c in t.checks] == [("py", ("test_answer.py",), 2.0), ("sh", ("test.sh",), 1.0)]
    assert t.has_test_sh


def test_a_symlink_in_a_task_folder_is_refused(tmp_path):
    path = write_task(tmp_path)
    os.symlink("/etc/passwd", path / "environment" / "passwd")
    with pytest.raises(DataError, match=r"environment/passwd: a task folder holds only plain files"):
        load_task(path)


def test_a_bad_folder_name_is_refused(tmp_path):
    with pytest.raises(DataError, match="must match"):
        load_task(write_task(tmp_path, name="Bad Name"))


def test_the_terminal_source_reads_every_folder(tmp_path):
    write_task(tmp_path, name="beta")
    write_task(tmp_path, name="alpha", toml='version = "1.0"\n')
    (tmp_path / "README.md").write_text("not a task\n")
    tasks = make_source_tasks("terminal", n=None, seed=0, options={"dir": str(tmp_path)})
    assert [t.id for t in tasks] == ["terminal/alpha", "terminal/beta"]
    beta = tasks[1]
    assert (beta.domain, beta.env, beta.verifiers) == ("terminal", "terminal", ("env_score",))
    assert beta.prompt == ({"role": "user", "content": "Make answer.txt hold 42.\n"},)
    assert beta.reference == {"task_dir": str((tmp_path / "beta").resolve())}
    assert (beta.limits.max_turns, beta.limits.seconds, beta.limits.tool_timeout) == (7, 90.0, 4.5)
    assert beta.metadata["difficulty"] == "medium" and beta.metadata["category"] == "data"
    (tool,) = beta.metadata["tools"]
    assert tool["function"]["name"] == "shell" and tool["function"]["parameters"]["required"] == ["command"]
    assert [t.id for t in make_source_tasks("terminal", n=1, seed=5, options={"dir": str(tmp_path)})] == ["terminal/alpha"]


def test_the_terminal_source_rejects_bad_options(tmp_path):
    write_task(tmp_path)
    with pytest.raises(ConfigError, match="unknown option 'path'"):
        make_source_tasks("terminal", n=None, seed=0, options={"path": str(tmp_path)})
    with pytest.raises(ConfigError, match="2 tasks asked for"):
        make_source_tasks("terminal", n=2, seed=0, options={"dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="is not a directory"):
        make_source_tasks("terminal", n=None, seed=0, options={"dir": str(tmp_path / "nope")})


def test_the_shipped_tasks_all_load():
    tasks = make_source_tasks("terminal", n=None, seed=0)
    assert tasks and all(t.id.startswith("terminal/") for t in tasks)
