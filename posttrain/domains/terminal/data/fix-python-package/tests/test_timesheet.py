"""The package's own unit tests (our copy) pass, and the CLI is right on seeded generated timesheets."""

import random
import shutil
import subprocess
import sys
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
PY = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
REPO_TESTS = Path(__file__).resolve().parent / "repo_tests"


def test_repo_unit_tests_pass():
    run = subprocess.run([PY, "-m", "unittest", "discover", "-s", str(REPO_TESTS), "-p", "unit_*.py"], cwd=WORK,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "Ran 6 tests" in run.stderr


def hm(minutes):
    return f"{minutes // 60}:{minutes % 60:02d}"


def generated_sheet(rng):
    people = rng.sample(["ann", "ben", "cara", "dov", "eli", "fay"], rng.randint(1, 5))
    rows, totals = ["name,date,start,end"], {}
    for day in range(rng.randint(1, 12)):
        name = rng.choice(people)
        start = rng.randrange(0, 24 * 60, 5)
        length = rng.choice([rng.randint(1, 10) * 30, rng.randint(1, 700), 24 * 60 - start])  # last: ends at 00:00
        end = (start + length) % (24 * 60)
        rows.append(f"{name},2026-03-{day + 1:02d},{hm(start).zfill(5)},{hm(end).zfill(5)}")
        totals[name] = totals.get(name, 0) + length
    expected = "".join(f"{n} {hm(totals[n])}\n" for n in sorted(totals)) + f"TOTAL {hm(sum(totals.values()))}\n"
    return "\n".join(rows) + "\n", expected


def test_generated_timesheets(tmp_path):
    rng = random.Random(31)
    for i in range(8):
        text, expected = generated_sheet(rng)
        sheet = tmp_path / f"sheet{i}.csv"
        sheet.write_text(text)
        run = subprocess.run([PY, "-m", "timesheet", str(sheet)], cwd=WORK, capture_output=True, text=True, timeout=10)
        assert run.returncode == 0, run.stderr
        assert run.stdout == expected, text


def test_overnight_shift_as_the_last_line(tmp_path):
    sheet = tmp_path / "night.csv"
    sheet.write_text("name,date,start,end\nzed,2026-01-01,20:00,04:15\n")
    run = subprocess.run([PY, "-m", "timesheet", str(sheet)], cwd=WORK, capture_output=True, text=True, timeout=10)
    assert run.stdout == "zed 8:15\nTOTAL 8:15\n", run.stderr
