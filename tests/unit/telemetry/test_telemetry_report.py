"""write_report: fake pipeline runs (real MetricsLogger output, loose eval JSONs, a suite comparison with
compare.json) rendered to one self-contained page: headline, curves, evals, stages, the full dump."""

from __future__ import annotations

import base64
import html as html_lib
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from posttrain.config.base import save_config
from posttrain.config.pipeline import BaseConfig, PipelineConfig
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import PosttrainError
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.plots import grouped_bar_plot, line_plot
from posttrain.telemetry.report import write_report
from posttrain.telemetry.report.curves import curve_groups
from posttrain.telemetry.report.dump import group_metrics
from posttrain.telemetry.report.evals import EXTRA_TABLES
from posttrain.telemetry.report.metrics import thin
from tests.unit.telemetry.report_fixtures import eval_doc, suite_run

IMG = '<img src="data:image/png;base64,'


def _eval_json(path: Path, p1: dict[str, float], model: str, samples: int = 1) -> None:
    domains = {d: {"n": 50, "pass@1": v, "pass@4": min(1.0, v + 0.1), "mean_length": 20.5} for d, v in p1.items()}
    mean = sum(p1.values()) / len(p1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": model, "samples": samples, "seed": 1000000, "domains": domains,
                                "overall": {"pass@1": mean, "pass@4": min(1.0, mean + 0.1)}}))


@pytest.fixture
def pipeline_run(tmp_path):
    run = tmp_path / "quick<run>"
    save_config(PipelineConfig(), run)
    with MetricsLogger(run / "base", tensorboard=False) as log:  # -> loss, lr, tokens_per_s: 3 plots
        for s in range(20):
            log.log(s, {"loss": 5.0 / (s + 1), "lr": 1e-3, "tokens_per_s": 1000.0 + s})
    save_config(BaseConfig(), run / "base")
    with MetricsLogger(run / "sft") as log:  # -> loss+eval_loss, reward/*, lr, grad_norm: 4 plots
        log.log(0, {"train_examples": 270, "loss_tokens": 1000})  # one-off facts: table only, no plot
        for s in range(1, 31):
            m = {"loss": 2.0 / s, "lr": 3e-4, "grad_norm": float("nan") if s == 7 else 0.5,
                 "reward/arith": s / 30, "reward/chain": 0.5, "phase": "warmup"}
            if s % 10 == 0:
                m["eval_loss"] = 2.5 / s
            log.log(s, m)
    sft_cfg = SFTConfig()
    sft_cfg.data.train = "data/<script>alert(1)</script>.jsonl"
    save_config(sft_cfg, run / "sft")
    ckpt = run / "sft" / "checkpoints" / "step-00000010"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text('{"step": 10}')
    _eval_json(ckpt / "eval.json", {"ignored": 1.0}, "must not appear")  # checkpoints/ are not searched
    (run / "sft" / "other.json").write_text('{"not": "an eval"}')
    (run / "sft" / "broken.json").write_text("{not json")
    _eval_json(run / "eval" / "base.json", {"basic_arithmetic": 0.1, "chain_sum": 0.2, "x<y>": 0.0}, "runs/base")
    _eval_json(run / "eval" / "sft.json", {"basic_arithmetic": 0.5, "chain_sum": 0.3, "x<y>": 0.25}, "runs/sft")
    _eval_json(run / "eval" / "base_sampled.json", {"basic_arithmetic": 0.1, "chain_sum": 0.2, "x<y>": 0.0}, "runs/base",
               samples=4)  # sampled: compared by its pass@4, the ceiling RL can turn into pass@1
    return run


class _TagCounter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.opened, self.closed, self.imgs = {}, {}, []

    def handle_starttag(self, tag, attrs):
        self.opened[tag] = self.opened.get(tag, 0) + 1
        if tag == "img":
            self.imgs.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        self.closed[tag] = self.closed.get(tag, 0) + 1


def _rows(html: str, first_cell: str) -> list[list[str]]:
    """Cells of every table row whose first cell is `first_cell` (tags inside cells stripped)."""
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", html):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", row)]
        if cells and cells[0] == first_cell:
            out.append(cells)
    return out


def test_pipeline_report_with_loose_evals(pipeline_run):
    """Old-style evals (eval/NAME.json, no compare.json) render as before: a table each, a comparison."""
    path = write_report(pipeline_run)
    assert path == pipeline_run.resolve() / "report.html"
    html = path.read_text()
    # self-contained: no external assets, no scripts (the config's <script> is escaped text)
    assert not re.search(r'(src|href)="(?!data:)', html) and "<script" not in html and "<link" not in html
    assert "data/&lt;script&gt;alert(1)&lt;/script&gt;.jsonl" in html
    assert "<title>posttrain report — quick&lt;run&gt;</title>" in html
    assert re.findall(r"<h2>(.*?)</h2>", html) == ["Headline", "Curves that matter", "Evaluations", "Stages",
                                                   "All metrics"]
    assert "No suite comparison in this run" in html  # the headline says it has no significance tests
    # stages in pipeline order, each with its resolved config
    assert re.findall(r"<h3>((?:Stage|Config): .*?)</h3>", html) == ["Config: quick&lt;run&gt;", "Stage: base",
                                                                      "Stage: sft"]
    assert html.count("<summary>Resolved config</summary>") == 3
    assert "row_tokens: 512" in html and "corpus_examples: 20000" in html
    parser = _TagCounter()
    parser.feed(html)
    for src in parser.imgs:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for tag in ("table", "details", "div", "h2", "h3", "tr", "td"):
        assert parser.opened.get(tag) == parser.closed.get(tag), tag
    alts = re.findall(r'<img src="data:[^"]+" alt="([^"]*)"', html)
    assert len(alts) == len(parser.imgs)
    assert alts == ["base: loss", "sft: loss", "sft: reward",  # curves that matter
                    "pass@1 by domain",  # the loose evals' comparison
                    "base: loss", "base: tokens_per_s",  # the dump: every key that varies
                    "sft: loss", "sft: reward"]
    # constants (lr, grad_norm 0.5 around a NaN, one-off counts) are listed with their value, not drawn
    dump = html[html.index("<h2>All metrics</h2>"):]
    assert "values in the table above): lr</p>" in dump
    assert "values in the table above): grad_norm, loss_tokens, lr, reward/chain, train_examples</p>" in dump
    # summary table of the sft stage: NaN logged as null is skipped, last values are right
    assert _rows(html, "grad_norm") == [["grad_norm", "0.5", "0.5", "0.5", "29"]]
    assert _rows(html, "eval_loss") == [["eval_loss", "0.0833", "0.0833", "0.25", "3"]]
    assert _rows(html, "train_examples") == [["train_examples", "270", "270", "270", "1"]]
    assert "phase" not in re.sub(r"<pre>.*?</pre>", "", html, flags=re.S)  # text metrics are not plotted
    # one table per eval file, a comparison table; checkpoints/ and non-eval JSON are ignored
    assert re.findall(r"<h3>Eval: (.*?)</h3>", html) == ["base", "sft", "base_sampled"]
    assert "must not appear" not in html and "ignored" not in html
    assert _rows(html, "basic_arithmetic") == [
        ["basic_arithmetic", "50", "0.1", "0.2", "20.5"],
        ["basic_arithmetic", "50", "0.5", "0.6", "20.5"],
        ["basic_arithmetic", "50", "0.1", "0.2", "20.5"],
        ["basic_arithmetic", "0.1", "0.5", "0.2", "+0.400"],  # Δ: the greedy evals, sft − base
    ]
    assert _rows(html, "x&lt;y&gt;")[-1] == ["x&lt;y&gt;", "0", "0.25", "0.1", "+0.250"]
    assert _rows(html, "overall")[-1] == ["overall", "0.1", "0.35", "0.2", "+0.250"]
    assert "<th>pass@1 base</th><th>pass@1 sft</th><th>pass@4 base_sampled</th><th>Δ pass@1 sft − base</th>" in html
    assert "model: runs/base, samples: 4, seed: 1000000" in html


@pytest.fixture(scope="module")
def suite_html(tmp_path_factory):
    """The report of report_fixtures.suite_run, rl's eval JSON carrying extra tables (fake renderers)."""
    mp = pytest.MonkeyPatch()
    mp.setitem(EXTRA_TABLES, "long_context", f"{__name__}:fake_long_context")
    mp.setitem(EXTRA_TABLES, "safety", f"{__name__}:fake_safety")
    extra = {"rl": {"long_context": {"cells": "<needle>"}, "safety": {"refusal": 0.9}}}
    try:
        return write_report(suite_run(tmp_path_factory.mktemp("suite") / "run", extra)).read_text()
    finally:
        mp.undo()


def fake_long_context(data: dict, kit) -> str:
    return f'<p class="fake">heatmap of {html_lib.escape(data["cells"])}</p>'


def fake_safety(data: dict, kit) -> str:
    return f'<p class="fake">refusal {data["refusal"]}</p>'


def _section(html: str, title: str) -> str:
    """From the <h2> titled `title` to the next <h2>."""
    start = html.index(f"<h2>{title}</h2>")
    nxt = html.find("<h2>", start + 1)
    return html[start:nxt if nxt >= 0 else len(html)]


def test_headline_leads_with_deltas_and_significance(suite_html):
    assert re.findall(r"<h2>(.*?)</h2>", suite_html) == ["Headline", "Curves that matter", "Evaluations", "Stages",
                                                         "All metrics"]
    head = _section(suite_html, "Headline")
    table = re.search(r'<table class="headline">.*?</table>', head).group(0)
    assert re.findall(r"<th>(.*?)</th>", table) == ["model", "n", "pass@1 [95% CI]", "Δ pass@1 vs previous",
                                                    "pass@8 [95% CI]", "Δ pass@8 vs previous"]
    assert _rows(table, "base") == [["base", "200", "0.3 [0.25, 0.35]", "–", "0.55 [0.5, 0.6]", "–"]]
    assert _rows(table, "sft") == [["sft", "200", "0.42 [0.37, 0.47]", "+0.120 (p=0.003, significant)",
                                    "0.66 [0.61, 0.71]", "+0.110 (p&lt;0.001, significant)"]]
    assert _rows(table, "rl") == [["rl", "200", "0.45 [0.4, 0.5]", "+0.030 (p=0.410, not significant)",
                                   "0.64 [0.59, 0.69]", "-0.020 (p=0.600, not significant)"]]
    assert '<span class="pos">+0.120</span>' in table and '<span class="pos">+0.030</span>' not in table
    # per domain: each model's pass@1 with its interval, and both deltas
    assert _rows(head, "gcd") == [["gcd", "0.2 [0.15, 0.25]", "0.4 [0.35, 0.45]", "0.5 [0.45, 0.55]",
                                   "+0.200 (p=0.001, significant)", "+0.100 (p=0.040, significant)"]]
    assert _rows(head, "chain&lt;sum&gt;")[0][-1] == "-0.040 (p=0.450, not significant)"
    assert "<th>Δ sft − base</th><th>Δ rl − sft</th>" in head


def test_gates_failed_in_red_and_alert_counts(suite_html):
    head = _section(suite_html, "Headline")
    assert '<h3 class="neg">Gates: 2 of 3 failed</h3>' in head
    rows = re.findall(r"<tr>(<td><span class=\"(?:pass|fail)\">.*?)</tr>", head)
    assert len(rows) == 3
    assert rows[0].startswith('<td><span class="pass">passed</span></td><td>suite general</td><td>general/pass@1')
    assert rows[1].startswith('<td><span class="fail">FAILED</span></td><td>suite general</td><td>chain/pass@1</td>'
                              "<td>rl</td><td>sft</td><td>chain&lt;sum&gt;</td>")
    assert rows[2].startswith('<td><span class="fail">FAILED</span></td><td>rl (training, step 6)</td>'
                              "<td>mid/pass@1</td><td>step 6</td><td>step 0</td>")
    assert ".fail{color:#fff;background:#c00" in suite_html  # failed is drawn red
    assert "Alerts (1) — rl" in head and "<td>gate</td><td>1</td><td>6</td><td>6</td>" in head
    assert "<td>6</td><td>gate</td><td>gate mid/pass@1 failed: 0.380 at step 6</td>" in _section(suite_html, "Stages")


def test_curves_that_matter_only_those_logged(suite_html):
    curves = _section(suite_html, "Curves that matter")
    assert re.findall(r'alt="([^"]*)"', curves) == [
        "sft: loss", "rl: reward", "rl: training pass rate (rollouts)",
        "rl: held-out pass@1 per domain (in-loop, greedy, n not recorded)",  # the fixture's stages save no config
        "rl: suite general: pass@1 (in-loop, n not recorded)", "rl: KL", "rl: entropy", "rl: completion length",
        "rl: temperature"]
    # rl's constant loss, replay share and verifier rates are values, not flat lines
    assert _rows(curves, "replay/share_trajectories") == [["replay/share_trajectories", "0.25 (constant)", "13"]]
    assert [r[0] for r in re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)\(constant\)", curves)] == [
        "loss", "replay/share_trajectories", "verify/agreement/math~exact", "verify/disagreement/gcd"]


def test_dump_plots_every_key_folded(suite_html):
    dump = _section(suite_html, "All metrics")
    assert dump.index("<details><summary>") < dump.index("<img") and dump.rstrip().endswith("</details>\n</body></html>")
    alts = re.findall(r'alt="([^"]*)"', dump)
    assert {"sft: epoch", "rl: epoch", "rl: suite/general/pass@1", "rl: kl"} <= set(alts)
    assert len(alts) == len(set(alts)) == 2 + 9  # every group that varies, of every stage, nothing capped
    assert not {"rl: threads", "sft: train_examples", "rl: time", "rl: replay"} & set(alts)  # constants
    assert "threads, time/rollout, time/update, verify/agreement/math~exact" in dump
    assert "Not plotted" not in suite_html
    assert _rows(dump, "threads") == [["threads", "2", "2", "2", "13"]]


def test_eval_section_per_suite_with_extra_tables(suite_html):
    evals = _section(suite_html, "Evaluations")
    assert re.findall(r"<h3>(.*?)</h3>", evals) == [
        "Suite general: deltas between consecutive models", "Eval: general/base", "Eval: general/sft",
        "Eval: general/rl", "Long context: general/rl", "Safety: general/rl"]
    assert '<p class="fake">heatmap of &lt;needle&gt;</p>' in evals and '<p class="fake">refusal 0.9</p>' in evals
    assert _rows(evals, "base → sft")[0] == ["base → sft", "overall", "pass@1", "+0.120", "p=0.003", "yes",
                                             "paired_bootstrap", "200"]
    assert _rows(evals, "gcd")[-1] == ["gcd", "100", "0.5", "[0.45, 0.55]", "0.7", "[0.65, 0.75]", "30", "0"]
    assert "per_task" not in suite_html  # the paired-test data is not a table


def test_suite_with_an_unreadable_model_file(tmp_path):
    run = suite_run(tmp_path / "run")
    for stage in ("sft", "rl"):
        shutil.rmtree(run / stage)  # evals only: fast
    (run / "eval" / "general" / "sft.json").write_text("{torn")
    html = write_report(run).read_text()
    assert "Unreadable eval files named in compare.json: sft.json" in html
    table = re.search(r'<table class="headline">.*?</table>', html).group(0)
    assert _rows(table, "sft") == [["sft", "–", "–", "+0.120 (p=0.003, significant)", "–",
                                    "+0.110 (p&lt;0.001, significant)"]]
    assert "Eval: sft" not in html  # a torn file in a suite folder is not a loose eval either


def test_one_model_suite_takes_metrics_from_its_eval(tmp_path):
    suite = tmp_path / "eval" / "sampled"
    suite.mkdir(parents=True)
    (suite / "rl.json").write_text(json.dumps(eval_doc("rl")))
    (suite / "compare.json").write_text(json.dumps({"suite": "sampled", "models": [{"label": "rl", "file": "rl.json"}],
                                                    "deltas": [], "gates": []}))  # no "metrics" key
    html = write_report(tmp_path).read_text()
    table = re.search(r'<table class="headline">.*?</table>', html).group(0)
    assert _rows(table, "rl") == [["rl", "200", "0.45 [0.4, 0.5]", "–", "0.64 [0.59, 0.69]", "–"]]
    assert "Gates:" not in html and "compare.json lists no deltas." in html


def test_single_stage_plots_every_metric(tmp_path):
    run = tmp_path / "stage"
    with MetricsLogger(run, tensorboard=False) as log:
        for s in range(3):
            log.log(s, {f"m{i:02d}": float(i + s) for i in range(15)} | {"pass@1/a": 0.1 * s, "pass@1/b": 0.2})
    html = write_report(run).read_text()
    assert re.findall(r"<h3>Stage: (.*?)</h3>", html) == ["stage"]
    assert "<h2>Headline</h2>" in html and "Alerts (" not in html
    dump = re.findall(r'alt="stage: ([^"]*)"', html[html.index("<h2>All metrics</h2>"):])
    assert dump == ["pass@1"] + [f"m{i:02d}" for i in range(15)]  # pass@1/a heads the plots; /b is constant
    assert re.findall(r'alt="([^"]*)"', html)[0] == "stage: held-out pass@1 per domain (in-loop, greedy, n not recorded)"
    assert len(_rows(html, "m14")) == 1  # and in the summary table


def test_eval_only_dir_and_errors(tmp_path):
    _eval_json(tmp_path / "evals" / "one.json", {"a": 0.5}, "m")
    html = write_report(tmp_path / "evals").read_text()
    assert html.count(IMG) == 0 and _rows(html, "a") == [["a", "50", "0.5", "0.6", "20.5"]]
    assert re.findall(r"<h2>(.*?)</h2>", html) == ["Headline", "Evaluations"]
    with pytest.raises(PosttrainError, match=r"run directory .*nope does not exist"):
        write_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosttrainError, match=r"nothing to report in .*empty"):
        write_report(tmp_path / "empty")


def test_grouping_rules():
    keys = ["lr", "loss", "eval_loss", "reward/a", "reward/b", "time/rollout", "time/update", "zeta", "eval_acc",
            "loss_tokens", "pass@4/x", "suite/g/pass@1", "suite/g/pass@1/a", "suite/g/pass@1/b", "suite/g/pass@8"]
    assert group_metrics(keys) == [
        ("loss", ["loss", "eval_loss"]), ("pass@4", ["pass@4/x"]), ("reward", ["reward/a", "reward/b"]),
        ("eval_acc", ["eval_acc"]), ("lr", ["lr"]), ("time", ["time/rollout", "time/update"]),
        ("loss_tokens", ["loss_tokens"]),
        ("suite/g", ["suite/g/pass@8"]),  # a key that others extend heads its own group
        ("suite/g/pass@1", ["suite/g/pass@1", "suite/g/pass@1/a", "suite/g/pass@1/b"]), ("zeta", ["zeta"])]


def test_curve_groups_split_by_suite_and_metric():
    keys = ["suite/a/pass@1", "suite/a/pass@1/x", "suite/b/pass@8/x", "suite/b/pass@8", "kl", "mismatch/kl",
            "reward/x", "reward", "lr"]
    assert curve_groups(keys) == [
        ("reward", ["reward", "reward/x"]),
        ("suite a: pass@1 (in-loop, n not recorded)", ["suite/a/pass@1", "suite/a/pass@1/x"]),
        ("suite b: pass@8 (in-loop, n not recorded)", ["suite/b/pass@8", "suite/b/pass@8/x"]),
        ("KL", ["kl", "mismatch/kl"])]
    # with the stage's config the in-loop titles say which eval and how many tasks per domain
    config = {"tasks": [{"name": "x", "eval_tasks": 100}, {"name": "y", "eval_tasks": 100}, {"name": "off", "weight": 0}],
              "eval": {"suites": {"a": {"n": 200}, "b": {"tasks": "x"}}}}
    titles = [t for t, _ in curve_groups(keys + ["pass@1", "pass@1/x"], config)]
    assert titles == ["reward", "held-out pass@1 per domain (in-loop, greedy, n = 100 per domain)",
                      "suite a: pass@1 (in-loop, n = 200 per domain)", "suite b: pass@8 (in-loop, n = 50 per domain)",
                      "KL"]
    config["tasks"][1]["eval_tasks"] = 50
    assert curve_groups(["pass@1"], config)[0][0] == "held-out pass@1 per domain (in-loop, greedy, n per domain: x 100, y 50)"


def test_plot_helpers_make_pngs():
    png = line_plot({"a": ([0, 1, 2], [1.0, None, 3.0]), "b": ([0, 2], [float("inf"), 1e-6])}, title="t")
    bars = grouped_bar_plot(["x", "y"], {"g1": [0.1, None], "g2": [0.3, 0.4]}, title="t")
    assert png[:4] == bars[:4] == b"\x89PNG"


def test_cli_report(pipeline_run, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "posttrain.cli", "report", str(pipeline_run)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert (pipeline_run / "report.html").is_file()
    bad = subprocess.run([sys.executable, "-m", "posttrain.cli", "report", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "missing does not exist" in lines[0]


def test_thin_keeps_ends_and_bounds_points():

    xs = list(range(10_001))
    tx, ty = thin(xs, xs, max_points=2000)
    assert len(tx) <= 2001 and tx[0] == 0 and tx[-1] == 10_000 and tx == ty
    assert thin([1, 2], [3, 4]) == ([1, 2], [3, 4])
