"""The report's "Curves that matter": the few plots a reader of a post-training run looks at first,
per stage, drawn only for the metrics that stage logged.

    html = render_curves([("rl", metric_series(records)), ...])   # "" when no stage has any of them

CURVES lists them in page order as (title, pattern): every key matching the pattern (re.fullmatch)
goes into the plot; a pattern with named groups makes one plot per distinct match, its title
formatted with the groups (`suite/<SUITE>/pass@<k>` curves, one per suite and k). Within a plot
the overall key comes before its per-domain keys.
"""

from __future__ import annotations

import re

from posttrain.telemetry.report.html import e
from posttrain.telemetry.report.metrics import Series, plot_keys

CURVES: list[tuple[str, str]] = [
    ("loss", r"(eval_)?loss"),
    ("reward", r"reward(/.+)?"),
    ("held-out pass@1 per domain (in-loop)", r"pass@1(/.+)?"),
    ("suite {suite}: {metric} (in-loop)", r"suite/(?P<suite>[^/]+)/(?P<metric>pass@\d+)(/.+)?"),
    ("KL", r"kl|mismatch/kl"),
    ("entropy", r"entropy"),
    ("completion length", r"completion_len(/.+)?"),
    ("episode turns per domain", r"episode/[^/]+/turns"),
    ("episode stop reasons: {domain}", r"episode/(?P<domain>[^/]+)/stop/.+"),
    ("tool-call error rate per call: {domain}", r"episode/(?P<domain>[^/]+)/tool_error_rate/.+"),
    ("temperature", r"temperature"),
    ("replay share", r"replay/share_.+"),
    ("verifier agreement", r"verify/agreement/.+"),
    ("verifier disagreement per domain", r"verify/disagreement/.+"),
]


def curve_groups(keys: list[str]) -> list[tuple[str, list[str]]]:
    """(title, keys) of every CURVES plot that has keys, in CURVES order."""
    out = []
    for title, pattern in CURVES:
        plots: dict[str, list[str]] = {}
        for key in keys:
            m = re.fullmatch(pattern, key)
            if m:
                plots.setdefault(title.format(**m.groupdict()), []).append(key)
        out += [(t, sorted(ks, key=lambda k: (k.count("/"), k))) for t, ks in sorted(plots.items())]
    return out


def render_curves(stages: list[tuple[str, Series]]) -> str:
    out = []
    for name, series in stages:
        groups = curve_groups(list(series))
        if groups:
            plots = [plot_keys(series, keys, title=title, alt=f"{name}: {title}") for title, keys in groups]
            out.append(f"<h3>Curves: {e(name)}</h3>" + '<div class="plots">' + "".join(plots) + "</div>")
    return "\n".join(["<h2>Curves that matter</h2>"] + out) if out else ""
