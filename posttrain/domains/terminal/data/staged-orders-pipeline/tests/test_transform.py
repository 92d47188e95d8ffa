"""Stage 2: paid.csv has the paid orders only, sorted by numeric id, totals in cents."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders_expected import paid  # noqa: E402

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it


def test_paid_csv():
    lines = (WORK / "paid.csv").read_text().splitlines()
    assert lines[0] == "id,customer,cents"
    assert lines[1:] == [f"{i},{c},{n}" for i, c, n in paid()]
