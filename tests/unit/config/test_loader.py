from pathlib import Path

import pytest

from posttrain.config.base import load_config, parse_overrides, save_config
from posttrain.config.eval import EvalConfig
from posttrain.config.pipeline import PipelineConfig
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import ConfigError


def test_overrides_build_a_nested_tree_with_yaml_scalars():
    tree = parse_overrides(["train.lr=1e-4", "model.path=/models/m", "train.packing=false", "a.b.c=3"])
    assert tree == {"train": {"lr": 1e-4, "packing": False}, "model": {"path": "/models/m"}, "a": {"b": {"c": 3}}}


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1", ".a=1"])
def test_malformed_override_names_itself(bad):
    with pytest.raises(ConfigError, match="override"):
        parse_overrides([bad])


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("out_dir: runs/x\ntrain:\n  max_steps: 7\noptim:\n  lr: 0.01\n")
    cfg = load_config(SFTConfig, path, ["optim.lr=1e-4", "model.path=/models/m"])
    assert cfg.out_dir == "runs/x"
    assert cfg.train.max_steps == 7
    assert cfg.optim.lr == pytest.approx(1e-4)
    assert cfg.model.path == "/models/m"


def test_unknown_key_is_named(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("train:\n  max_stepz: 7\n")
    with pytest.raises(ConfigError) as e:
        load_config(SFTConfig, path)
    assert "unknown key 'train.max_stepz'" in str(e.value)
    assert "\n" not in str(e.value)


def test_wrong_type_names_key_and_expectation():
    with pytest.raises(ConfigError) as e:
        load_config(SFTConfig, None, ["train.max_steps=abc"])
    msg = str(e.value)
    assert "train.max_steps" in msg and "integer" in msg and "'abc'" in msg


def test_range_checks():
    with pytest.raises(ConfigError, match="samples"):
        load_config(EvalConfig, None, ["samples=0"])
    with pytest.raises(ConfigError, match="row_tokens"):
        load_config(SFTConfig, None, ["train.row_tokens=9000", "train.max_tokens_per_microbatch=4096"])


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  lr: [1\n")
    with pytest.raises(ConfigError) as e:
        load_config(SFTConfig, path)
    assert str(path) in str(e.value) and "malformed YAML" in str(e.value) and "line" in str(e.value)


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(SFTConfig, tmp_path / "nope.yaml")
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(SFTConfig, path)


def test_saved_config_loads_back_identically(tmp_path):
    cfg = load_config(PipelineConfig, None, ["sft.train.max_steps=3", "run_dir=/tmp/r"])
    out = save_config(cfg, tmp_path)
    again = load_config(PipelineConfig, out)
    assert again == cfg


def test_shipped_real_model_recipe_loads_and_points_where_make_puts_the_model():
    import re

    from posttrain.recipes.pipeline import eval_models, resolve, stage_outputs

    root = Path(__file__).resolve().parents[3]
    cfg = resolve(load_config(PipelineConfig, str(root / "configs" / "smollm2-rl.yaml"), []))
    smol = re.search(r"^SMOL \?= (\S+)$", (root / "Makefile").read_text(), re.M).group(1)
    assert cfg.rl.model.path == smol and cfg.rl.model.lora is not None
    models = eval_models(cfg, stage_outputs(cfg))
    assert models == [("start", smol), ("rl", str(Path(cfg.rl.out_dir) / "final"))]
    # training and every eval draw the trained domains from the same distribution, judged alike
    assert all(d.options == cfg.task_options[d.name] and d.verifiers == ["numeric"] for d in cfg.rl.tasks)
    suites = cfg.eval.suites
    assert all(s.task_options == cfg.task_options and s.verifiers == ["numeric"] for s in suites.values())
    trained = {d.name for d in cfg.rl.tasks}
    assert {item.split(":")[0] for item in suites["trained"].tasks} == trained
    assert {item.split(":")[0] for item in suites["general"].tasks}.isdisjoint(trained)
    # the regression gate runs during RL (with a rollback target) and on the final comparison
    assert set(cfg.rl.eval.suites) == {"trained", "general"} and cfg.rl.eval.best_by == "trained"
    assert [(g.suite, g.on_fail) for g in cfg.rl.eval.gates] == [("general", "rollback")]