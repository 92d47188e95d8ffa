"""write_report: a fake pipeline run (real MetricsLogger output, eval JSONs) rendered to one self-contained page."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from posttrain.config import BaseConfig, PipelineConfig, SFTConfig, save_config
from posttrain.errors import PosttrainError
from posttrain.telemetry.metrics import MetricsLogger
from posttrain.telemetry.plots import grouped_bar_plot, line_plot
from posttrain.telemetry.report import group_metrics, write_report

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


def test_pipeline_report(pipeline_run):
    path = write_report(pipeline_run)
    assert path == pipeline_run.resolve() / "report.html"
    html = path.read_text()
    # self-contained: no external assets, no scripts (the config's <script> is escaped text)
    assert not re.search(r'(src|href)="(?!data:)', html) and "<script" not in html and "<link" not in html
    assert "data/&lt;script&gt;alert(1)&lt;/script&gt;.jsonl" in html
    assert "<title>posttrain report — quick&lt;run&gt;</title>" in html
    # stages in pipeline order, each with its resolved config
    assert re.findall(r"<h2>(.*?)</h2>", html) == [
        "Config: quick&lt;run&gt;", "Stage: base", "Stage: sft", "Evaluations"]
    assert html.count("<summary>Resolved config</summary>") == 3
    assert "row_tokens: 512" in html and "corpus_examples: 20000" in html
    # curves: base 3 + sft 4 + comparison bar chart 1
    assert html.count(IMG) == 8
    parser = _TagCounter()
    parser.feed(html)
    assert len(parser.imgs) == 8
    for src in parser.imgs:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for tag in ("table", "details", "div", "h2", "h3", "tr", "td"):
        assert parser.opened.get(tag) == parser.closed.get(tag), tag
    alts = re.findall(r'<img src="data:[^"]+" alt="([^"]*)"', html)
    assert alts == ["loss", "lr", "tokens_per_s", "loss", "reward", "lr", "grad_norm", "pass@1 by domain"]
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


def test_single_stage_and_many_metrics(tmp_path):
    run = tmp_path / "stage"
    with MetricsLogger(run, tensorboard=False) as log:
        for s in range(3):
            log.log(s, {f"m{i:02d}": float(i + s) for i in range(15)} | {"pass@1/a": 0.1, "pass@1/b": 0.2})
    html = write_report(run).read_text()
    assert re.findall(r"<h2>Stage: (.*?)</h2>", html) == ["stage"]
    assert html.count(IMG) == 12  # capped; pass@1/a and pass@1/b share one plot, ranked first
    assert re.findall(r'alt="([^"]*)"', html)[0] == "pass@1"
    assert "Not plotted (over 12 plots; see the table): m11, m12, m13, m14" in html
    assert len(_rows(html, "m14")) == 1  # still in the summary table


def test_eval_only_dir_and_errors(tmp_path):
    _eval_json(tmp_path / "evals" / "one.json", {"a": 0.5}, "m")
    html = write_report(tmp_path / "evals").read_text()
    assert html.count(IMG) == 0 and _rows(html, "a") == [["a", "50", "0.5", "0.6", "20.5"]]
    with pytest.raises(PosttrainError, match=r"run directory .*nope does not exist"):
        write_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosttrainError, match=r"nothing to report in .*empty"):
        write_report(tmp_path / "empty")


def test_grouping_rules():
    keys = ["lr", "loss", "eval_loss", "reward/a", "reward/b", "time/rollout", "time/update", "zeta", "eval_acc",
            "loss_tokens", "pass@4/x"]
    assert group_metrics(keys) == [
        ("loss", ["loss", "eval_loss"]), ("pass@4", ["pass@4/x"]), ("reward", ["reward/a", "reward/b"]),
        ("eval_acc", ["eval_acc"]), ("lr", ["lr"]), ("time", ["time/rollout", "time/update"]),
        ("loss_tokens", ["loss_tokens"]), ("zeta", ["zeta"])]


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
    from posttrain.telemetry.report import thin

    xs = list(range(10_001))
    tx, ty = thin(xs, xs, max_points=2000)
    assert len(tx) <= 2001 and tx[0] == 0 and tx[-1] == 10_000 and tx == ty
    assert thin([1, 2], [3, 4]) == ([1, 2], [3, 4])
