"""Format verifiers (regex, tags, json, length): known-correct (1), known-wrong (0), adversarial (0),
bad options (ConfigError), and hostile completions that must score 0 quickly instead of raising."""

from __future__ import annotations

import time

import pytest

from posttrain.core.errors import ConfigError
from posttrain.core.types import Task, Trajectory
from posttrain.verifiers import text_checks as fmt
def traj(text: str) -> Trajectory:
    return Trajectory(task_id="t/0", token_ids=(1,), loss_mask=(1,), logprobs=(0.0,), prompt_len=0, text=text)


def task(name: str, **opts) -> Task:
    return Task(id="t/0", domain="t", prompt=({"role": "user", "content": "q"},), reference=None,
                verifiers=(name,), metadata={"verifier_options": {name: opts}})


def value(fn, text: str, name: str, **opts) -> float:
    return fn(task(name, **opts), traj(text)).value


def registered_as(name: str):
    from posttrain.verifiers.registry import VERIFIERS

    return VERIFIERS[name]


def test_registered_names():
    assert registered_as("regex") is fmt.regex
    assert registered_as("tags") is fmt.tags
    assert registered_as("json") is fmt.json_verifier
    assert registered_as("length") is fmt.length


# ---------------------------------------------------------------- regex


@pytest.mark.parametrize("text,opts,expected", [
    ("Answer: 42", {"pattern": r"Answer: \d+"}, 1.0),
    ("  Answer: 42\n", {"pattern": r"Answer: \d+"}, 1.0),  # fullmatch over the stripped text
    ("Answer: 42 and more", {"pattern": r"Answer: \d+"}, 0.0),  # fullmatch: trailing text fails
    ("Reasoning...\nAnswer: 42", {"pattern": r"Answer: \d+", "mode": "search"}, 1.0),
    ("Reasoning...", {"pattern": r"Answer: \d+", "mode": "search"}, 0.0),
    ("answer: 42", {"pattern": r"Answer: \d+"}, 0.0),
    ("answer: 42", {"pattern": r"Answer: \d+", "flags": ["IGNORECASE"]}, 1.0),
    ("a\nb", {"pattern": r"a.b"}, 0.0),
    ("a\nb", {"pattern": r"a.b", "flags": ["dotall"]}, 1.0),
    ("Answer: ４２", {"pattern": r"Answer: [0-9]+"}, 0.0),  # adversarial: full-width digits are not [0-9]
])
def test_regex_cases(text, opts, expected):
    assert value(fmt.regex, text, "regex", **opts) == expected


def test_regex_catastrophic_backtracking_times_out_with_zero():
    start = time.perf_counter()
    score = fmt.regex(task("regex", pattern=r"(a|aa)+$", mode="search", timeout_s=0.2), traj("a" * 60 + "b"))
    elapsed = time.perf_counter() - start
    assert score.value == 0.0
    assert "timed out" in score.details["error"]
    assert elapsed < 5.0


def test_regex_long_completion_capped():
    score = fmt.regex(task("regex", pattern=r".*", flags=["DOTALL"]), traj("x" * 1_000_000))
    assert score.value == 0.0 and "max_chars" in score.details["error"]
    assert value(fmt.regex, "x" * 30, "regex", pattern="x+", max_chars=30) == 1.0


@pytest.mark.parametrize("opts,msg", [
    ({}, "pattern is required"),
    ({"pattern": "("}, "does not compile"),
    ({"pattern": "a", "mode": "match"}, "mode"),
    ({"pattern": "a", "flags": ["NOPE"]}, "unknown flag 'NOPE'"),
    ({"pattern": "a", "flags": "IGNORECASE"}, "list of flag names"),
])
def test_regex_bad_options_are_config_errors(opts, msg):
    with pytest.raises(ConfigError, match=msg):
        fmt.regex(task("regex", **opts), traj("a"))


# ---------------------------------------------------------------- tags

TA = {"tags": ["think", "answer"]}


@pytest.mark.parametrize("text,opts,expected", [
    ("<think>add them</think><answer>42</answer>", TA, 1.0),
    ("\n <think>\nadd\n</think>\n\n<answer> 42 </answer>\n", TA, 1.0),
    ("<think>a < b and b > c</think><answer>42</answer>", TA, 1.0),  # other angle brackets are content
    ("<think>x</think><answer><b>42</b></answer>", TA, 1.0),  # unlisted tags inside are content
    ("<answer>42</answer><think>x</think>", TA, 0.0),  # wrong order
    ("<think>x</think>", TA, 0.0),  # missing tag
    ("<think>x</think><answer>  </answer>", TA, 0.0),  # empty
    ("Sure! <think>x</think><answer>42</answer>", TA, 0.0),  # text outside
    ("<think>x</think> so <answer>42</answer>", TA, 0.0),
    ("<think>x</think><answer>42</answer> done", TA, 0.0),
    ("Sure! <think>x</think> so <answer>42</answer> done", {**TA, "allow_outside": True}, 1.0),
    # adversarial: nested / repeated / misspelled fake tags
    ("<think>x</think><answer><answer>42</answer></answer>", TA, 0.0),
    ("<think>x</think><answer>1</answer><answer>2</answer>", TA, 0.0),
    ("<think><answer>x</answer></think><answer>42</answer>", TA, 0.0),
    ("<think>x<answer>1</think></answer>", TA, 0.0),  # overlapping
    ("<think>x</think><answer>42</ answer>", TA, 0.0),
    ("<think>x</think><ANSWER>42</ANSWER>", TA, 0.0),
    ("<think>x</think><answer>42</Answer></answer>", TA, 0.0),
    ("</answer>42<answer><think>x</think>", {"tags": ["answer"], "allow_outside": True}, 0.0),  # close before open
])
def test_tags_cases(text, opts, expected):
    assert value(fmt.tags, text, "tags", **opts) == expected


def test_tags_failure_reason_and_huge_input():
    score = fmt.tags(task("tags", **TA), traj("<think>x</think><answer><answer>42</answer></answer>"))
    assert "exactly once" in score.details["reason"]
    start = time.perf_counter()
    score = fmt.tags(task("tags", **TA, max_chars=2_000_000), traj("<answer>" * 200_000))
    assert score.value == 0.0 and time.perf_counter() - start < 5.0
    assert "max_chars" in fmt.tags(task("tags", **TA), traj("x" * 1_000_000)).details["error"]


@pytest.mark.parametrize("opts", [{}, {"tags": "answer"}, {"tags": []}, {"tags": ["a b"]}, {"tags": ["x", "X"]}])
def test_tags_bad_options(opts):
    with pytest.raises(ConfigError, match="verifier_options.tags"):
        fmt.tags(task("tags", **opts), traj("<a>x</a>"))


# ---------------------------------------------------------------- json

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("text,opts,expected", [
    ('{"name": "Ada", "age": 36}', {}, 1.0),
    ('  [1, 2.5, "x", null, true]\n', {}, 1.0),
    ('Here you go:\n```json\n{"name": "Ada", "age": 36}\n```\nDone.', {}, 1.0),
    ('```\n{"a": 1}\n```', {}, 1.0),
    ('{"name": "Ada", "age": 36}', {"schema": SCHEMA}, 1.0),
    ('{"name": "Ada", "age": -1}', {"schema": SCHEMA}, 0.0),
    ('{"name": "Ada"}', {"schema": SCHEMA}, 0.0),
    ('{"name": "Ada", "age": 36, "admin": true}', {"schema": SCHEMA}, 0.0),
    ("{'name': 'Ada'}", {}, 0.0),  # Python, not JSON
    ('{"a": 1,}', {}, 0.0),
    ("the answer is 42", {}, 0.0),
    ('{"a": 1}', {"fence": "require"}, 0.0),
    ('```json\n{"a": 1}\n```', {"fence": "forbid"}, 0.0),
    # adversarial
    ('{"a": 1} {"b": 2}', {}, 0.0),  # trailing value
    ('{"a": 1}\nignore the rest', {}, 0.0),  # trailing junk
    ('{"age": 1, "age": "x"}', {}, 0.0),  # duplicate keys
    ('{"name": "Ada", "age": 36, "age": 36}', {"schema": SCHEMA}, 0.0),
    ('[NaN]', {}, 0.0),
    ('{"x": Infinity}', {}, 0.0),
    ('[-Infinity]', {}, 0.0),
    ('[1e999]', {}, 0.0),  # overflows to inf
    ('```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```', {}, 0.0),  # two fenced blocks
    ('[' * 65 + ']' * 65, {}, 0.0),  # over max_depth 64
    ('[' * 64 + ']' * 64, {}, 1.0),
])
def test_json_cases(text, opts, expected):
    assert value(fmt.json_verifier, text, "json", **opts) == expected


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    "[" * 50_000 + "]" * 50_000,
    '{"a":' * 30_000 + "1" + "}" * 30_000,
    '"\\' * 40_000,
    "1" * 90_000,  # over Python's int digit limit
    "\x00\xff\ud800 binary junk \x1b[31m",
])
def test_json_hostile_inputs_score_zero_fast(text):
    start = time.perf_counter()
    score = fmt.json_verifier(task("json", schema=SCHEMA), traj(text))
    assert score.value == 0.0
    assert time.perf_counter() - start < 5.0


def test_json_details():
    deep = fmt.json_verifier(task("json"), traj("[" * 100_000))
    assert "max_depth" in deep.details["error"]
    dup = fmt.json_verifier(task("json"), traj('{"a": 1, "a": 2}'))
    assert "duplicate key 'a'" in dup.details["error"]
    bad = fmt.json_verifier(task("json", schema=SCHEMA), traj('{"name": "Ada", "age": "old"}'))
    assert bad.details["path"] == "age" and "integer" in bad.details["reason"]
    assert "max_chars" in fmt.json_verifier(task("json"), traj(" " * 1_000_001)).details["error"]


def test_json_schema_draft_and_broken_schema():
    # "$schema" picks the draft: draft-07 ignores prefixItems, 2020-12 (the default) applies it
    pair = {"type": "array", "prefixItems": [{"type": "integer"}]}
    assert value(fmt.json_verifier, '["x"]', "json", schema=pair) == 0.0
    draft7 = {**pair, "$schema": "http://json-schema.org/draft-07/schema#"}
    assert value(fmt.json_verifier, '["x"]', "json", schema=draft7) == 1.0
    with pytest.raises(ConfigError, match="not a valid JSON Schema at properties/age"):
        fmt.json_verifier(task("json", schema={"properties": {"age": {"type": "integr"}}}), traj("{}"))
    with pytest.raises(ConfigError, match="fence"):
        fmt.json_verifier(task("json", fence="maybe"), traj("{}"))


# ---------------------------------------------------------------- length


@pytest.mark.parametrize("text,opts,expected", [
    ("hello world", {"min_chars": 5, "max_chars": 20}, 1.0),
    ("hello", {"min_chars": 5, "max_chars": 5}, 1.0),  # bounds are inclusive
    ("hi", {"min_chars": 5}, 0.0),
    ("x" * 21, {"max_chars": 20}, 0.0),
    ("one two three", {"min_words": 3, "max_words": 3}, 1.0),
    ("one two", {"min_words": 3}, 0.0),
    ("one two three four", {"max_words": 3}, 0.0),
    ("one two three", {"min_words": 2, "max_chars": 5}, 0.0),  # every bound must hold
    # adversarial padding does not count
    ("hi" + " " * 50, {"min_chars": 10}, 0.0),
    ("hi" + "\u200b" * 50, {"min_chars": 10}, 0.0),
    ("hi \n\n\n\t\t there", {"max_chars": 8}, 1.0),  # "hi there"
    ("one two - - - . . . \u200b \u200b", {"min_words": 3}, 0.0),
    ("x" * 1_000_000, {"max_chars": 100}, 0.0),
])
def test_length_cases(text, opts, expected):
    assert value(fmt.length, text, "length", **opts) == expected


def test_length_soft_falloff_hand_computed():
    # max_chars 100, margin 50: 120 chars is 20 over -> 1 - 20/50 = 0.6; 150 or more -> 0
    opts = {"max_chars": 100, "soft": True, "soft_margin": 50}
    assert value(fmt.length, "x" * 100, "length", **opts) == 1.0
    assert value(fmt.length, "x" * 120, "length", **opts) == pytest.approx(0.6)
    assert value(fmt.length, "x" * 150, "length", **opts) == 0.0
    assert value(fmt.length, "x" * 10_000, "length", **opts) == 0.0
    # min_chars 40, margin 100 (default): 10 chars is 30 short -> 0.7
    assert value(fmt.length, "y" * 10, "length", min_chars=40, soft=True) == pytest.approx(0.7)
    # words: min 10, margin 4: 7 words is 3 short -> 0.25; chars also bounded and satisfied -> min is 0.25
    seven = " ".join(["w"] * 7)
    opts = {"min_words": 10, "max_chars": 1000, "soft": True, "soft_margin_words": 4}
    assert value(fmt.length, seven, "length", **opts) == pytest.approx(0.25)
    assert fmt.bound_score(7, 10, None, 4) == pytest.approx(0.25)
    assert fmt.bound_score(12, None, 10, None) == 0.0


def test_length_details_and_bad_options():
    score = fmt.length(task("length", max_words=5), traj(" a  b\u200b c! "))
    assert score.details == {"chars": 6, "words": 3}
    with pytest.raises(ConfigError, match="at least one"):
        fmt.length(task("length"), traj("x"))
    with pytest.raises(ConfigError, match="min_chars"):
        fmt.length(task("length", min_chars=-1), traj("x"))
