"""check_call against OpenAI-style and BFCL schemas (each error kind and its one-line message, the
aliases, BFCL's own ground truths), tool_name, and the tools prompt (template_renders_tools,
tools_system_prompt, with_tools) on real chat templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.envs.env import ToolCall
from posttrain.envs.tools import (PARSERS, check_call, get_parser, template_renders_tools, tool_name,
                                  tools_system_prompt, with_tools)
from posttrain.core.errors import ConfigError

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"},
        "units": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer"},
        "scale": {"type": "number"},
        "hourly": {"type": "boolean"},
        "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "filter": {"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}}},
        "note": {"type": ["string", "null"]},
    }}}}
BFCL = {"name": "math.factorial", "parameters": {"type": "dict", "required": ["number"], "properties": {
    "number": {"type": "float"}, "pair": {"type": "tuple", "items": {"type": "integer"}},
    "anything": {"type": "any"}, "opts": {"type": "dict", "properties": {"fast": {"type": "boolean"}}},
    "mode": {"type": "string", "enum": ["a", "b"], "default": "N/A"},
    "tags": {"type": "array", "items": {"type": "string"}, "enum": ["x", "y"]}}}}
NOARGS = {"type": "function", "function": {"name": "now"}}
TOOLS = [WEATHER, BFCL, NOARGS]


def error(name: str, **arguments):
    return check_call(ToolCall(name, arguments), TOOLS)


def test_valid_calls():
    assert error("get_weather", city="Paris") is None
    assert error("get_weather", city="Paris", units="f", days=3, scale=2, hourly=False,
                 points=[[1, 2.5], []], filter={"kind": "rain"}, note=None) is None
    assert error("math.factorial", number=5, pair=[1, 2], anything={"x": [None]}, opts={"fast": True}) is None
    assert error("now") is None


def test_unknown_tool_names_the_tools():
    e = error("get_wether", city="Paris")
    assert (e.kind, e.message) == ("unknown_tool", "no tool named 'get_wether' (tools: get_weather, math.factorial, now)")
    assert check_call(ToolCall("x", {}), []).message == "no tool named 'x' (tools: none)"


@pytest.mark.parametrize("name,arguments,message", [
    ("get_weather", {}, "get_weather: missing required parameter 'city'"),
    ("get_weather", {"city": "P", "zip": 1},
     "get_weather: unexpected parameter 'zip' (parameters: city, units, days, scale, hourly, points, filter, note)"),
    ("get_weather", {"city": 7}, "get_weather: parameter 'city': expected string, got integer 7"),
    ("get_weather", {"city": "P", "days": True}, "get_weather: parameter 'days': expected integer, got boolean True"),
    ("get_weather", {"city": "P", "days": 2.0}, "get_weather: parameter 'days': expected integer, got number 2.0"),
    ("get_weather", {"city": "P", "scale": "2"}, "get_weather: parameter 'scale': expected number, got string '2'"),
    ("get_weather", {"city": "P", "scale": False}, "get_weather: parameter 'scale': expected number, got boolean False"),
    ("get_weather", {"city": "P", "hourly": 1}, "get_weather: parameter 'hourly': expected boolean, got integer 1"),
    ("get_weather", {"city": "P", "units": "k"}, "get_weather: parameter 'units': expected one of 'c', 'f', got 'k'"),
    ("get_weather", {"city": "P", "points": [[1], [2, "3"]]},
     "get_weather: parameter 'points[1][1]': expected number, got string '3'"),
    ("get_weather", {"city": "P", "points": {"a": 1}},
     "get_weather: parameter 'points': expected array, got object {'a': 1}"),
    ("get_weather", {"city": "P", "filter": {}}, "get_weather: missing required parameter 'filter.kind'"),
    ("get_weather", {"city": "P", "filter": {"kind": "x", "min": 1}},
     "get_weather: unexpected parameter 'filter.min' (parameters: kind)"),
    ("get_weather", {"city": "P", "note": 3}, "get_weather: parameter 'note': expected string or null, got integer 3"),
    ("get_weather", {"city": "x" * 100, "days": "y" * 100},
     "get_weather: parameter 'days': expected integer, got string 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy..."),
    ("math.factorial", {"number": True}, "math.factorial: parameter 'number': expected number, got boolean True"),
    ("math.factorial", {"number": 1, "pair": [1, "2"]},
     "math.factorial: parameter 'pair[1]': expected integer, got string '2'"),
    ("math.factorial", {"number": 1, "opts": {"fast": "yes"}},
     "math.factorial: parameter 'opts.fast': expected boolean, got string 'yes'"),
    ("math.factorial", {"number": 1, "mode": "c"}, "math.factorial: parameter 'mode': expected one of 'a', 'b', got 'c'"),
    ("math.factorial", {"number": 1, "tags": ["x", "z"]},
     "math.factorial: parameter 'tags[1]': expected one of 'x', 'y', got 'z'"),
    ("now", {"at": 1}, "now: unexpected parameter 'at' (parameters: none)"),
])
def test_bad_arguments_name_the_parameter(name, arguments, message):
    e = error(name, **arguments)
    assert (e.kind, e.message) == ("bad_arguments", message)


def test_bfcl_aliases_defaults_and_enum_on_arrays():
    assert error("math.factorial", number=2.5, pair=(1, 2)) is None  # float = number, tuple = array
    assert error("math.factorial", number=1, mode="N/A") is None  # the schema's own default: "not given"
    assert error("math.factorial", number=1, tags=["y", "x"]) is None
    java = {"name": "j", "parameters": {"type": "dict", "properties": {
        "m": {"type": "HashMap"}, "l": {"type": "ArrayList"}, "n": {"type": "long"}, "s": {"type": "String"}}}}
    assert check_call(ToolCall("j", {"m": {"k": 1}, "l": [1], "n": 3, "s": "x"}), [java]) is None
    assert check_call(ToolCall("j", {"n": 3.5}), [java]).message == "j: parameter 'n': expected integer, got number 3.5"


def test_additional_properties_free_form_and_any_of():
    open_tool = {"name": "o", "parameters": {"type": "object", "properties": {"a": {"type": "string"}},
                                             "additionalProperties": True}}
    assert check_call(ToolCall("o", {"a": "x", "b": 1}), [open_tool]) is None
    typed = {"name": "t", "parameters": {"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}}}
    assert check_call(ToolCall("t", {"x": 1}), [typed]) is None
    assert check_call(ToolCall("t", {"x": "1"}), [typed]).message == "t: parameter 'x': expected integer, got string '1'"
    free = {"name": "f", "parameters": {"type": "object", "properties": {"meta": {"type": "object"}}}}
    assert check_call(ToolCall("f", {"meta": {"any": {"key": 1}}}), [free]) is None
    union = {"name": "u", "parameters": {"type": "object", "properties": {
        "v": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]}}}}
    assert check_call(ToolCall("u", {"v": 3}), [union]) is None and check_call(ToolCall("u", {"v": [3]}), [union]) is None
    assert check_call(ToolCall("u", {"v": "3"}), [union]).message == "u: parameter 'v': matches none of its allowed forms"


def test_tool_name_and_broken_schemas():
    assert [tool_name(t) for t in TOOLS] == ["get_weather", "math.factorial", "now"]
    with pytest.raises(ConfigError, match="tool schema has no function name"):
        tool_name({"type": "function", "function": {"description": "x"}})
    bad = {"name": "b", "parameters": {"type": "object", "properties": {"x": {"type": "strnig"}}}}
    with pytest.raises(ConfigError, match="tool 'b': parameter 'x' has an unknown type 'strnig'"):
        check_call(ToolCall("b", {"x": "1"}), [bad])


def _bfcl_data():
    from posttrain.domains.bfcl.data import bfcl_dir, missing

    return None if missing() else bfcl_dir() / "data"


BFCL_DATA = _bfcl_data()  # `posttrain tasks fetch bfcl` (make setup runs it)
# ground truths that contradict their own schema in BFCL v4 (not a checker bug)
BFCL_WRONG = {"simple_python_96": "conditions[0].field holds a list for a string",
              "simple_python_307": "venue is a boolean for a string"}


def _pick(value):
    """One concrete call argument from BFCL's answer format ({param: [allowed values]}, "" = may be omitted)."""
    if isinstance(value, dict):
        return {k: _pick(next(o for o in v if o != "")) for k, v in value.items() if any(o != "" for o in v)}
    return value


@pytest.mark.skipif(BFCL_DATA is None, reason="BFCL data not fetched (posttrain tasks fetch bfcl)")
def test_bfcl_simple_python_ground_truths_pass_and_parse_back():
    questions = {}
    for line in (BFCL_DATA / "BFCL_v4_simple_python.json").read_text().splitlines():
        d = json.loads(line)
        questions[d["id"]] = d["function"]
    rejected = {}
    for line in (BFCL_DATA / "possible_answer/BFCL_v4_simple_python.json").read_text().splitlines():
        d = json.loads(line)
        (name, params), = d["ground_truth"][0].items()
        call = ToolCall(name, _pick(params), "call_0")
        if (e := check_call(call, questions[d["id"]])) is not None:
            rejected[d["id"]] = e.message
        for parser in map(get_parser, PARSERS):
            assert parser.parse(parser.format_calls([call])).tool_calls == (call,), (parser.name, d["id"])
    assert len(questions) == 400 and set(rejected) == set(BFCL_WRONG), rejected


# ---------------------------------------------------------------- the tools prompt


SMOLLM2 = Path(__file__).resolve().parents[3] / ".cache/posttrain/models/smollm2-135m-instruct"
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n"
    "Answer with <tool_call></tool_call> tags.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
REJECTS_TOOLS = "{% if tools %}{{ raise_exception('tools are not supported') }}{% endif %}{{ messages[0].content }}"


@pytest.fixture(scope="module")
def smollm2():
    if not (SMOLLM2 / "tokenizer.json").is_file():
        pytest.skip("SmolLM2 not converted (posttrain models get)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(SMOLLM2)


@pytest.fixture
def local_tok():
    from posttrain.train.tokenizer import build_tokenizer

    return build_tokenizer(["hello world, tools"] * 4, vocab_size=300)


def test_template_renders_tools(smollm2, local_tok):
    assert template_renders_tools(smollm2) is False  # SmolLM2's template ignores tools=
    local_tok.chat_template = HERMES_TEMPLATE
    assert template_renders_tools(local_tok) is True
    local_tok.chat_template = REJECTS_TOOLS
    assert template_renders_tools(local_tok) is False
    local_tok.chat_template = None
    assert template_renders_tools(local_tok) is False


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_tools_system_prompt_lists_the_schemas_and_a_format_the_parser_reads(name):
    parser = get_parser(name)
    text = tools_system_prompt(TOOLS, parser)
    listed = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == TOOLS
    example = text.split("exactly this format:\n")[1].split("\n\n")[0]
    assert parser.parse(example).tool_calls == (ToolCall("function_name", {"argument_name": "value"}, "call_0"),)
    several = text.split("written like this:\n")[1].split("\n\n")[0]
    assert [c.name for c in parser.parse(several).tool_calls] == ["function_name", "other_function"]


def test_with_tools_falls_back_to_the_system_prompt_on_smollm2(smollm2):
    parser = get_parser("hermes")
    user = [{"role": "user", "content": "Weather in Paris?"}]
    messages, kwargs = with_tools(user, TOOLS, parser, smollm2)
    assert kwargs == {} and user == [{"role": "user", "content": "Weather in Paris?"}]  # input untouched
    assert messages[0] == {"role": "system", "content": tools_system_prompt(TOOLS, parser)} and messages[1:] == user
    rendered = smollm2.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    assert '"name": "get_weather"' in rendered and "<tool_call>" in rendered and "named SmolLM" not in rendered

    system = [{"role": "system", "content": "Be brief."}, *user]
    merged, _ = with_tools(system, TOOLS, parser, smollm2)
    assert len(merged) == 2 and merged[0]["content"] == "Be brief.\n\n" + tools_system_prompt(TOOLS, parser)
    assert system[0]["content"] == "Be brief."


def test_with_tools_passes_tools_to_a_template_that_renders_them(local_tok):
    local_tok.chat_template = HERMES_TEMPLATE
    user = [{"role": "user", "content": "hi"}]
    messages, kwargs = with_tools(user, TOOLS, get_parser("hermes"), local_tok)
    assert messages == user and kwargs == {"tools": TOOLS}
    rendered = local_tok.apply_chat_template(messages, tokenize=False, **kwargs)
    assert '"name": "get_weather"' in rendered and "You can call the following tools" not in rendered
    assert with_tools(user, [], get_parser("hermes"), local_tok) == (user, {})
