"""Tool-call parsers: correct, wrong and adversarial turns for hermes, llama3_json and pythonic;
round trips through format_calls; the parser registry and the choice from a chat template."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from posttrain.envs.env import ToolCall
from posttrain.envs.tools import MAX_CALL_CHARS, MAX_CALLS, PARSERS, get_parser, pick_parser
from posttrain.core.errors import ConfigError

hermes, llama, pythonic = get_parser("hermes"), get_parser("llama3_json"), get_parser("pythonic")


def calls(action) -> list[tuple[str, dict]]:
    return [(c.name, dict(c.arguments)) for c in action.tool_calls]


def one_error(action) -> str:
    assert len(action.errors) == 1, action.errors
    assert action.errors[0].kind == "malformed"
    assert "\n" not in action.errors[0].message
    return action.errors[0].message


# ---------------------------------------------------------------- hermes


def test_hermes_parallel_calls_with_content_and_ids():
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call>\nDone.<|im_end|>')
    a = hermes.parse(text)
    assert calls(a) == [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1"]
    assert a.errors == ()
    assert a.content == "Let me check.\n\n\nDone."
    assert "<|im_end|>" not in a.text and a.text.startswith("Let me check.")


def test_hermes_unclosed_last_call_is_read_when_its_json_is_complete():
    a = hermes.parse('<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": {"x": 1}}')
    assert calls(a) == [("f", {}), ("g", {"x": 1})] and a.errors == ()
    b = hermes.parse('<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "argum')
    assert calls(b) == [("f", {})]
    assert one_error(b).startswith("unclosed <tool_call>: not valid JSON")
    assert b.errors[0].raw == '<tool_call>{"name": "g", "argum'


def test_hermes_arguments_as_a_json_string_and_missing_arguments():
    a = hermes.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}</tool_call>'
                     '<tool_call>{"name": "g"}</tool_call>')
    assert calls(a) == [("f", {"a": [1, 2]}), ("g", {})]
    bad = hermes.parse('<tool_call>{"name": "f", "arguments": "{a: 1"}</tool_call>')
    assert "arguments of 'f' is a string that is not valid JSON" in one_error(bad)
    not_obj = hermes.parse('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')
    assert "arguments of 'f' must be a JSON object, got array" in one_error(not_obj)


def test_hermes_braces_and_tags_inside_strings():
    args = {"code": "if (x) { return '}'; } // {\"name\": 1}", "nested": {"a": {"b": [{"c": "}]"}]}},
            "doc": "write <tool_call>{...}</tool_call> to call a tool"}
    a = hermes.parse(f'<tool_call>{json.dumps({"name": "run", "arguments": args})}</tool_call>')
    assert calls(a) == [("run", args)]


def test_hermes_ignores_calls_inside_think_blocks():
    a = hermes.parse('<think>maybe <tool_call>{"name": "no", "arguments": {}}</tool_call></think>'
                     'Answer: <tool_call>{"name": "yes", "arguments": {}}</tool_call>')
    assert calls(a) == [("yes", {})] and a.content == "Answer:"
    # the template opened <think>: a bare </think> closes a block that starts the turn
    b = hermes.parse('<tool_call>{"name": "no", "arguments": {}}</tool_call> hmm</think>\n\nfinal')
    assert calls(b) == [] and b.content == "final"
    # the model stopped while thinking: nothing after <think> counts
    c = hermes.parse('ok <think><tool_call>{"name": "no", "arguments": {}}</tool_call>')
    assert calls(c) == [] and c.errors == () and c.content == "ok"


@pytest.mark.parametrize("body,expected", [
    ("{bad json", "not valid JSON"),
    ('"f"', "expected a JSON object (or an array of such objects)"),
    ('[{"name": "f", "arguments": {}}] trailing', "not valid JSON"),
    ('{"arguments": {}}', 'no "name" string'),
    ('{"name": "", "arguments": {}}', 'no "name" string'),
    ("   ", "empty"),
    ('{"name": "f", "arguments": {}} trailing', "not valid JSON"),
])
def test_hermes_malformed_calls(body, expected):
    a = hermes.parse(f'<tool_call>{body}</tool_call><tool_call>{{"name": "ok", "arguments": {{}}}}</tool_call>')
    assert expected in one_error(a)
    assert a.errors[0].raw == f"<tool_call>{body}</tool_call>"
    assert calls(a) == [("ok", {})] and a.tool_calls[0].id == "call_0"


def test_hermes_array_of_calls_in_one_block():  # SmolLM2's trained form
    a = hermes.parse('Sure.\n<tool_call>[\n{"name": "f", "arguments": {"x": 1}},\n{"name": "g", "arguments": {}}\n]'
                     '</tool_call>\n<tool_call>{"name": "h", "arguments": {}}</tool_call><|im_end|>')
    assert calls(a) == [("f", {"x": 1}), ("g", {}), ("h", {})] and a.errors == ()
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1", "call_2"] and a.content == "Sure."
    empty = hermes.parse("<tool_call>[]</tool_call>")  # SmolLM2's "no call is needed"
    assert empty.tool_calls == () and empty.errors == () and empty.content == ""
    unclosed = hermes.parse('<tool_call>[{"name": "f", "parameters": {"y": "</tool_call>"}}]')
    assert calls(unclosed) == [("f", {"y": "</tool_call>"})] and unclosed.errors == ()


def test_hermes_bad_array_element_is_one_error_and_the_rest_are_read():
    block = '<tool_call>[{"name": "f", "arguments": {}}, 3, {"arguments": {}}, {"name": "g"}, [{"name": "h"}]]</tool_call>'
    a = hermes.parse(block + "<tool_call>{\"name\": \"k\", \"arguments\": {}}</tool_call>")
    assert calls(a) == [("f", {}), ("g", {}), ("k", {})]
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1", "call_2"]
    assert [e.message for e in a.errors] == [
        '<tool_call>: element 1 of the array: expected a JSON object with "name" and arguments, got integer',
        '<tool_call>: element 2 of the array: the call has no "name" string',
        '<tool_call>: element 4 of the array: expected a JSON object with "name" and arguments, got array']
    assert {e.raw for e in a.errors} == {block} and {e.kind for e in a.errors} == {"malformed"}
    bad = hermes.parse('<tool_call>[{"name": "f", "arguments": {}}, {"name": "g", "arguments": 5}]</tool_call>')
    assert calls(bad) == [("f", {})] and "arguments of 'g' must be a JSON object, got integer" in one_error(bad)


def test_hermes_array_elements_count_against_the_per_turn_bound():
    array = json.dumps([{"name": "f", "arguments": {"i": i}} for i in range(MAX_CALLS - 1)])
    a = hermes.parse(f'<tool_call>{{"name": "first", "arguments": {{}}}}</tool_call><tool_call>{array}</tool_call>')
    assert len(a.tool_calls) == MAX_CALLS and a.errors == ()
    over = hermes.parse(f"<tool_call>{array}</tool_call><tool_call>{array}</tool_call>")
    assert len(over.tool_calls) == MAX_CALLS and over.tool_calls[-1].arguments == {"i": 0}
    assert f"more than {MAX_CALLS} tool calls" in one_error(over)


def test_hermes_prose_without_calls_is_content():
    a = hermes.parse("The answer is 42.</s>")
    assert a.tool_calls == () and a.errors == () and a.content == "The answer is 42." == a.text


# ---------------------------------------------------------------- llama3_json


def test_llama3_json_tagged_and_untagged_calls():
    a = llama.parse('<|python_tag|>{"name": "f", "parameters": {"x": 1}}<|eom_id|>')
    assert calls(a) == [("f", {"x": 1})] and a.content == "" and a.text == '{"name": "f", "parameters": {"x": 1}}'
    b = llama.parse('{"name": "f", "arguments": {"x": 1}}<|eot_id|>')
    assert calls(b) == [("f", {"x": 1})] and b.errors == ()


def test_llama3_json_several_calls_by_semicolon_and_newline():
    text = '{"name": "a", "parameters": {"s": "x; y\\n{z}"}}; {"name": "b", "parameters": {}}\n{"name": "c", "parameters": {"n": [1]}}'
    a = llama.parse(text)
    assert calls(a) == [("a", {"s": "x; y\n{z}"}), ("b", {}), ("c", {"n": [1]})]
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1", "call_2"]


def test_llama3_json_pretty_printed_call_is_one_call():
    args = {"items": [{"name": "x", "qty": 1}, {"name": "y", "qty": 2}]}
    a = llama.parse(json.dumps({"name": "order", "parameters": args}, indent=2))
    assert calls(a) == [("order", args)] and a.errors == ()


def test_llama3_json_prose_is_content_not_an_error():
    for text in ["The capital of France is Paris.", '{"answer": 4}', 'Here: {"name": "f", "parameters": {}}']:
        a = llama.parse(text)
        assert a.tool_calls == () and a.errors == () and a.content == text


def test_llama3_json_content_before_the_tag_and_prose_after_the_calls():
    a = llama.parse('Let me look.<|python_tag|>{"name": "f", "parameters": {}}\nI called f.')
    assert calls(a) == [("f", {})] and a.content == "Let me look.I called f."


def test_llama3_json_malformed_call_keeps_the_good_ones():
    a = llama.parse('{"name": "f", "parameters": {"x": 1}\n{"name": "g", "parameters": {}}')
    assert "not valid JSON" in one_error(a) and calls(a) == [("g", {})]
    assert a.errors[0].raw == '{"name": "f", "parameters": {"x": 1}'
    b = llama.parse('<|python_tag|>brave_search.call(query="x")')
    assert "expected a JSON object" in one_error(b) and b.tool_calls == ()
    c = llama.parse('<|python_tag|>[{"name": "f", "parameters": {}}]')
    assert "expected a JSON object" in one_error(c) and "got array" in c.errors[0].message
    d = llama.parse('{"name": 3, "parameters": {}}')
    assert 'no "name" string' in one_error(d)


# ---------------------------------------------------------------- pythonic


def test_pythonic_literals_dotted_names_and_ids():
    a = pythonic.parse('[get_weather(city="Paris", days=-3, temp=-1.5, ok=True, none=None), '
                       'math.factorial(n=5), g(xs=[1, (2, 3)], d={"k": [1, {"z": False}]})]')
    assert calls(a) == [("get_weather", {"city": "Paris", "days": -3, "temp": -1.5, "ok": True, "none": None}),
                        ("math.factorial", {"n": 5}), ("g", {"xs": [1, [2, 3]], "d": {"k": [1, {"z": False}]}})]
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1", "call_2"] and a.errors == ()


def test_pythonic_unicode_wrappers_and_content():
    a = pythonic.parse('<|python_start|>[translate(text="Grüße, 世界 🌍", to="ja")]<|python_end|><|eot_id|>')
    assert calls(a) == [("translate", {"text": "Grüße, 世界 🌍", "to": "ja"})] and a.content == ""
    b = pythonic.parse("<|python_start|>f(x='é')<|python_end|>")  # a bare call inside the wrapper
    assert calls(b) == [("f", {"x": "é"})]
    c = pythonic.parse("I will look it up.\n[search(q='a [b] c')]\nThen answer.")
    assert calls(c) == [("search", {"q": "a [b] c"})] and c.content == "I will look it up.\n\nThen answer."


def test_pythonic_prose_is_content():
    for text in ["See [1] and [2] for details.", "Call f(x=1) if needed.", "[1, 2, 3]"]:
        a = pythonic.parse(text)
        assert a.tool_calls == () and a.errors == () and a.content == text


@pytest.mark.parametrize("call,expected", [
    ("f(1, y=2)", "f() has positional arguments"),
    ("f(x=g(1))", "argument 'x' of f() is not a literal value: a function call (g(1))"),
    ("f(x=y)", "argument 'x' of f() is not a literal value: the name 'y'"),
    ("f(x={1, 2})", "argument 'x' of f() is not a literal value"),
    ("f(x=1 + 2)", "argument 'x' of f() is not a literal value"),
    ("f(x={1: 'a'})", "a dict key that is not a string"),
    ("f(**kw)", "expands ** of something that is not a dict literal"),
    ("(lambda: 1)(x=1)", "the called function is not a (dotted) name"),
    ("'text'", "expected a function call"),
])
def test_pythonic_malformed_call_keeps_the_good_ones(call, expected):
    a = pythonic.parse(f"[ok(a=1), {call}, ok2(b='x')]")
    assert expected in one_error(a)
    assert a.errors[0].raw == call
    assert calls(a) == [("ok", {"a": 1}), ("ok2", {"b": "x"})]
    assert [c.id for c in a.tool_calls] == ["call_0", "call_1"]


def test_pythonic_unreadable_block():
    assert "was never closed" in one_error(pythonic.parse("[f(x=1"))
    assert "not a Python list of calls" in one_error(pythonic.parse("[f(x=)]"))
    assert "empty" in one_error(pythonic.parse("<|python_start|> <|python_end|>"))


# ---------------------------------------------------------------- bounded work on hostile input


HOSTILE = {
    "hermes": [
        "<tool_call>" + '{"name": "f", "arguments": {"a": "' + "x" * (MAX_CALL_CHARS + 10) + '"}}</tool_call>',
        "<tool_call>" + "[" * 50_000 + "]" * 50_000 + "</tool_call>",
        '<tool_call>{"name": "f", "arguments": ' + '{"a": ' * 20_000 + "1" + "}" * 20_001 + "</tool_call>",
        "<tool_call>{" * 200_000,
    ],
    "llama3_json": [
        '<|python_tag|>{"name": "f", "parameters": {"a": "' + "x" * 1_000_000,
        "<|python_tag|>" + "[" * 60_000,
        '<|python_tag|>' + '{"name":;\n' * 100_000,
    ],
    "pythonic": [
        "[f(x=" + "[" * 50_000 + "]" * 50_000 + ")]",
        "[f(x=" + "[" * 1_000 + "]" * 1_000 + ")]",
        "[f(x='" + "a" * (MAX_CALL_CHARS + 1) + "')]",
        "\n[f(" * 100_000,
    ],
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_malformed_not_a_crash_or_a_hang(name):
    parser = get_parser(name)
    for text in HOSTILE[name]:
        start = time.perf_counter()
        a = parser.parse(text)
        assert time.perf_counter() - start < 3, text[:40]
        assert a.tool_calls == () and a.errors and {e.kind for e in a.errors} == {"malformed"}
        assert all(len(e.raw) <= MAX_CALL_CHARS for e in a.errors)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_many_think_blocks_and_end_tokens_take_linear_time(name):
    parser = get_parser(name)
    for text, content in [("<think>x</think>" * 200_000 + "done", "done"), ("ok" + " <|im_end|>\n" * 200_000, "ok"),
                          ("<think>" * 200_000, "")]:
        start = time.perf_counter()
        a = parser.parse(text)
        assert time.perf_counter() - start < 3
        assert a.content == content and a.tool_calls == () and a.errors == ()


def test_too_long_call_is_named_as_such():
    text = '<tool_call>{"name": "f", "arguments": {"a": "' + "x" * MAX_CALL_CHARS + '"}}</tool_call>'
    assert f"longer than {MAX_CALL_CHARS} characters" in one_error(hermes.parse(text))


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_calls_beyond_the_per_turn_bound_are_one_error(name):
    parser = get_parser(name)
    many = [ToolCall("f", {"i": i}, f"call_{i}") for i in range(MAX_CALLS + 5)]
    a = parser.parse(parser.format_calls(many))
    assert a.tool_calls == tuple(many[:MAX_CALLS])
    assert f"more than {MAX_CALLS} tool calls" in one_error(a)


# ---------------------------------------------------------------- round trips and registry


ROUND_TRIP = [
    ToolCall("get_weather", {"city": "São Paulo", "days": 3, "units": None}, "call_0"),
    ToolCall("math.factorial", {"n": -5, "x": 2.5, "flag": False}, "call_1"),
    ToolCall("post", {"Content-Type": "json", "body": {"k": ["}", "{", "]", ")"], "q": "'\"\\"}}, "call_2"),
    ToolCall("noop", {}, "call_3"),
]


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("content", ["", "Let me call the tools."])
def test_round_trip(name, content):
    parser = get_parser(name)
    text = parser.format_calls(ROUND_TRIP, content)
    a = parser.parse(text)
    assert a.tool_calls == tuple(ROUND_TRIP) and a.errors == () and a.content == content
    single = parser.parse(parser.format_calls(ROUND_TRIP[:1]))
    assert single.tool_calls == tuple(ROUND_TRIP[:1])
    assert parser.format_calls([], content) == content


def test_get_parser_names_the_known_ones():
    assert {get_parser(n).name for n in PARSERS} == {"hermes", "llama3_json", "pythonic"}
    with pytest.raises(ConfigError, match="unknown tool-call parser 'mistral' .known: hermes, llama3_json, pythonic"):
        get_parser("mistral")


@pytest.mark.parametrize("template,expected", [
    ("{% if tools %}<tools>{{ tools | tojson }}</tools> ... <tool_call>{% endif %}", "hermes"),
    ("<|start_header_id|>ipython<|end_header_id|>{{ '<|python_tag|>' }}", "llama3_json"),
    ("{{ '<|python_start|>' }}{{ '<|python_end|>' }}<|python_tag|>", "pythonic"),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", "hermes"),
    (None, "hermes"),
    ({"default": "x", "tool_use": "<|python_tag|>"}, "llama3_json"),
])
def test_pick_parser_from_the_chat_template(template, expected):
    assert pick_parser(SimpleNamespace(chat_template=template)).name == expected
    assert pick_parser(SimpleNamespace(chat_template=template), "pythonic").name == "pythonic"
    with pytest.raises(ConfigError):
        pick_parser(SimpleNamespace(chat_template=template), "nope")
