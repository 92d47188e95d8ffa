"""Stage 3: summary.json totals the paid orders, overall and per customer."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders_expected import paid  # noqa: E402

WORK = Path("/work")  # the workspace; these tests live in /tests, outside it


def test_summary_json():
    summary = json.loads((WORK / "summary.json").read_text())
    by_customer = {}
    for _id, customer, cents in paid():
        by_customer[customer] = by_customer.get(customer, 0) + cents
    assert summary == {"paid_orders": len(paid()), "paid_cents": sum(by_customer.values()), "by_customer": by_customer}
    assert all(type(v) is int for v in summary["by_customer"].values())
