"""HTML pieces shared by the report modules (report.py and report_*.py): escaping, tables, images,
number formatting, Δ cells, and the page's CSS.

    table(["metric", "last"], [["loss", fmt(0.25)]])   # every cell HTML-escaped
    table(header, rows, raw_cells=True)                # cells already HTML, built from escaped parts
    img(png_bytes, "loss")                             # <img> with a data: URI (the page fetches nothing)
    delta_cell({"delta": 0.12, "p_value": 0.003, "significant": True})
                                                       # '<span class="pos">+0.120</span> (p=0.003, significant)'
"""

from __future__ import annotations

import html
from typing import Any

from posttrain.telemetry.plots import png_data_uri

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;line-height:1.45;padding:0 1rem}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
.meta{color:#666}table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}tr:nth-child(even) td{background:#fafafa}
pre{background:#f7f7f7;padding:.8rem;overflow:auto;font-size:.85rem}
.plots{display:flex;flex-wrap:wrap;gap:.5rem}.plots img{max-width:540px;width:100%;border:1px solid #eee}
.alerts td{text-align:left}.note{color:#a60}.pos{color:#070}.neg{color:#b00}summary{cursor:pointer;font-weight:600}
.scroll{max-height:32rem;overflow:auto;margin:.8rem 0}.scroll table{margin:0}.scroll th{position:sticky;top:0}
.headline{font-size:1rem}.gates td:nth-child(-n+7),.gates th:nth-child(-n+7){text-align:left}.fail{color:#fff;background:#c00;padding:0 .4rem;font-weight:700}.pass{color:#070}
.verdict{font-size:1.15rem;font-weight:600;background:#f3f7ff;border-left:4px solid #36c;padding:.6rem .9rem}
.stages td:nth-child(-n+2),.stages td:last-child,.examples td,.examples th{text-align:left;vertical-align:top}.values td:nth-child(2){text-align:left}
pre.completion{margin:0;padding:.3rem;max-width:640px;white-space:pre-wrap;word-break:break-word;font-size:.8rem}
"""


def e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, list) and v and all(is_num(x) for x in v):  # an interval, e.g. pass@1_ci95
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    if isinstance(v, bool) or not is_num(v):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if v == 0 or (1e-3 <= abs(v) < 1e5):
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 1 else f"{v:.4g}"
    return f"{v:.3e}"


def table(header: list[str], rows: list[list[str]], raw_cells: bool = False, cls: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw_cells else e(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    attr = f' class="{e(cls)}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def img(png: bytes, alt: str) -> str:
    return f'<img src="{png_data_uri(png)}" alt="{e(alt)}">'


def signed(delta: float, bold: bool = True) -> str:
    """+0.120 in green / -0.050 in red (plain when not `bold`, e.g. a delta that is not significant)."""
    cls = "pos" if delta > 0 else "neg" if delta < 0 else ""
    return f'<span class="{cls}">{delta:+.3f}</span>' if bold and cls else f"{delta:+.3f}"


def p_text(p: Any) -> str:
    if not is_num(p):
        return "p=–"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def delta_cell(entry: dict[str, Any] | None) -> str:
    """A compare.json delta as HTML: the signed delta, its p-value and whether it is significant."""
    if not entry or not is_num(entry.get("delta")):
        return "–"
    sig = entry.get("significant")
    verdict = "significant" if sig is True else "not significant" if sig is False else "not tested"
    return f"{signed(float(entry['delta']), bold=sig is True)} ({e(p_text(entry.get('p_value')))}, {verdict})"
