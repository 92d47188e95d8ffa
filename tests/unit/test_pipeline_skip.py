"""A re-run pipeline skips a stage whose final model was trained with the same config from the
same input model, and re-runs it when either changed."""

from __future__ import annotations

import shutil

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
