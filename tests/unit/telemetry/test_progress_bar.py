"""progress_bar: plain lines in logs, nothing when disabled, a rich bar with ETA and fields on a terminal."""

from __future__ import annotations

import io
import re

from posttrain.telemetry import progress
from posttrain.telemetry.progress import format_fields, format_seconds, progress_bar


def test_formatting_helpers():
    assert format_fields({"loss": 0.123456, "step": 3, "tag": "x"}) == "loss=0.1235 step=3 tag=x"
    assert format_seconds(0) == "0:00" and format_seconds(75.4) == "1:15" and format_seconds(3725) == "1:02:05"


def test_not_a_terminal_prints_a_line_every_ten_percent(capsys):
    with progress_bar(total=25, description="sft") as bar:
        for i in range(25):
            bar.update(1, loss=1.0 / (i + 1))
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and "\x1b" not in err  # no control characters in logs
    assert len(lines) == 10  # 10%, 20%, ... 100%
    assert lines[0].startswith("sft: 3/25 (12%) ") and "loss=0.3333" in lines[0] and " eta " in lines[0]
    assert lines[-1].startswith("sft: 25/25 (100%) ") and lines[-1].endswith("loss=0.04")
    assert bar.completed == 25 and bar.fields == {"loss": 0.04}


def test_end_line_when_stopped_early_and_zero_total(capsys):
    with progress_bar(total=100, description="eval") as bar:
        bar.update(5)
    with progress_bar(total=0, description="empty") as bar:
        bar.update(3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("eval: 5/100 (5%) ")
    assert lines[1].startswith("empty: 3/0 ")


def test_time_based_lines_for_long_runs(capsys, monkeypatch):
    monkeypatch.setattr(progress, "LINE_EVERY_SECONDS", 0.0)
    with progress_bar(total=1000, description="rl") as bar:
        for _ in range(3):
            bar.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["rl: 1/1000", "rl: 2/1000", "rl: 3/1000"]


def test_disabled_prints_nothing(capsys):
    with progress_bar(total=10, description="sft", enabled=False) as bar:
        for _ in range(10):
            bar.update(1, loss=0.5)
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""
    assert bar.completed == 10 and bar.eta_seconds() == 0


def test_terminal_draws_a_rich_bar(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    monkeypatch.setattr(progress.sys, "stderr", buf)
    with progress_bar(total=5, description="train") as bar:
        for i in range(5):
            bar.update(1, loss=0.5 / (i + 1))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert "train" in text and "5/5" in text and "loss=0.1" in text and "eta" in text
