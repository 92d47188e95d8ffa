"""The report leads with the answer: the verdict line, the per-stage change table (score, Δ, p, n, wall time,
time-capped stages), example completions (best and worst, escaped, cut, empty and token-cap flags) and the
curves rules (n in the in-loop titles, sub-1e-6 series and constants as values), on synthetic run dirs."""

from __future__ import annotations

import json
import re

import pytest

from posttrain.telemetry.report import find_stages, find_suites, write_report
from posttrain.telemetry.report.curves import render_curves
from posttrain.telemetry.report.examples import MAX_CHARS, read_samples, render_examples
from posttrain.telemetry.report.verdict import stage_facts, verdict_text
from posttrain.telemetry.report.metrics import metric_series
from tests.unit.telemetry.report_fixtures import lead_run, suite_run


def _rows(html: str, first_cell: str) -> list[list[str]]:
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", html, re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
        if cells and cells[0] == first_cell:
            out.append(cells)
    return out


@pytest.fixture(scope="module")
def lead(tmp_path_factory):
    run = lead_run(tmp_path_factory.mktemp("lead") / "run")
    return run, write_report(run).read_text()


def test_verdict_names_change_test_n_time_and_the_cap(lead):
    run, html = lead
    facts = stage_facts(run, find_stages(run))
    assert (facts["base"].seconds, facts["sft"].seconds, facts["rl"].seconds) == (95.0, 180.0, 510.0)
    assert facts["base"].capped == "stopped by its time cap (max_seconds = 900) at step 412 of 1000"
    assert facts["sft"].capped is None and facts["rl"].capped is None
    text = verdict_text(find_suites(run), facts)
    assert text == ("rl raised general pass@1 from 0.3 (base) to 0.45 (+15.0 points, p < 0.001, n = 200, significant) "
                    "in 11.5 min (sft 3.0 min, rl 8.5 min); WARNING: base stopped by its time cap (max_seconds = 900) "
                    "at step 412 of 1000.")
    head = html[html.index("<h2>Headline</h2>"):]
    assert head.index('<p class="verdict">') < head.index("<h3>What each stage changed") < head.index("<h3>Held-out")


def test_stage_table_per_stage_and_domain(lead):
    _, html = lead
    table = re.search(r'<table class="stages">.*?</table>', html, re.S).group(0)
    assert re.findall(r"<th>(.*?)</th>", table) == ["stage", "domain", "pass@1 [95% CI]", "Δ vs stage before", "p",
                                                    "significant", "n", "wall time", "notes"]
    assert _rows(table, "base") == [["base", "overall", "0.3 [0.25, 0.35]", "–", "–", "–", "200", "1.6 min",
                                     "stopped by its time cap (max_seconds = 900) at step 412 of 1000"]]
    assert _rows(table, "sft") == [["sft", "overall", "0.42 [0.37, 0.47]", "+0.120", "p=0.003", "yes", "200", "3.0 min",
                                    ""]]
    domain_rows = _rows(table, "")
    assert domain_rows[0] == ["", "chain&lt;sum&gt;", "0.4 [0.35, 0.45]", "–", "–", "–", "100", "",
                              "5 of 5 hit the 64-token cap"]  # the base runs to the cap
    assert domain_rows[2] == ["", "chain&lt;sum&gt;", "0.44 [0.39, 0.49]", "+0.040", "p=0.500", "no", "100", "",
                              "4 of 4 completions empty"]  # sft's empty domain
    assert domain_rows[5] == ["", "gcd", "0.5 [0.45, 0.55]", "+0.100", "p=0.040", "yes", "100", "", ""]


def test_examples_best_and_worst_escaped_with_flags(lead):
    run, html = lead
    ex = html[html.index("<h3>Example completions"):html.index("<h3>Held-out")]
    assert re.findall(r"<summary>(.*?)</summary>", ex) == ["base", "sft", "rl"]
    rl = ex[ex.index("<summary>rl</summary>"):]
    # rl gcd: the first two right ones, then the two worst (lowest score first); HTML in a completion is text
    assert [r[0] for r in _rows(rl, "gcd/2") + _rows(rl, "gcd/3") + _rows(rl, "gcd/0") + _rows(rl, "gcd/1")] == [
        "gcd/2", "gcd/3", "gcd/0", "gcd/1"]
    assert rl.index("gcd/3") < rl.index("gcd/0") < rl.index("gcd/1") and "gcd/4" not in rl
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; wrong" in rl and "<b>bold" not in html
    assert ex.count('<span class="fail">EMPTY</span>') == 2  # sft chain<sum>: two worst shown, both empty
    assert ex.count('<span class="fail">hit the 64-token cap</span>') == 4  # base: 2 per domain
    assert "0 of 4 correct, 4 empty, 0 hit the 64-token cap" in ex
    # a torn line is skipped; the cut keeps MAX_CHARS characters
    stats = read_samples(run / "eval" / "general" / "rl.completions.jsonl")
    assert {d: (s.total, s.correct) for d, s in stats.items()} == {"gcd": (5, 3), "chain<sum>": (1, 1)}
    long = run / "long.completions.jsonl"
    long.write_text(json.dumps({"id": "t", "domain": "d", "completion": "x" * 5000, "correct": False}) + "\n")
    suite = find_suites(run)[0]
    page = render_examples(suite, {"rl": read_samples(long)})
    assert "x" * MAX_CHARS + "…</pre>" in page and "x" * (MAX_CHARS + 1) not in page


def test_old_compare_without_span_quotes_the_last_step(tmp_path):
    run = suite_run(tmp_path / "run")
    text = verdict_text(find_suites(run), stage_facts(run, find_stages(run)))
    assert text.startswith("rl raised general pass@1 from 0.3 (base) to 0.45 (+15.0 points; first to last not tested; "
                           "rl vs sft: +3.0 points, p = 0.410, n = 200, not significant)")
    assert "WARNING" not in text
    html = write_report(run).read_text()
    assert "Example completions" not in html  # no completions files: no examples section


def test_rl_stage_cut_by_max_seconds_is_flagged(tmp_path):
    run = suite_run(tmp_path / "run")
    (run / "rl" / "config.yaml").write_text("train:\n  steps: 300\n  max_seconds: 360\n")
    facts = stage_facts(run, find_stages(run))
    assert facts["rl"].capped == "stopped by its time cap (max_seconds = 360) at step 12 of 300"
    (run / "rl" / "config.yaml").write_text("train:\n  steps: 12\n  max_seconds: 360\n")  # finished: no flag
    assert stage_facts(run, find_stages(run))["rl"].capped is None


def test_curves_titles_carry_n_and_tiny_or_constant_series_are_values():
    records = [{"step": s, "time": float(s), "pass@1": 0.1 * s, "pass@1/a": 0.1 * s, "suite/g/pass@1": 0.2 + s / 100,
                "kl": 0.01 * s, "mismatch/kl": 1e-12 * s, "pass_rate": s / 10, "total_params": 123456.0}
               for s in range(5)]
    config = {"tasks": [{"name": "a", "eval_tasks": 50}], "eval": {"suites": {"g": {"n": 100}}}}
    html = render_curves([("rl", metric_series(records))], {"rl": config})
    assert re.findall(r'alt="([^"]*)"', html) == [
        "rl: training pass rate (rollouts)", "rl: held-out pass@1 per domain (in-loop, greedy, n = 50 per domain)",
        "rl: suite g: pass@1 (in-loop, n = 100 per domain)", "rl: KL"]
    assert _rows(html, "mismatch/kl") == [["mismatch/kl", "max |value| = 4.0e-12 (below 1e-06: not drawn)", "5"]]
    assert "total_params" not in html  # not a curve that matters: only the dump lists it


def test_pipeline_records_each_stage_wall_time(tmp_path):
    """`posttrain run` writes timings.json after each stage (here the report stage alone), keeping earlier entries."""
    from posttrain.config.pipeline import PipelineConfig
    from posttrain.recipes.pipeline import run as run_pipeline

    run = suite_run(tmp_path / "run")
    (run / "timings.json").write_text(json.dumps({"rl": 510.0}))
    report = run_pipeline(PipelineConfig(run_dir=str(run), stages=["report"]))
    timings = json.loads((run / "timings.json").read_text())
    assert report.is_file() and set(timings) == {"rl", "report"} and timings["rl"] == 510.0 and timings["report"] > 0
    assert "in 8.5 min" in report.read_text()  # the report read the rl entry written before it ran


def test_the_primary_suite_on_a_tie_is_the_run_s_best_by_then_its_first_suite(tmp_path):
    from types import SimpleNamespace

    from posttrain.telemetry.report.verdict import primary, suite_order

    general, trained = (SimpleNamespace(name=n, labels=["start", "rl"]) for n in ("general", "trained"))
    (tmp_path / "config.yaml").write_text("eval:\n  suites:\n    trained: {}\n    general: {}\n")
    assert suite_order(tmp_path) == ["trained", "general"]
    assert primary([general, trained], suite_order(tmp_path)) is trained
    (tmp_path / "config.yaml").write_text("eval:\n  best_by: general\n  suites:\n    trained: {}\n    general: {}\n")
    assert primary([trained, general], suite_order(tmp_path)) is general
    assert primary([general, trained]) is general  # no config: the first found
    three = SimpleNamespace(name="other", labels=["base", "sft", "rl"])
    assert primary([general, trained, three], ["trained"]) is three  # more models win over the order
