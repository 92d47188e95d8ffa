"""The report's "Scheduler" section: what the RL scheduler (posttrain/rl/) logged per step,
as plots and one per-domain table, for every stage that logged any scheduler key.

    html = render_scheduler([("rl", metric_series(records)), ...])   # "" when no stage has one

A stage has a scheduler section when it logged any key under `sched/`, `level/`, `value/pass_est/`,
`breaker/open/` or `build/` (old runs without them show nothing). Each part is drawn only from the
keys that exist:

- plots (one line per key, thinned like every report curve): utilisation (`sched/engine_busy`,
  `sched/sandbox_busy`, `sched/slot_occupancy`), queue waits per lane (`sched/queue_wait_pNN/LANE`),
  groups per step (`sched/groups_started`, `signal_groups`, `groups_trained`, `cancelled`,
  `carried_over`, `requeued`), and per domain: curriculum levels (`level/D`), shares of the step's groups
  (`sched/share/D`), pass-rate estimates (`value/pass_est/D`), tail latency (`sched/tail_p95/D`).
  A per-domain plot over more than MAX_DOMAIN_LINES domains draws the min / mean / max over the
  domains each step instead of one line per domain (the table has every domain);
- totals: mean utilisation over the steps, summed group counts;
- the per-domain table, sorted by domain, in a scrolling box (hundreds of rows stay readable):
  groups trained (sum of `sched/trained/D` per step; else of `sched/share/D` x
  `sched/groups_trained`; else "–"), mean share, the last `pass_rate/D`, the last held-out
  `pass@1/D`, the last level, the last pass-rate estimate, the mean `reward/D` over the steps that
  logged it, the mean of the per-step tail p95, breaker trips (times `breaker/open/D` went from
  closed to open, an open first record counting as one), and the last `build/skipped_items/D` and
  `build/seconds/D` (logged when the domain's sets are built). A value never logged is "–".
"""

from __future__ import annotations

import math
import re

from posttrain.telemetry.plots import MAX_LEGEND
from posttrain.telemetry.report.html import e, fmt, table
from posttrain.telemetry.report.metrics import Series, plot_keys

MAX_DOMAIN_LINES = MAX_LEGEND
SCHED_KEY = re.compile(r"(sched|level|value/pass_est|breaker/open|build)/.+")
UTILISATION = ["sched/engine_busy", "sched/sandbox_busy", "sched/slot_occupancy"]
GROUP_COUNTS = ["sched/groups_started", "sched/signal_groups", "sched/groups_trained", "sched/cancelled",
                "sched/carried_over", "sched/requeued"]
QUEUE_WAIT = re.compile(r"sched/queue_wait_p\d+/.+")
# (title, key prefix) of the per-domain plots, in page order
DOMAIN_PLOTS = [("curriculum level per domain", "level/"),
                ("share of the groups trained per domain", "sched/share/"),
                ("pass-rate estimate per domain", "value/pass_est/"),
                ("tail latency p95 (s) per domain", "sched/tail_p95/")]
# key prefixes whose suffix names a domain (the table's rows)
DOMAIN_PREFIXES = ["level/", "value/pass_est/", "sched/share/", "sched/tail_p95/", "sched/trained/", "breaker/open/",
                   "build/skipped_items/", "build/seconds/", "reward/", "pass_rate/", "pass@1/"]
HEADER = ["domain", "groups trained", "mean share", "last pass rate", "last held-out pass@1", "last level",
          "pass-rate estimate", "mean reward", "tail p95 s (mean)", "breaker trips", "skipped items", "build s"]


def has_scheduler(series: Series) -> bool:
    return any(SCHED_KEY.fullmatch(k) for k in series)


def _finite(series: Series, key: str) -> list[tuple[int, float]]:
    if key not in series:
        return []
    xs, ys = series[key]
    return [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]


def _last(series: Series, key: str) -> float | None:
    pts = _finite(series, key)
    return pts[-1][1] if pts else None


def _mean(series: Series, key: str) -> float | None:
    pts = _finite(series, key)
    return sum(y for _, y in pts) / len(pts) if pts else None


def domains(series: Series) -> list[str]:
    """Every domain named by a per-domain key (DOMAIN_PREFIXES), sorted."""
    found = {k[len(p):] for k in series for p in DOMAIN_PREFIXES if k.startswith(p) and len(k) > len(p)}
    return sorted(found)


def groups_trained(series: Series, domain: str) -> float | None:
    """Groups of `domain` trained over the run (module docstring); None when not derivable."""
    trained = _finite(series, f"sched/trained/{domain}")
    if trained:
        return sum(y for _, y in trained)
    totals = dict(_finite(series, "sched/groups_trained"))
    shares = _finite(series, f"sched/share/{domain}")
    if not totals or not shares:
        return None
    return sum(share * totals[step] for step, share in shares if step in totals)


def breaker_trips(series: Series, domain: str) -> int | None:
    pts = _finite(series, f"breaker/open/{domain}")
    if not pts:
        return None
    trips, was_open = 0, False
    for _, y in pts:
        is_open = y >= 0.5
        trips += is_open and not was_open
        was_open = is_open
    return trips


def domain_rows(series: Series) -> list[list[str]]:
    """The per-domain table's rows (HEADER), sorted by domain, formatted."""
    rows = []
    for d in domains(series):
        trained = groups_trained(series, d)
        rows.append([d, fmt(None if trained is None else round(trained)), fmt(_mean(series, f"sched/share/{d}")),
                     fmt(_last(series, f"pass_rate/{d}")), fmt(_last(series, f"pass@1/{d}")),
                     fmt(_last(series, f"level/{d}")), fmt(_last(series, f"value/pass_est/{d}")),
                     fmt(_mean(series, f"reward/{d}")), fmt(_mean(series, f"sched/tail_p95/{d}")),
                     fmt(breaker_trips(series, d)), fmt(_int(_last(series, f"build/skipped_items/{d}"))),
                     fmt(_last(series, f"build/seconds/{d}"))])
    return rows


def _int(v: float | None) -> int | float | None:
    return int(v) if v is not None and v == int(v) else v


def spread(series: Series, keys: list[str]) -> Series:
    """min / mean / max over `keys` at every step any of them logged a finite value."""
    by_step: dict[int, list[float]] = {}
    for k in keys:
        for x, y in _finite(series, k):
            by_step.setdefault(x, []).append(y)
    steps = sorted(by_step)
    return {"min": (steps, [min(by_step[s]) for s in steps]),
            "mean": (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]),
            "max": (steps, [max(by_step[s]) for s in steps])}


def _plots(name: str, series: Series) -> list[str]:
    out = []

    def plot(src: Series, keys: list[str], title: str) -> None:
        if keys:
            out.append(plot_keys(src, keys, title=title, alt=f"{name}: {title}"))

    plot(series, [k for k in UTILISATION if k in series], "utilisation (busy fraction)")
    plot(series, sorted(k for k in series if QUEUE_WAIT.fullmatch(k)), "queue wait (s) per lane")
    plot(series, [k for k in GROUP_COUNTS if k in series], "groups per step")
    for title, prefix in DOMAIN_PLOTS:
        keys = sorted(k for k in series if k.startswith(prefix) and len(k) > len(prefix))
        if len(keys) > MAX_DOMAIN_LINES:
            plot(spread(series, keys), ["min", "mean", "max"], f"{title}: min / mean / max over {len(keys)} domains")
        else:
            plot(series, keys, title)
    return out


def _totals(series: Series) -> str:
    parts = []
    for key in UTILISATION:
        m = _mean(series, key)
        if m is not None:
            parts.append(f"{key.split('/', 1)[1].replace('_', ' ')} {100 * m:.1f}% (mean)")
    for key in GROUP_COUNTS:
        pts = _finite(series, key)
        if pts:
            parts.append(f"{key.split('/', 1)[1].replace('_', ' ')} {fmt(_int(sum(y for _, y in pts)))}")
    return f'<p class="meta">Over the run: {e("; ".join(parts))}.</p>' if parts else ""


def render_stage_scheduler(name: str, series: Series) -> str:
    out = [f"<h3>Scheduler: {e(name)}</h3>", _totals(series)]
    plots = _plots(name, series)
    if plots:
        out.append('<div class="plots">' + "".join(plots) + "</div>")
    rows = domain_rows(series)
    if rows:
        out.append(f'<p class="meta">{len(rows)} domain(s)</p>'
                   + '<div class="scroll">' + table(HEADER, rows, cls="sched") + "</div>")
    return "\n".join(p for p in out if p)


def render_scheduler(stages: list[tuple[str, Series]]) -> str:
    """HTML of the Scheduler section (an <h2> and one <h3> per stage with scheduler keys); "" if none."""
    parts = [render_stage_scheduler(name, series) for name, series in stages if has_scheduler(series)]
    return "\n".join(["<h2>Scheduler</h2>"] + parts) if parts else ""
