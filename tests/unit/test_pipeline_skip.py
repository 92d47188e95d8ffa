"""A re-run pipeline skips a stage whose final model was trained with the same config from the
same input model, and re-runs it when either changed."""

from __future__ import annotations

import shutil

import pytest

from posttrain.config.base import save_config
from posttrain.config.sft import SFTConfig
from posttrain.recipes.pipeline import finished_with, mark_finished


def test_skip_only_when_config_and_input_model_match(tmp_path, tiny_model_dir):
    model = tmp_path / "in"
    shutil.copytree(tiny_model_dir, model)
    cfg = SFTConfig(out_dir=str(tmp_path / "sft"), model={"path": str(model)})
    save_config(cfg, cfg.out_dir)
    (tmp_path / "sft" / "final").mkdir()
    assert not finished_with(cfg.out_dir, cfg)  # never marked finished (e.g. killed mid-run)
    mark_finished(cfg.out_dir, cfg)
    assert finished_with(cfg.out_dir, cfg)
    changed = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"lr": 1e-2})})
    assert not finished_with(cfg.out_dir, changed)
    weights = next(model.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert not finished_with(cfg.out_dir, cfg)  # the input model is not the one it trained from


def test_a_failed_gate_still_writes_the_report_then_fails_the_pipeline(tmp_path, monkeypatch):
    from posttrain.config.pipeline import PipelineConfig
    from posttrain.core.errors import GateError
    from posttrain.recipes import pipeline

    ran = []
    EVAL = {"models": ["/nowhere/model"], "suites": {"general": {"tasks": ["gcd:4"]}}}

    def failing_eval(cfg, resume):
        ran.append("eval")
        raise GateError("gate failed: general/pass@1 max_drop 0.02")

    monkeypatch.setitem(pipeline.STAGES, "eval", failing_eval)
    monkeypatch.setitem(pipeline.STAGES, "report", lambda cfg, resume: ran.append("report"))
    with pytest.raises(GateError, match="general/pass@1"):
        pipeline.run(PipelineConfig(run_dir=str(tmp_path / "run"), stages=["eval", "report"], eval=EVAL))
    assert ran == ["eval", "report"]
    ran.clear()
    with pytest.raises(GateError):  # no report stage asked for: none written
        pipeline.run(PipelineConfig(run_dir=str(tmp_path / "run2"), stages=["eval"], eval=EVAL))
    assert ran == ["eval"]
