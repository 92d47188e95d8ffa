"""The "Long-context probes" section of a report: one "lost in the middle" heatmap per probe variant
(accuracy by prompt length x needle depth) and the KV cache's bytes per token.

    html = render_long_context(eval_json["long_context"], kit)   # format: posttrain/domains/longctx/analysis.py

`kit` is the report's HTML toolkit (telemetry/report/evals.py KIT: e, img, table, heatmap), passed in so a
domain never imports the report layer. The caller titles the section (report/evals.py: "Long context: EVAL"). Self-contained: the heatmaps are PNG data URIs (no network, no files). All text from the data is
HTML-escaped. A variant that is not a well-formed grid is named in a note instead of drawn.
"""

from __future__ import annotations

from typing import Any



def _bytes(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} GiB"


def _variant(name: str, grid: dict[str, Any], kit) -> str:
    lengths, depths = grid["lengths"], grid["depths"]
    png = kit.heatmap(grid["accuracy"], [str(x) for x in lengths], [f"{float(d):g}" for d in depths],
                       title=f"{name}: lost in the middle", xlabel="needle depth (fraction of the document)",
                       ylabel="prompt length (tokens)")
    tokens = [[t for t in row if t is not None] for row in grid.get("prompt_tokens", [])]
    means = ", ".join(f"{length}: {sum(row) / len(row):.0f}" for length, row in zip(lengths, tokens) if row)
    samples = sum(sum(row) for row in grid.get("n", []))
    note = f"{samples} samples; actual prompt tokens by nominal length: {means}" if means else f"{samples} samples"
    return (f"<h4>{kit.e(name)}</h4>"
            + kit.img(png, f"{name}: lost in the middle (accuracy by length and depth)")
            + f'<p class="meta">{kit.e(note)}</p>')


def render_long_context(data: dict, kit) -> str:
    """HTML of the long-context section (a `<section>`); "" when there is no data."""
    if not data:
        return ""
    out = ['<section class="long-context">']
    bad = []
    for name, grid in (data.get("variants") or {}).items():
        try:
            out.append(_variant(str(name), grid, kit))
        except (KeyError, TypeError, ValueError):
            bad.append(str(name))
    if bad:
        out.append(f'<p class="note">Not drawn (malformed grid): {kit.e(", ".join(bad))}</p>')
    kv, longest = data.get("kv_bytes_per_token"), data.get("max_prompt_tokens") or 0
    if isinstance(kv, (int, float)) and kv > 0:
        at = f"; {_bytes(kv * longest)} for the longest prompt ({longest} tokens)" if longest else ""
        out.append(f'<p class="meta">KV cache: {kit.e(_bytes(kv))} per token ({int(kv)} bytes){kit.e(at)}</p>')
    else:
        out.append('<p class="meta">KV cache bytes per token: not reported by this engine</p>')
    out.append("</section>")
    return "\n".join(out)
