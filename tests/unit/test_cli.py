"""The `posttrain` command as a user runs it: a subprocess, exit codes, one-line errors."""

import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.config import PipelineConfig, load_config
from posttrain.recipes.pipeline import resolve

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
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert configs, "no configs shipped"
    for path in configs:
        cfg = resolve(load_config(PipelineConfig, path))
        assert cfg.stages, path


def test_pipeline_chains_stage_outputs():
    cfg = resolve(load_config(PipelineConfig, None, ["run_dir=/r", "eval.a.model=sft", "eval.b.model=/m"]))
    assert cfg.base.out_dir == "/r/base"
    assert cfg.sft.model.path == "/r/base/model"
    assert cfg.eval["a"].model == "/r/sft/final" and cfg.eval["a"].out == "/r/eval/a.json"
    assert cfg.eval["b"].model == "/m"
    explicit = resolve(load_config(PipelineConfig, None, ["run_dir=/r", "sft.model.path=/mine", "eval.a.model=base"]))
    assert explicit.sft.model.path == "/mine"


def test_pipeline_task_options_reach_every_stage_that_does_not_set_its_own():
    cfg = resolve(
        load_config(
            PipelineConfig,
            None,
            ["task_options.chain_sum.max_terms=3", "eval.a.model=sft", "eval.b.model=sft",
             "eval.b.task_options.chain_sum.max_terms=5"],
        )
    )
    assert cfg.sft.data.task_options == {"chain_sum": {"max_terms": 3}}
    assert cfg.eval["a"].task_options == {"chain_sum": {"max_terms": 3}}
    assert cfg.eval["b"].task_options == {"chain_sum": {"max_terms": 5}}
