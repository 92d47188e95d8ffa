"""The hermes parser on real SmolLM2-135M-Instruct completions (tests/unit/envs/data/smollm2_tool_calls.json,
recorded by scripts/record_parser_outputs.py, expectations checked by hand): the array form the model
was trained on and the one-object-per-tag form our prompt shows both parse to the expected calls.

llama3_json and pythonic have no local model of their families: their tests stay on written-out
turns (test_tool_parsers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.envs.tools import get_parser

FIXTURE = Path(__file__).parent / "data" / "smollm2_tool_calls.json"
DOC = json.loads(FIXTURE.read_text())
RECORDS = DOC["records"]


def test_the_fixture_is_hand_checked_and_covers_both_forms():
    assert DOC["parser"] == "hermes"  # pick_parser's choice for SmolLM2's chat template
    unchecked = [r["id"] for r in RECORDS if r["expected"] is None]
    assert not unchecked, f"re-recorded outputs need hand-checked expectations: {unchecked}"
    forms = {r["expected"]["form"] for r in RECORDS if r["expected"]["calls"]}
    assert {"array", "object"} <= forms, forms
    assert {r["temperature"] for r in RECORDS} == {0.0, 0.7}


@pytest.mark.parametrize("record", RECORDS, ids=[r["id"] for r in RECORDS])
def test_recorded_output_parses_to_the_expected_calls(record):
    action = get_parser(DOC["parser"]).parse(record["completion"])
    expected = record["expected"]
    assert [[c.name, dict(c.arguments)] for c in action.tool_calls] == expected["calls"]
    assert len(action.errors) == expected["errors"], action.errors
    assert [c.id for c in action.tool_calls] == [f"call_{i}" for i in range(len(expected["calls"]))]
