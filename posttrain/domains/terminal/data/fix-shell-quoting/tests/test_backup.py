"""backup.sh copies every regular file with any spacing in its name (and in the folder's name), skips folders."""

import random
import shutil
import subprocess
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it


def run_backup(case, *args):
    shutil.copy(WORK / "backup.sh", case / "backup.sh")
    return subprocess.run(["bash", "backup.sh", *args], cwd=case, capture_output=True, text=True, timeout=10)


def check(case, folder, names):
    backups = sorted(p.name for p in (case / "backup").iterdir())
    assert backups == sorted(n + ".bak" for n in names)
    for name in names:
        assert (case / "backup" / (name + ".bak")).read_bytes() == (folder / name).read_bytes(), name


def test_default_docs_folder(tmp_path):
    shutil.copytree(WORK / "docs", tmp_path / "docs")
    names = [p.name for p in (tmp_path / "docs").iterdir()]
    run = run_backup(tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"backed up {len(names)} files\n"
    check(tmp_path, tmp_path / "docs", names)


def test_generated_names_and_folder_with_spaces(tmp_path):
    rng = random.Random(3)
    words = ["a", "report", "final", "v2", "notes", "x"]
    for i, folder_name in enumerate(["my docs", "two  spaces", "plain"]):
        case = tmp_path / f"case{i}"
        folder = case / folder_name
        folder.mkdir(parents=True)
        names = set()
        while len(names) < 6:
            sep = rng.choice([" ", "  ", "_", " - "])
            names.add(sep.join(rng.sample(words, rng.randint(1, 3))) + rng.choice([".txt", ".md", ""]))
        for name in sorted(names):  # sorted: the same bytes for the same name in every run
            (folder / name).write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        (folder / "sub folder").mkdir()
        (folder / "sub folder" / "inner.txt").write_text("not backed up\n")
        run = run_backup(case, folder_name)
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"backed up {len(names)} files\n"
        check(case, folder, sorted(names))
