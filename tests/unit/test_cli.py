"""The `posttrain` command as a user runs it: a subprocess, exit codes, one-line errors."""

import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.config.base import load_config
from posttrain.config.pipeline import PipelineConfig
from posttrain.core.errors import ConfigError
from posttrain.recipes.pipeline import eval_models, resolve, stage_outputs

ROOT = Path(__file__).resolve().parents[2]


def posttrain(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "posttrain.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["base"], ["sft"], ["eval"], ["report"], ["tasks"], ["tasks", "list"], ["sandbox"]],
)
def test_every_command_has_help(command):
    out = posttrain(*command, "--help")
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout


def test_bad_config_is_one_line_with_exit_code_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  epochs: [1\n")
    out = posttrain("sft", str(bad))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "malformed YAML" in lines[0] and "Traceback" not in out.stderr

    out = posttrain("sft", "train.epochz=3")
    assert out.returncode == 2
    assert "unknown key 'train.epochz'" in out.stderr and "Traceback" not in out.stderr


def test_every_shipped_config_loads():
    configs = sorted(p for p in (ROOT / "configs").glob("*.yaml") if p.name != "suites.yaml")
    assert configs, "no configs shipped"
    for path in configs:
        cfg = resolve(load_config(PipelineConfig, path))
        assert cfg.stages, path
    from posttrain.eval.sources import parse_items
    from posttrain.eval.compare_models import load_suites

    suites, gates = load_suites(ROOT / "configs" / "suites.yaml")
    assert "general" in suites and all(parse_items(s.tasks, s.n) for s in suites.values())
    assert {g.suite for g in gates} == {"general", "safety"} and all(g.suite in suites for g in gates)


def test_pipeline_chains_stage_outputs():
    base = ["run_dir=/r", "eval.suites.a.tasks=chain_sum"]
    cfg = resolve(load_config(PipelineConfig, None, base))
    assert cfg.base.out_dir == "/r/base"
    assert cfg.sft.model.path == "/r/base/model"
    assert eval_models(cfg, stage_outputs(cfg)) == [("base", "/r/base/model"), ("sft", "/r/sft/final")]
    assert cfg.sft.eval.suites["a"].tasks == "chain_sum"  # in-loop suites reach the trained stage
    named = resolve(load_config(PipelineConfig, None, [*base, "stages=[rl,eval]", "eval.models=[start,rl,/m]"]))
    assert eval_models(named, stage_outputs(named)) == [("start", "/r/sft/final"), ("rl", "/r/rl/final"), ("m", "/m")]
    explicit = resolve(load_config(PipelineConfig, None, [*base, "sft.model.path=/mine"]))
    assert explicit.sft.model.path == "/mine"
    with pytest.raises(ConfigError, match="eval.in_loop: suite 'nope'"):
        resolve(load_config(PipelineConfig, None, [*base, "eval.in_loop=[nope]"]))
    with pytest.raises(ConfigError, match="eval.suites.a.models: 'rl' is not among eval.models"):
        resolve(load_config(PipelineConfig, None, [*base, "eval.suites.a.models=[rl]"]))
    with pytest.raises(ConfigError, match="gates: suite 'b' is not defined"):
        load_config(PipelineConfig, None, [*base, "eval.gates=[{suite: b, max_drop: 0.1}]"])


def test_pipeline_task_options_reach_every_stage_that_does_not_set_its_own():
    cfg = resolve(
        load_config(
            PipelineConfig,
            None,
            ["task_options.chain_sum.max_terms=3", "eval.suites.a.tasks=chain_sum", "eval.suites.b.tasks=chain_sum",
             "eval.suites.b.task_options.chain_sum.max_terms=5"],
        )
    )
    assert cfg.sft.data.task_options == {"chain_sum": {"max_terms": 3}}
    assert cfg.eval.suites["a"].task_options == {"chain_sum": {"max_terms": 3}}
    assert cfg.eval.suites["b"].task_options == {"chain_sum": {"max_terms": 5}}
    assert cfg.sft.eval.suites["a"].task_options == {"chain_sum": {"max_terms": 3}}
