"""The report's "All metrics" section, folded away at the bottom of the page: for every stage a summary
table (last, min, max, points of every numeric key) and a plot of every numeric key it logged that
varies (no plot limit), grouped by `group_metrics`; constants (`total_params`, one-off counts, a
key logged once) and series within ±metrics.TINY are named under the plots, not drawn (the summary
table has their values).

    html = render_dump([("sft", metric_series(records)), ...])   # "" when no stage logged metrics

Grouping: keys sharing a prefix share a plot (`reward/<domain>` with `reward`, `time/<phase>`,
`suite/<S>/pass@1/<domain>` with `suite/<S>/pass@1`), `eval_X` is drawn with `X`, other keys alone;
groups are ordered by PLOT_PRIORITY, then by name.
"""

from __future__ import annotations

import math
import re

from posttrain.telemetry.report.html import e, fmt, table
from posttrain.telemetry.report.metrics import TINY, Series, plot_groups, split_drawable

PLOT_PRIORITY = [r"loss", r"eval_loss", r"pass@\d+", r"reward", r"pass_rate", r"temperature", r"eval(_.*)?", r"lr",
                 r"grad_norm", r"tokens_per_s", r"time", r"zero_variance_frac", r"completion_len"]


def group_metrics(keys: list[str]) -> list[tuple[str, list[str]]]:
    """Plot groups (module docstring), each as (name, keys): the key named like the group first."""
    keyset = set(keys)
    prefixes = {k.rsplit("/", 1)[0] for k in keys if "/" in k}
    groups: dict[str, list[str]] = {}
    for key in sorted(keys):
        if key in prefixes:
            name = key
        elif "/" in key:
            name = key.rsplit("/", 1)[0]
        elif key.startswith("eval_") and key[len("eval_"):] in keyset:
            name = key[len("eval_"):]
        else:
            name = key
        groups.setdefault(name, []).append(key)

    def rank(name: str) -> tuple:
        for i, pattern in enumerate(PLOT_PRIORITY):
            if re.fullmatch(pattern, name):
                return (i, name)
        return (len(PLOT_PRIORITY), name)

    return [(name, sorted(groups[name], key=lambda k: (k != name, k))) for name in sorted(groups, key=rank)]


def summary_table(series: Series) -> str:
    rows = []
    for key in sorted(series):
        vals = [v for v in series[key][1] if v is not None and math.isfinite(v)]
        last = next((v for v in reversed(series[key][1]) if v is not None), None)
        rows.append([key, fmt(last), fmt(min(vals)) if vals else "–", fmt(max(vals)) if vals else "–", str(len(vals))])
    return table(["metric", "last", "min", "max", "points"], rows)


def render_dump(stages: list[tuple[str, Series]]) -> str:
    stages = [(name, series) for name, series in stages if series]
    if not stages:
        return ""
    grouped = [(name, series, group_metrics(list(series))) for name, series in stages]
    n_plots = sum(bool(split_drawable(series, keys)[0]) for _, series, groups in grouped for _, keys in groups)
    out = ["<h2>All metrics</h2>",
           f"<details><summary>Every logged metric of every stage: {n_plots} plots and a summary table per stage"
           "</summary>"]
    for name, series, groups in grouped:
        out.append(f"<h3>All metrics: {e(name)}</h3>")
        out.append(summary_table(series))
        plots, flat = plot_groups(series, groups, name)
        out.append('<div class="plots">' + "".join(plots) + "</div>")
        if flat:  # their values are in the summary table above
            out.append(f'<p class="meta">Not drawn (constant, or every value within ±{TINY:g}; values in the table '
                       f'above): {e(", ".join(sorted(k for k, _, _ in flat)))}</p>')
    out.append("</details>")
    return "\n".join(out)
