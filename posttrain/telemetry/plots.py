"""Matplotlib figure helpers that return PNG bytes (Agg canvas; no pyplot, no global state).

    png = line_plot({"loss": (steps, values), "eval_loss": (...)}, title="loss")
    png = grouped_bar_plot(["arith", "chain"], {"base": [0.1, 0.2], "sft": [0.5, 0.6]}, title="pass@1")
    uri = png_data_uri(png)          # "data:image/png;base64,..." for a self-contained HTML page
"""

from __future__ import annotations

import base64
import io
import math
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_LEGEND = 12
SIZE = (6.4, 3.6)
DPI = 90
LINE_MARGINS = {"left": 0.12, "right": 0.98, "top": 0.9, "bottom": 0.14}


def figure_png(fig: Figure) -> bytes:
    """A figure rendered to PNG bytes on an Agg canvas (no pyplot state)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def line_plot(
    series: dict[str, tuple[Sequence[float], Sequence[float | None]]],
    title: str,
    xlabel: str = "step",
    ylabel: str = "",
) -> bytes:
    """One line per series; None/non-finite values leave gaps; a log y axis when the positive values span > 1e3.
    Fixed margins (LINE_MARGINS), not a constrained layout: a report draws hundreds of these, twice as fast;
    tick labels switch to a x10^n offset outside 1e-3..1e4 so that they fit."""
    fig = Figure(figsize=SIZE)
    fig.subplots_adjust(**LINE_MARGINS)
    ax = fig.add_subplot()
    finite: list[float] = []
    for name, (xs, ys) in series.items():
        ys_f = [float("nan") if y is None or not math.isfinite(y) else float(y) for y in ys]
        finite += [y for y in ys_f if math.isfinite(y)]
        marker = "o" if sum(math.isfinite(y) for y in ys_f) <= 20 else None
        ax.plot(list(xs), ys_f, label=name, marker=marker, markersize=3, linewidth=1.2)
    positive = [y for y in finite if y > 0]
    if positive and len(positive) == len(finite) and max(positive) / min(positive) > 1e3:
        ax.set_yscale("log")
    else:
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))  # short tick labels fit the fixed margin
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if 1 < len(series) <= MAX_LEGEND:
        ax.legend(fontsize="small")
    return figure_png(fig)


def grouped_bar_plot(
    categories: Sequence[str],
    groups: dict[str, Sequence[float | None]],
    title: str,
    ylabel: str = "",
) -> bytes:
    """Bars for each category (x), one colour per group; a missing value (None) draws no bar."""
    n_groups = max(1, len(groups))
    width = 0.8 / n_groups
    fig = Figure(figsize=(max(SIZE[0], 0.5 * len(categories) * n_groups + 1.5), SIZE[1]), layout="constrained")
    ax = fig.add_subplot()
    for i, (name, values) in enumerate(groups.items()):
        xs = [c + (i - (n_groups - 1) / 2) * width for c in range(len(categories))]
        ys = [0.0 if v is None else float(v) for v in values]
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(list(categories), rotation=30 if len(categories) > 4 else 0, ha="right" if len(categories) > 4 else "center")
    ax.set_title(title)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if groups:
        ax.legend(fontsize="small")
    return figure_png(fig)
