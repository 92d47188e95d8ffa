"""`posttrain tasks list`: what each name is, where it can be used, whether its data is here; a group
in a training mix is refused with its members named; a small question space gets a holdout that fits."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from posttrain.config.common import DomainConfig
from posttrain.core.errors import ConfigError
from posttrain.domains.bfcl import data as bfcl_data
from posttrain.domains.bfcl.fetch import FETCH_COMMAND
from posttrain.tasks.mixture import build_mixture
from posttrain.tasks.registry import catalogue


def test_list_json_names_kind_uses_and_availability():
    out = CliRunner().invoke(app, ["tasks", "list", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    by_name = {r["name"]: r for r in rows}
    assert len(by_name) == len(rows) >= 130
    for r in rows:
        assert r["kind"] in ("domain", "source", "group") and isinstance(r["available"], bool)
        assert set(r["uses"]) <= {"rl", "sft", "eval", "pref"} and r["uses"]
        assert ("fetch" in r) == (not r["available"])
    assert by_name["reasoning_gym"]["kind"] == "group" and "rl" not in by_name["reasoning_gym"]["uses"]
    assert "chain_sum" in by_name["reasoning_gym"]["members"]
    assert by_name["chain_sum"]["kind"] == "domain" and {"rl", "sft", "pref"} <= set(by_name["chain_sum"]["uses"])
    assert by_name["humaneval"]["kind"] == "source"
    assert by_name["redteam_jailbreak"]["uses"] == ["eval"]  # no verifiable task to train on
    assert by_name["sql"]["kind"] == "domain" and "rl" in by_name["sql"]["uses"]


def test_the_table_is_readable_and_names_missing_data(monkeypatch, tmp_path):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))  # no fetched copy ...
    real = importlib.util.find_spec
    monkeypatch.setattr(bfcl_data.importlib.util, "find_spec",  # ... and no installed wheel
                        lambda name, *a: None if name == "bfcl_eval" else real(name, *a))
    rows = {r["name"]: r for r in catalogue()}
    assert rows["bfcl_simple_python"]["available"] is False
    assert rows["bfcl_simple_python"]["fetch"] == FETCH_COMMAND
    assert rows["chain_sum"]["available"] is True
    out = CliRunner().invoke(app, ["tasks", "list"])
    assert out.exit_code == 0
    assert "Groups" in out.output and "Domains" in out.output and FETCH_COMMAND in out.output
    # a run naming the domain fails at config time, the fetch command in its one line
    with pytest.raises(ConfigError, match=FETCH_COMMAND):
        build_mixture([DomainConfig(name="bfcl_simple_python")], task_seed=0, seed=0)


@pytest.mark.parametrize("group, member", [("reasoning_gym", "chain_sum"), ("redteam", "redteam_jailbreak")])
def test_a_group_in_a_training_mix_is_refused_naming_members(group, member):
    with pytest.raises(ConfigError) as e:
        build_mixture([DomainConfig(name=group)], task_seed=0, seed=0)
    text = str(e.value)
    assert "\n" not in text and "is a group" in text and repr(group) in text
    assert member in text or "in all" in text


def test_a_small_question_space_gets_a_holdout_that_fits(caplog):
    with caplog.at_level(logging.WARNING, logger="posttrain"):
        mix = build_mixture([DomainConfig(name="coin_flip", eval_tasks=2)], task_seed=0, seed=0)
    source = mix.sources[0]
    assert 2 <= source.holdout < 1000
    assert any("holdout lowered" in r.getMessage() and "coin_flip" in r.getMessage() for r in caplog.records)
    assert len({t.reference["question"] for t in source.take(16)}) > 1
    # a holdout the user set is never overridden
    with pytest.raises(ConfigError, match="set a smaller holdout"):
        build_mixture([DomainConfig(name="coin_flip", eval_tasks=2, holdout=1000)], task_seed=0, seed=0)
