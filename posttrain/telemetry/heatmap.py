"""A matplotlib heatmap as PNG bytes (Agg canvas, no pyplot), values annotated in their cells.

    png = heatmap_plot([[1.0, 0.5], [0.75, None]], rows=["1024", "2048"], cols=["0", "0.5"],
                       title="lost in the middle", xlabel="depth", ylabel="length")
    uri = png_data_uri(png)   # posttrain.telemetry.plots

Values are drawn on a fixed red-to-green scale from `vmin` to `vmax` (default 0..1, an accuracy);
a None cell is grey and marked "–". Row 0 is drawn at the top.
"""

from __future__ import annotations

import math
from typing import Sequence

from matplotlib.figure import Figure

from posttrain.telemetry.plots import figure_png

CMAP = "RdYlGn"


def heatmap_plot(
    values: Sequence[Sequence[float | None]],
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    xlabel: str = "",
    ylabel: str = "",
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> bytes:
    """A len(rows) x len(cols) grid coloured by value, each cell annotated with its value (2 decimals)."""
    grid = [[float("nan") if v is None or not math.isfinite(v) else float(v) for v in row] for row in values]
    if len(grid) != len(rows) or any(len(row) != len(cols) for row in grid):
        raise ValueError(f"heatmap_plot: values must be {len(rows)} rows of {len(cols)}")
    fig = Figure(figsize=(max(4.0, 0.9 * len(cols) + 2.2), max(2.6, 0.5 * len(rows) + 1.6)), layout="constrained")
    ax = fig.add_subplot()
    ax.set_facecolor("#d0d0d0")  # None cells (NaN) stay transparent over this
    image = ax.imshow(grid, cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            dark = not math.isnan(v) and not 0.15 < (v - vmin) / ((vmax - vmin) or 1.0) < 0.85
            ax.text(j, i, "–" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize="small",
                    color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), labels=list(cols))
    ax.set_yticks(range(len(rows)), labels=list(rows))
    ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=ax, fraction=0.05)
    return figure_png(fig)
