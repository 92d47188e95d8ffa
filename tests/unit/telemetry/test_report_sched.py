"""The report's Scheduler section (report_sched.py): a synthetic RL metrics.jsonl (real MetricsLogger
output) with the scheduler's keys renders its plots and a per-domain table with the right numbers;
hundreds of domains stay readable; runs without the keys, or with only some, render without error."""

from __future__ import annotations

import base64
import re

import pytest

from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.report import write_report
from posttrain.telemetry.report.metrics import metric_series
from posttrain.telemetry.report.sched import HEADER, breaker_trips, render_scheduler

STEPS = range(6)
SQL_OPEN = {2, 3, 5}  # steps on which sql's breaker is open (two trips) and it trains no group


def _step(s: int) -> dict:
    m = {"loss": 0.1, "reward": 0.3, "sched/engine_busy": 0.8 + 0.02 * s, "sched/sandbox_busy": 0.5,
         "sched/slot_occupancy": 0.25, "sched/queue_wait_p50/fast": 0.1, "sched/queue_wait_p95/fast": 0.4,
         "sched/queue_wait_p50/long": 2.0, "sched/queue_wait_p95/long": 8.0, "sched/groups_started": 10,
         "sched/signal_groups": 6, "sched/cancelled": s % 2, "sched/carried_over": 2, "sched/requeued": 1,
         "sched/groups_trained": 8,
         "level/arith": s // 2, "level/maze<x>": 0,
         "value/pass_est/arith": 0.1 * s, "value/pass_est/maze<x>": 0.2, "value/pass_est/sql": 0.3,
         "reward/arith": s / 10, "reward/maze<x>": 0.5, "pass_rate/arith": s / 20, "pass_rate/maze<x>": 0.1,
         "sched/tail_p95/arith": 1.0, "sched/tail_p95/maze<x>": 20.0 + s, "sched/tail_p95/sql": 3.0,
         "breaker/open/arith": 0, "breaker/open/maze<x>": 0, "breaker/open/sql": int(s in SQL_OPEN)}
    if s in SQL_OPEN:
        m.update({"sched/share/arith": 0.75, "sched/share/maze<x>": 0.25})
    else:
        m.update({"sched/share/arith": 0.5, "sched/share/maze<x>": 0.25, "sched/share/sql": 0.25,
                  "reward/sql": 0.2 * (1 + [0, 1, 4].index(s)), "pass_rate/sql": 0.3})
    if s in (0, 4):
        m.update({"pass@1/arith": 0.2 + s / 20, "pass@1/sql": 0.1 + s / 20})
    if s == 0:
        m.update({"build/skipped_items/arith": 0, "build/skipped_items/maze<x>": 1, "build/skipped_items/sql": 0,
                  "build/seconds/arith": 1.5, "build/seconds/maze<x>": 12.25, "build/seconds/sql": 0.5})
    return m


def _rows(html: str) -> list[list[str]]:
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", html) if "<td>" in row]


def _section(html: str, title: str) -> str:
    start = html.index(f"<h2>{title}</h2>")
    nxt = html.find("<h2>", start + 1)
    return html[start:nxt if nxt >= 0 else len(html)]


@pytest.fixture(scope="module")
def sched_html(tmp_path_factory):
    run = tmp_path_factory.mktemp("sched") / "run"
    with MetricsLogger(run / "rl", tensorboard=False) as log:
        for s in STEPS:
            log.log(s, _step(s))
    return write_report(run).read_text()


def test_section_placed_with_its_plots(sched_html):
    h2 = re.findall(r"<h2>(.*?)</h2>", sched_html)
    assert h2.index("Curves that matter") + 1 == h2.index("Scheduler") < h2.index("Stages")
    sec = _section(sched_html, "Scheduler")
    assert "<h3>Scheduler: rl</h3>" in sec
    assert re.findall(r'alt="([^"]*)"', sec) == [
        "rl: utilisation (busy fraction)", "rl: queue wait (s) per lane", "rl: groups per step",
        "rl: curriculum level per domain", "rl: share of the groups trained per domain",
        "rl: pass-rate estimate per domain", "rl: tail latency p95 (s) per domain"]
    for src in re.findall(r'<img src="data:image/png;base64,([^"]+)"', sec):
        assert base64.b64decode(src)[:8] == b"\x89PNG\r\n\x1a\n"
    assert ("Over the run: engine busy 85.0% (mean); sandbox busy 50.0% (mean); slot occupancy 25.0% (mean); "
            "groups started 60; signal groups 36; groups trained 48; cancelled 3; carried over 12; requeued 6.") in sec


def test_domain_table_cells(sched_html):
    sec = _section(sched_html, "Scheduler")
    assert '<div class="scroll"><table class="sched">' in sec and ".scroll{max-height:32rem;overflow:auto" in sched_html
    assert re.findall(r"<th>(.*?)</th>", sec) == HEADER
    assert "3 domain(s)" in sec
    # sorted by domain; groups trained = sum of share x groups_trained; "–" for what a domain never logged
    assert _rows(sec) == [
        ["arith", "30", "0.625", "0.25", "0.4", "2", "0.5", "0.25", "1", "0", "0", "1.5"],
        ["maze&lt;x&gt;", "12", "0.25", "0.1", "–", "0", "0.2", "0.5", "22.5", "0", "1", "12.25"],
        ["sql", "6", "0.25", "0.3", "0.3", "–", "0.3", "0.4", "3", "2", "0", "0.5"],
    ]


def test_per_domain_trained_count_preferred_and_breaker_edges():
    recs = [{"step": s, "sched/trained/a": 3, "sched/share/a": 0.5, "sched/groups_trained": 100,
             "breaker/open/a": v} for s, v in enumerate([1, 1, 0, None, 1, 0, 0, 1])]
    series = metric_series(recs)
    assert breaker_trips(series, "a") == 3  # open at the first record counts; a gap (null) is skipped
    html = render_scheduler([("rl", series)])
    assert _rows(html)[0][:3] == ["a", "24", "0.5"]  # 8 x sched/trained/a, not share x groups_trained


def test_hundreds_of_domains_plot_spread_and_scroll():
    names = [f"d{i:03d}" for i in range(300)]
    recs = [{"step": s, **{f"level/{d}": (i % 5) + s for i, d in enumerate(names)},
             **{f"sched/share/{d}": 1 / 300 for d in names}} for s in range(3)]
    html = render_scheduler([("rl", metric_series(recs))])
    alts = re.findall(r'alt="([^"]*)"', html)
    assert alts == ["rl: curriculum level per domain: min / mean / max over 300 domains",
                    "rl: share of the groups trained per domain: min / mean / max over 300 domains"]
    rows = _rows(html)
    assert [r[0] for r in rows] == names and rows[7][5] == "4"  # d007: level 7 % 5 + 2 at the last step
    assert "300 domain(s)" in html and '<div class="scroll">' in html


def test_partial_and_absent_keys(tmp_path):
    # only utilisation logged: that plot, no table; nulls (NaN) are gaps, never a crash
    series = metric_series([{"step": s, "sched/engine_busy": None if s == 1 else 0.5} for s in range(3)])
    html = render_scheduler([("rl", series)])
    assert re.findall(r'alt="([^"]*)"', html) == ["rl: utilisation (busy fraction)"] and "<table" not in html
    assert "engine busy 50.0% (mean)" in html
    # an old run: per-domain rewards and pass rates but no scheduler key -> no section at all
    with MetricsLogger(tmp_path / "rl", tensorboard=False) as log:
        for s in range(3):
            log.log(s, {"loss": 1.0, "reward/arith": 0.5, "pass_rate/arith": 0.2, "pass@1/arith": 0.1})
    page = write_report(tmp_path).read_text()
    assert "<h2>Curves that matter</h2>" in page and "Scheduler" not in page
    assert render_scheduler([]) == ""
