"""The config package's shape: one module per command over base/common, names checked against the
algos/ registries (no Literal copies), config as data (thresholds files are read by the mixture)."""

from pathlib import Path

import pytest

import posttrain.config as pkg
from posttrain.algos.advantages import ADVANTAGES
from posttrain.config.base import load_config, validate
from posttrain.config.pipeline import PipelineConfig
from posttrain.config.pref import DPOConfig, RMConfig
from posttrain.config.rl import RLConfig
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import ConfigError


def test_modules_stay_small():
    for path in Path(pkg.__file__).parent.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_pipeline_sections_are_the_commands_configs():
    fields = PipelineConfig.model_fields
    assert (fields["sft"].annotation, fields["rm"].annotation, fields["dpo"].annotation, fields["rl"].annotation) == (
        SFTConfig, RMConfig, DPOConfig, RLConfig)
    cfg = load_config(PipelineConfig, None, ["rm.center_coef=0.5", "dpo.algo.loss=ipo"])
    assert cfg.rm.center_coef == 0.5 and cfg.dpo.algo.loss == "ipo"


@pytest.mark.parametrize("key, value, message", [
    ("algo.advantage", "grpoo", "unknown advantage estimator 'grpoo'; known: grpo, dr_grpo, rloo, "),
    ("algo.policy_loss", "clip", "unknown policy loss 'clip'; known: ppo_clip"),
    ("algo.off_policy", "is", "unknown off-policy correction 'is'; known: tis, decoupled, "),
    ("algo.aggregation", "mean", "unknown loss aggregation 'mean'; known: token_mean, "),
    ("algo.kl_estimator", "k4", "unknown KL estimator 'k4'; known: k1, k2, k3"),
    ("rollout.temperature.schedule", "step", "unknown temperature schedule 'step'; known: "),
])
def test_registry_names_are_checked_with_one_line_listing_the_known(key, value, message):
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, None, [f"{key}={value}"])
    text = str(e.value)
    assert text.startswith(f"config: {key}: {message}") and "\n" not in text


def test_a_registered_estimator_needs_no_config_edit(monkeypatch):
    monkeypatch.setitem(ADVANTAGES, "my_estimator", ADVANTAGES["grpo"])
    assert load_config(RLConfig, None, ["algo.advantage=my_estimator"]).algo.advantage == "my_estimator"


def test_a_thresholds_file_is_data_until_the_mixture_reads_it(tmp_path):
    missing = str(tmp_path / "nope.json")  # not read when the config loads
    cfg = validate(RLConfig, {"tasks": [{"name": "chain_sum", "verifier_thresholds": missing}]})
    assert cfg.tasks[0].verifier_thresholds == missing
