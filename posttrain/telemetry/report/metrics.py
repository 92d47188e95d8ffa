"""Metric series read from a stage's metrics.jsonl records, and the plot of a few of them (used by the
report's curves section, report/curves.py, and its full dump, report/dump.py).

    series = metric_series(records)              # {"loss": ([0, 1, 2], [2.0, None, 1.1]), ...}
    html = plot_keys(series, ["reward", "reward/gcd"], title="reward", alt="rl: reward")   # one <img>

A series keeps every record that logged the key (null, i.e. NaN or inf as the logger writes them,
is a gap); longer series are thinned to MAX_POINTS for the plot (evenly, the last point kept), so a
long run's page stays a few MB.
"""

from __future__ import annotations

from typing import Any

from posttrain.telemetry.plots import line_plot
from posttrain.telemetry.report.html import img, is_num

MAX_POINTS = 2000  # per curve

Series = dict[str, tuple[list[int], list[float | None]]]


def metric_series(records: list[dict[str, Any]]) -> Series:
    """key -> (steps, values) for every key that has at least one number (null -> None, a gap)."""
    series: Series = {}
    numeric: set[str] = set()
    for rec in records:
        for key, value in rec.items():
            if key in ("step", "time") or not (value is None or is_num(value)):
                continue
            xs, ys = series.setdefault(key, ([], []))
            xs.append(rec["step"])
            ys.append(None if value is None else float(value))
            if value is not None:
                numeric.add(key)
    return {k: v for k, v in series.items() if k in numeric}


def thin(xs: list, ys: list, max_points: int = MAX_POINTS) -> tuple[list, list]:
    if len(xs) <= max_points:
        return xs, ys
    stride = -(-len(xs) // max_points)
    idx = list(range(0, len(xs), stride))
    if idx[-1] != len(xs) - 1:
        idx.append(len(xs) - 1)
    return [xs[i] for i in idx], [ys[i] for i in idx]


def plot_keys(series: Series, keys: list[str], title: str, alt: str) -> str:
    """One line plot (an <img>) of `keys`, each thinned to MAX_POINTS."""
    return img(line_plot({k: thin(*series[k]) for k in keys}, title=title), alt)
