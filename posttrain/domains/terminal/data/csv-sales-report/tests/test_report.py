"""report.csv is exact for the shipped sales.csv, and summarize.sh is exact on seeded generated files."""

import random
import shutil
import subprocess
from pathlib import Path

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it
ORIGINAL = Path(__file__).resolve().parent / "sales_original.csv"


def expected_report(csv_text):
    regions = {}
    for line in csv_text.splitlines()[1:]:
        if not line:
            continue
        _date, region, _product, units, price = line.split(",")
        whole, cents = price.split(".")
        row = regions.setdefault(region, [0, 0, 0])
        row[0] += 1
        row[1] += int(units)
        row[2] += int(units) * (int(whole) * 100 + int(cents))

    def fmt(name, row):
        return f"{name},{row[0]},{row[1]},{row[2] // 100}.{row[2] % 100:02d}\n"

    total = [sum(r[i] for r in regions.values()) for i in range(3)]
    return "region,orders,units,revenue\n" + "".join(fmt(r, regions[r]) for r in sorted(regions)) + fmt("TOTAL", total)


def generated_csv(rng):
    regions = rng.sample(["north", "south", "east", "west", "central", "alpha", "zeta", "mid"], rng.randint(1, 6))
    lines = ["date,region,product,units,unit_price"]
    for _ in range(rng.randint(1, 60)):
        price = f"{rng.randint(0, 150)}.{rng.randint(0, 99):02d}"
        lines.append(f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)},{rng.choice(regions)},item{rng.randint(1, 9)},"
                     f"{rng.randint(1, 500)},{price}")
    return "\n".join(lines) + "\n"


def test_sales_csv_unchanged():
    assert (WORK / "sales.csv").read_bytes() == ORIGINAL.read_bytes()


def test_report_for_the_shipped_file():
    assert (WORK / "report.csv").read_text() == expected_report(ORIGINAL.read_text())


def test_script_on_generated_files(tmp_path):
    rng = random.Random(99)
    for i in range(6):
        case = tmp_path / f"case{i}"
        case.mkdir()
        shutil.copy(WORK / "summarize.sh", case / "summarize.sh")
        text = generated_csv(rng)
        (case / "sales.csv").write_text(text)
        run = subprocess.run(["bash", "summarize.sh"], cwd=case, capture_output=True, text=True, timeout=10)
        assert run.returncode == 0, run.stderr
        assert (case / "report.csv").read_text() == expected_report(text), text
