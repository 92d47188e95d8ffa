"""Stage 1: orders.csv has one row per order line, in log order."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders_expected import ORIGINAL, orders  # noqa: E402

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it


def test_log_unchanged():
    assert (WORK / "orders.log").read_bytes() == ORIGINAL.read_bytes()


def test_orders_csv():
    lines = (WORK / "orders.csv").read_text().splitlines()
    assert lines[0] == "id,customer,total,status"
    assert lines[1:] == [",".join(row) for row in orders()]
    assert len(lines) - 1 == 45
