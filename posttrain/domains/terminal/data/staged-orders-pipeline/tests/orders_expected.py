"""What the three stages should produce, computed from the test's own copy of orders.log (shared by the checks)."""

from pathlib import Path

ORIGINAL = Path(__file__).resolve().parent / "orders_original.log"


def orders():
    out = []
    for line in ORIGINAL.read_text().splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[2].startswith("order="):
            out.append([p.split("=", 1)[1] for p in parts[2:]])
    return out


def cents(total):
    whole, frac = total.split(".")
    return int(whole) * 100 + int(frac)


def paid():
    return sorted(([int(i), c, cents(t)] for i, c, t, s in orders() if s == "paid"), key=lambda r: r[0])
