"""The terminal task generator (domains/terminal/generate/) and the `terminal_gen` source: deterministic per
seed, distinct across seeds, folders that load in the shipped format, train and test seeds disjoint."""

from __future__ import annotations

import hashlib

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.core.errors import ConfigError
from posttrain.domains.terminal.generate import FAMILIES, generate, write_task
from posttrain.domains.terminal.task import load_task
from posttrain.tasks.generated import HELD_OUT_SEED
from posttrain.tasks.registry import make_source_tasks

LEVELS = (1, 2, 3)


def digest(task) -> str:
    h = hashlib.sha256()
    for rel, (data, mode) in sorted(task.files().items()):
        h.update(f"{rel}\0{mode}\0".encode() + data)
    return h.hexdigest()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_same_seed_same_bytes_and_seeds_differ(family):
    for level in LEVELS:
        assert digest(generate(family, level, 7)) == digest(generate(family, level, 7))
        seen = {digest(generate(family, level, s)) for s in range(30)}
        assert len(seen) == 30, (family, level)
        # the workspaces themselves differ too, not only the folder names
        envs = {hashlib.sha256(repr(sorted(generate(family, level, s).environment.items())).encode()).hexdigest()
                for s in range(30)}
        assert len(envs) >= 28, (family, level, len(envs))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_folders_load_in_the_shipped_format(family, tmp_path):
    for level in LEVELS:
        for seed in range(3):
            gen = generate(family, level, seed)
            tt = load_task(write_task(gen, tmp_path))
            assert tt.name == f"{family}-l{level}-s{seed}"
            assert tt.difficulty == ("easy", "medium", "hard")[level - 1]
            assert tt.pytest_files and "solve.sh" in tt.solution and tt.environment
            assert tt.solution["solve.sh"].data.decode().count("# step ") == len(gen.steps) >= 1


def test_levels_add_work():
    for family in FAMILIES:
        steps = [sum(len(generate(family, level, s).steps) for s in range(10)) for level in LEVELS]
        assert steps[0] < steps[1] < steps[2], (family, steps)


def test_write_task_leaves_an_identical_folder_and_replaces_a_changed_one(tmp_path):
    gen = generate("text", 2, 3)
    path = write_task(gen, tmp_path)
    before = (path / "instruction.md").stat().st_mtime_ns
    assert write_task(gen, tmp_path) == path and (path / "instruction.md").stat().st_mtime_ns == before
    (path / "instruction.md").write_text("tampered")
    (path / "stray.txt").write_text("x")
    write_task(gen, tmp_path)
    assert (path / "instruction.md").read_text() == gen.instruction and not (path / "stray.txt").exists()


def test_train_and_test_seeds_are_disjoint(tmp_path):
    opts = {"level": [1, 2, 3], "dir": str(tmp_path)}
    train = make_source_tasks("terminal_gen", 24, 0, {**opts, "split": "train"})
    test = make_source_tasks("terminal_gen", 24, 0, {**opts, "split": "test"})
    train_seeds = {t.metadata["seed"] for t in train}
    test_seeds = {t.metadata["seed"] for t in test}
    assert not train_seeds & test_seeds and max(train_seeds) < HELD_OUT_SEED <= min(test_seeds)
    assert not {t.reference["task_dir"] for t in train} & {t.reference["task_dir"] for t in test}
    # every family and level appears in a dozen test tasks
    assert {(t.metadata["family"], t.metadata["level"]) for t in test[:12]} == {
        (f, lv) for f in FAMILIES for lv in LEVELS}
    t = test[0]
    assert t.id == f"terminal_gen/L{t.metadata['level']}/{HELD_OUT_SEED}" and t.env == "terminal"
    assert t.domain == "terminal_gen" and t.verifiers == ("env_score",)
    with pytest.raises(ConfigError, match="held-out"):
        make_source_tasks("terminal_gen", 5, HELD_OUT_SEED - 2, opts)


def test_bad_options_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="unknown family 'bild'"):
        make_source_tasks("terminal_gen", 1, 0, {"family": "bild", "dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="level must be an integer in 1..3"):
        make_source_tasks("terminal_gen", 1, 0, {"level": 4, "dir": str(tmp_path)})
    tasks = make_source_tasks("terminal_gen", 3, 0, {"family": "build", "dir": str(tmp_path)})
    assert {t.metadata["family"] for t in tasks} == {"build"}


def test_cli_generate_writes_folders(tmp_path):
    out = tmp_path / "gen"
    res = CliRunner().invoke(app, ["tasks", "generate", "terminal_gen", "--n", "4", "--out", str(out), "--level", "2",
                                   "--split", "test"])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{f}-l2-s{HELD_OUT_SEED + i}" for i, f in enumerate(FAMILIES))
    assert all(load_task(out / n).difficulty == "medium" for n in names)
    res = CliRunner().invoke(app, ["tasks", "generate", "sql", "--n", "1", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0
