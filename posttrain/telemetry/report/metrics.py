"""Metric series read from a stage's metrics.jsonl records, and the plot of a few of them (used by the
report's curves section, report/curves.py, and its full dump, report/dump.py).

    series = metric_series(records)              # {"loss": ([0, 1, 2], [2.0, None, 1.1]), ...}
    html = plot_keys(series, ["reward", "reward/gcd"], title="reward", alt="rl: reward")   # one <img>
    drawn, flat = split_drawable(series, keys)   # flat: [(key, "value text", points)], shown by values_table

A series is not drawn when it has one distinct value (a constant, e.g. total_params, or a single
point) or when every value is below TINY in magnitude (e.g. a 1e-12 mismatch/kl, noise that an
autoscaled axis would draw as a large curve): the report shows such a series as a value instead.

A series keeps every record that logged the key (null, i.e. NaN or inf as the logger writes them,
is a gap); longer series are thinned to MAX_POINTS for the plot (evenly, the last point kept), so a
long run's page stays a few MB.
"""

from __future__ import annotations

import math
from typing import Any

from posttrain.telemetry.plots import line_plot
from posttrain.telemetry.report.html import fmt, img, is_num, table

MAX_POINTS = 2000  # per curve
TINY = 1e-6  # a series whose values all lie within ±TINY is reported as its largest |value|, not drawn

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


def split_drawable(series: Series, keys: list[str]) -> tuple[list[str], list[tuple[str, str, int]]]:
    """(keys worth a curve, [(key, value text, points)] for the constant and negligible ones)."""
    drawn, flat = [], []
    for key in keys:
        vals = [v for v in series[key][1] if v is not None and math.isfinite(v)]
        if len(set(vals)) > 1 and max(abs(v) for v in vals) >= TINY:
            drawn.append(key)
        elif len(set(vals)) == 1:
            flat.append((key, f"{fmt(vals[0])} (constant)", len(vals)))
        elif vals:
            flat.append((key, f"max |value| = {max(abs(v) for v in vals):.1e} (below {TINY:g}: not drawn)", len(vals)))
    return drawn, flat


def plot_groups(series: Series, groups: list[tuple[str, list[str]]], stage: str) -> tuple[list[str], list]:
    """One plot per group of drawable keys (titled by the group), and every key left out of them
    (split_drawable's flat rows), for a stage's section."""
    plots, flat = [], []
    for title, keys in groups:
        drawn, rest = split_drawable(series, keys)
        flat += rest
        if drawn:
            plots.append(plot_keys(series, drawn, title=title, alt=f"{stage}: {title}"))
    return plots, flat


def values_table(flat: list[tuple[str, str, int]], caption: str) -> str:
    """The series split_drawable kept out of the plots, as a table."""
    if not flat:
        return ""
    return f'<p class="meta">{caption}</p>' + table(["metric", "value", "points"], [[k, v, str(n)] for k, v, n in flat],
                                                     cls="values")
