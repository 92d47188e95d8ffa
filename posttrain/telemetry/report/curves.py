"""The report's "Curves that matter": the few plots a reader of a post-training run looks at first,
per stage, drawn only for the metrics that stage logged.

    html = render_curves([("rl", metric_series(records)), ...], {"rl": parsed_config})   # "" when none

CURVES lists them in page order as (title, pattern): every key matching the pattern (re.fullmatch)
goes into the plot; a pattern with named groups makes one plot per distinct match, its title
formatted with the groups (`suite/<SUITE>/pass@<k>` curves, one per suite and k). Within a plot
the overall key comes before its per-domain keys. `{n}` in a title is the eval's size from the
stage's config: the in-loop held-out sets are the mixture's `tasks[].eval_tasks` (default 64) per
domain, a suite's is `eval.suites.<SUITE>.n` per domain ("n not recorded" without a config). The
two are different task sets, so their curves differ at the same step; the titles say which.

Constant series and series below metrics.TINY are not drawn (metrics.split_drawable): they are
listed per stage with their value under the plots.
"""

from __future__ import annotations

import re

from typing import Any

from posttrain.telemetry.report.html import e, fmt, is_num
from posttrain.telemetry.report.metrics import TINY, Series, plot_groups, values_table

DEFAULT_EVAL_TASKS = 64  # config/common.py DomainConfig.eval_tasks

CURVES: list[tuple[str, str]] = [
    ("loss", r"(eval_)?loss"),
    ("reward", r"reward(/.+)?"),
    ("training pass rate (rollouts)", r"pass_rate(/.+)?"),
    ("held-out pass@1 per domain (in-loop, greedy, {n})", r"pass@1(/.+)?"),
    ("suite {suite}: {metric} (in-loop, {n})", r"suite/(?P<suite>[^/]+)/(?P<metric>pass@\d+)(/.+)?"),
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


def _per_domain(ns: dict[str, Any]) -> str:
    if not ns:
        return "n not recorded"
    if len(set(ns.values())) == 1:
        return f"n = {fmt(next(iter(ns.values())))} per domain"
    return "n per domain: " + ", ".join(f"{d} {fmt(n)}" for d, n in sorted(ns.items()))


def eval_size(config: dict[str, Any] | None, suite: str | None) -> str:
    """The `{n}` of a title (module docstring)."""
    config = config or {}
    if suite is not None:
        section = config.get("eval") if isinstance(config.get("eval"), dict) else {}
        found = (section.get("suites") or {}).get(suite) if isinstance(section.get("suites"), dict) else None
        n = found.get("n", 50) if isinstance(found, dict) else None  # config/eval.py SuiteConfig.n default
        return f"n = {fmt(n)} per domain" if is_num(n) else "n not recorded"
    tasks = config.get("tasks") if isinstance(config.get("tasks"), list) else []
    return _per_domain({str(t.get("name")): t.get("eval_tasks", DEFAULT_EVAL_TASKS)
                        for t in tasks if isinstance(t, dict) and t.get("weight", 1) != 0})


def curve_groups(keys: list[str], config: dict[str, Any] | None = None) -> list[tuple[str, list[str]]]:
    """(title, keys) of every CURVES plot that has keys, in CURVES order."""
    out = []
    for title, pattern in CURVES:
        plots: dict[str, list[str]] = {}
        for key in keys:
            m = re.fullmatch(pattern, key)
            if m:
                groups = m.groupdict()
                n = eval_size(config, groups.get("suite")) if "{n}" in title else ""
                plots.setdefault(title.format(n=n, **groups), []).append(key)
        out += [(t, sorted(ks, key=lambda k: (k.count("/"), k))) for t, ks in sorted(plots.items())]
    return out


def render_curves(stages: list[tuple[str, Series]], configs: dict[str, dict[str, Any]] | None = None) -> str:
    out = []
    for name, series in stages:
        plots, flat = plot_groups(series, curve_groups(list(series), (configs or {}).get(name)), name)
        if plots or flat:
            out.append(f"<h3>Curves: {e(name)}</h3>" + '<div class="plots">' + "".join(plots) + "</div>"
                       + values_table(flat, f"Not drawn: constant, or every value within ±{TINY:g}"))
    return "\n".join(["<h2>Curves that matter</h2>"] + out) if out else ""
