"""MetricsLogger: JSONL contents, NaN/inf -> null, flush per call, TensorBoard, resume truncation, wandb fallback."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch

from posttrain.core.errors import PosttrainError
from posttrain.telemetry.metrics import MetricsLogger, read_metrics, truncate_metrics


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _tb_scalars(tb_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_jsonl_values_are_finite_json_and_flushed(tmp_path):
    log = MetricsLogger(tmp_path, tensorboard=False)
    log.log(0, {"loss": torch.tensor(2.5), "lr": np.float32(0.25), "tokens": np.int64(7), "n": 3,
                "nan": float("nan"), "inf": torch.tensor(float("inf")), "ninf": -math.inf, "ok": True,
                "note": "x", "none": None})
    # flushed before close: another reader sees the line now
    (rec,) = _lines(tmp_path)
    assert rec["step"] == 0 and isinstance(rec["time"], float)
    assert {k: v for k, v in rec.items() if k not in ("step", "time")} == {
        "loss": 2.5, "lr": 0.25, "tokens": 7, "n": 3, "nan": None, "inf": None, "ninf": None, "ok": True,
        "note": "x", "none": None}
    assert "NaN" not in (tmp_path / "metrics.jsonl").read_text() and "Infinity" not in (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(PosttrainError, match="metric 'v' at step 1: not a single number"):
        log.log(1, {"v": torch.zeros(2)})
    with pytest.raises(PosttrainError, match="metric 'v' at step 1: list is not a number"):
        log.log(1, {"v": [1]})
    with pytest.raises(PosttrainError, match="metric name 'step' is reserved"):
        log.log(1, {"step": 1})
    log.close()
    log.close()  # idempotent
    with pytest.raises(PosttrainError, match="is closed"):
        log.log(2, {"loss": 1.0})
    assert len(_lines(tmp_path)) == 1  # rejected calls wrote nothing


def test_tensorboard_scalars(tmp_path):
    with MetricsLogger(tmp_path) as log:
        for step in range(3):
            log.log(step, {"loss": 1.0 / (step + 1), "reward/arith": 0.5, "bad": float("nan"), "s": "text"})
    assert _tb_scalars(tmp_path / "tb", "loss") == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert _tb_scalars(tmp_path / "tb", "reward/arith") == [(0, 0.5), (1, 0.5), (2, 0.5)]


def test_resume_truncates_to_the_checkpoint_step(tmp_path):
    def values(start, stop, scale):
        return [(s, {"loss": scale * s}) for s in range(start, stop)]

    straight = tmp_path / "straight"
    with MetricsLogger(straight) as log:
        for s, m in values(0, 8, 1.0):
            log.log(s, m)
    resumed = tmp_path / "resumed"
    with MetricsLogger(resumed) as log:
        for s, m in values(0, 6, 1.0):  # crashed after step 5; the last checkpoint was step 3
            log.log(s, m)
    with open(resumed / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "loss"')  # torn line from the crash
    with MetricsLogger(resumed, resume_from_step=3) as log:
        for s, m in values(4, 8, 1.0):
            log.log(s, m)

    def strip(recs):
        return [{k: v for k, v in r.items() if k != "time"} for r in recs]

    assert strip(_lines(resumed)) == strip(_lines(straight))
    # TensorBoard drops the purged steps too
    assert _tb_scalars(resumed / "tb", "loss") == _tb_scalars(straight / "tb", "loss")
    assert not list(resumed.glob("*.tmp*"))


def test_appending_after_a_torn_line_keeps_new_records_readable(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 1}\n{"step": 1, "lo')
    with MetricsLogger(tmp_path, tensorboard=False) as log:
        log.log(2, {"loss": 3})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 2]
    assert truncate_metrics(tmp_path / "metrics.jsonl", 1) == 1
    assert truncate_metrics(tmp_path / "missing.jsonl", 1) == 0


def test_wandb_missing_is_a_one_line_warning(tmp_path, caplog, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *a, **k):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with caplog.at_level(logging.WARNING, logger="posttrain"):
        with MetricsLogger(tmp_path, tensorboard=False, wandb=True, config={"a": 1}) as log:
            log.log(0, {"loss": 1.0})
    msgs = [r.getMessage() for r in caplog.records if r.name == "posttrain"]
    assert len(msgs) == 1 and "wandb is enabled but not installed" in msgs[0] and "\n" not in msgs[0]
    assert len(_lines(tmp_path)) == 1


def test_wandb_used_when_installed(tmp_path, monkeypatch):
    import sys
    import types

    calls = []
    run = types.SimpleNamespace(log=lambda m, step: calls.append(("log", step, m)),
                                finish=lambda: calls.append(("finish",)))
    fake = types.SimpleNamespace(init=lambda **k: calls.append(("init", k)) or run,
                                 util=types.SimpleNamespace(generate_id=lambda: "abc123"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with MetricsLogger(tmp_path, tensorboard=False, wandb=True, wandb_project="p", config={"a": 1}) as log:
        log.log(4, {"loss": 1.5, "nan": float("nan"), "s": "x"})
    assert calls[0][0] == "init" and calls[0][1]["project"] == "p" and calls[0][1]["id"] == "abc123"
    assert calls[1] == ("log", 4, {"loss": 1.5}) and calls[2] == ("finish",)
    assert (tmp_path / "wandb_id.txt").read_text() == "abc123"  # reused on resume
