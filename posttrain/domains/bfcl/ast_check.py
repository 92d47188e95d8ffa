"""BFCL's AST check, our own code: are a turn's tool calls one of the possible answers?

    verdict = check_calls("parallel", functions, [("spotify_play", {"artist": "Taylor Swift"})], answer)
    verdict.valid, verdict.error, verdict.error_type      # True, "", ""  /  False, "one line", "value_error:string"
    # as a verifier: a Task of a bfcl_* source names ("bfcl_ast",); its reference holds category, functions, answer

The rules are those of BFCL v4's `ast_checker` for the Python categories (read, not imported), with
the same verdict and error type on every input (tests/unit/domains/bfcl/test_bfcl_ast.py proves it against the
reference, run in a subprocess):
- function name: the doc's name with "." -> "_" (BFCL's function-calling handlers rename tools so;
  reference["dots"] True keeps dots);
- every required parameter present; no parameter that is not in the doc or not in the possible answer;
  a possible-answer parameter missing from the call is wrong unless "" (optional) is among its values;
- types by exact Python type (a bool is no integer), an int accepted for a float (not inside a list),
  tuple as list, list items checked one level deep against each possible list; a value whose type is
  the possible answer's rather than the doc's is a "variable" and compared as is;
- values: strings (also inside lists and dicts) compared after BFCL's normalisation (drop spaces and
  ,./-_*^, lower case, ' -> "); dicts key by key against each possible dict; lists of dicts in order;
  anything else must be == one of the possible values;
- simple: exactly one call; multiple: one call, the right function among several; parallel (and
  parallel_multiple): as many calls as answers, each answer (in order) taking the first unmatched call
  that passes it (BFCL's greedy order-insensitive matching, kept as is);
- irrelevance: passed when no call was parsed (a call the parser could not read is no call, as in
  BFCL, where a failed decode counts as no call); relevance: passed when at least one call was parsed.

The verifier takes the calls from `traj.final_state["tool_calls"]` (the episode loop parsed the turn
with the run's parser) or else parses `traj.text` with verifier option `parser` (default "hermes").
A parse error is a wrong answer (score 0, error_type "ast_decoder:decoder_failed"), never a verifier
failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.options import verifier_options

Call = tuple[str, Mapping[str, Any]]  # (function name, arguments)
PY_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
            "dict": dict, "any": str}
_NORMALISE = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error: str = ""  # one line: why not
    error_type: str = ""  # BFCL's error type, e.g. "simple_function_checker:missing_required"
    is_variable: bool = False  # type checks only: the value has the possible answer's type, not the doc's


OK = Verdict(True)


def _bad(error_type: str, error: str) -> Verdict:
    return Verdict(False, error, error_type)


def normalise(text: str) -> str:
    """BFCL's string normalisation: "April 1, 2024" and "april 1 2024" compare equal."""
    return _NORMALISE.sub("", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    return normalise(value) if type(value) is str else value


def _answer_type(possible: Sequence[Any]) -> type | None:
    """The type of the first non-optional possible value (None: only "" is possible)."""
    return next((type(a) for a in possible if a != ""), None)


def check_type(param: str, value: Any, possible: Sequence[Any], expected: type, nested: type | None) -> Verdict:
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    nested_failed = False
    if type(value) == expected:
        if nested is None:
            return Verdict(True, is_variable=is_variable)
        for item in possible:  # a non-list possible value ("" = optional) accepts any items
            if type(item) != list or all(check_type(param, v, item, nested, None).valid for v in value):
                return Verdict(True, is_variable=is_variable)
        nested_failed = True
    if answer_type is not None and type(value) == answer_type:
        if nested_failed:
            return Verdict(False, f"nested type check failed for {param!r}: {value!r}", "type_error:nested", True)
        return Verdict(True, is_variable=True)
    return _bad("type_error:simple", f"incorrect type for {param!r}: expected {expected.__name__}, "
                f"got {type(value).__name__} ({value!r})")


def check_string(param: str, value: str, possible: Sequence[Any]) -> Verdict:
    if normalise(value) in [normalise(a) for a in possible if type(a) == str]:
        return OK
    return _bad("value_error:string", f"invalid value for {param!r}: {value!r}, expected one of {list(possible)!r}")


def check_list(param: str, value: list, possible: Sequence[Any]) -> Verdict:
    # each possible value is iterated as BFCL does: an optional "" becomes [], so [] passes it
    if [_norm(v) for v in value] in [[_norm(x) for x in answer] for answer in possible]:
        return OK
    return _bad("value_error:list/tuple", f"invalid value for {param!r}: {value!r}, expected one of {list(possible)!r}")


def check_dict(param: str, value: dict, possible: Sequence[Any]) -> Verdict:
    result = _bad("dict_checker:unclear", f"{param!r}: no possible dict to match")
    for answer in possible:
        if answer == "":
            continue
        result, matched = _bad("dict_checker:unclear", f"{param!r}: no match"), True
        for key, v in value.items():
            if key not in answer:
                result, matched = _bad("value_error:dict_key", f"{param!r}: unexpected dict key {key!r}"), False
                break
            if _norm(v) not in [_norm(x) for x in answer[key]]:
                result, matched = _bad("value_error:dict_value", f"{param!r}: invalid value {v!r} for key {key!r}, "
                                       f"expected one of {answer[key]!r}"), False
                break
        for key, values in answer.items():  # runs even after a mismatch above, as in BFCL (its error wins)
            if key not in value and "" not in values:
                result, matched = _bad("value_error:dict_key", f"{param!r}: missing dict key {key!r}"), False
                break
        if matched:
            return OK
    return result


def check_list_of_dicts(param: str, value: list, possible: Sequence[Any]) -> Verdict:
    result = _bad("list_dict_checker:unclear", f"{param!r}: no possible list to match")
    for answer in possible:
        if len(value) != len(answer):
            result = _bad("value_error:list_dict_count", f"{param!r}: wrong number of dicts in the list")
            continue
        for item, expected in zip(value, answer):
            result = check_dict(param, item, [expected])
            if not result.valid:
                break
        else:
            return OK
    return result


def check_value(param: str, value: Any, possible: Sequence[Any], doc: Mapping[str, Any]) -> Verdict:
    """One parameter's type and value against its doc and possible values."""
    type_name = doc["type"]
    expected = PY_TYPES[type_name]
    nested = PY_TYPES[doc["items"]["type"]] if type_name in ("array", "tuple") else None
    if type_name == "tuple" and type(value) == tuple:
        value = list(value)
    if type_name == "float" and type(value) == int:
        value = float(value)
    typed = check_type(param, value, possible, expected, nested)
    if not typed.valid:
        return typed
    if not typed.is_variable:
        if expected == dict:
            return check_dict(param, value, possible)
        if expected == list and nested == dict:
            return check_list_of_dicts(param, value, possible)
        if expected == str:
            return check_string(param, value, possible)
        if expected == list:
            return check_list(param, value, possible)
    if value not in possible:
        return _bad("value_error:others", f"invalid value for {param!r}: {value!r}, expected one of {list(possible)!r}")
    return OK


def check_one(doc: Mapping[str, Any], call: Call, answer: Mapping[str, Any], dots: bool = False) -> Verdict:
    """One call against one possible answer ({function name: {param: [possible values]}}) and its doc."""
    possible = next(iter(answer.values()))
    name = doc["name"] if dots else doc["name"].replace(".", "_")
    called, args = call
    if called != name:
        return _bad("simple_function_checker:wrong_func_name", f"expected a call of {name!r}, got {called!r}")
    props, required = doc["parameters"]["properties"], doc["parameters"]["required"]
    missing = next((p for p in required if p not in args), None)
    if missing is not None:
        return _bad("simple_function_checker:missing_required", f"{name}: missing required parameter {missing!r}")
    for param, value in args.items():
        if param not in props or param not in possible:
            return _bad("simple_function_checker:unexpected_param", f"{name}: unexpected parameter {param!r}")
        verdict = check_value(param, value, possible[param], props[param])
        if not verdict.valid:
            return verdict
    for param, values in possible.items():
        if param not in args and "" not in values:
            return _bad("simple_function_checker:missing_optional", f"{name}: parameter {param!r} is missing")
    return OK


def _doc(functions: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    doc = next((f for f in functions if f["name"] == name), None)
    if doc is None:  # the dataset's own inconsistency, not the model's
        raise ValueError(f"bfcl: the possible answer names {name!r}, which no function doc describes")
    return doc


def check_calls(category: str, functions: Sequence[Mapping[str, Any]], calls: Sequence[Call],
                answer: Sequence[Mapping[str, Any]] | None, dots: bool = False) -> Verdict:
    """BFCL's verdict on `calls` for one entry of `category` (its function docs and possible answer)."""
    if "irrelevance" in category:
        return OK if not calls else _bad("irrelevance_error:decoder_success",
                                         f"called {calls[0][0]!r}, but no function fits the question")
    if "relevance" in category:
        return OK if calls else _bad("relevance_error:decoder_failed", "no call, but a function fits the question")
    answer = list(answer or ())
    if "parallel" in category:
        if len(calls) != len(answer):
            return _bad("parallel_function_checker_no_order:wrong_count",
                        f"{len(calls)} calls, expected {len(answer)}")
        matched: set[int] = set()
        for i, expected in enumerate(answer):
            doc = _doc(functions, next(iter(expected)))
            verdict = None
            for index, call in enumerate(calls):
                if index in matched:
                    continue
                verdict = check_one(doc, call, expected, dots)
                if verdict.valid:
                    matched.add(index)
                    break
            if verdict is None or not verdict.valid:
                why = verdict.error if verdict is not None else "no call left"
                return _bad("parallel_function_checker_no_order:cannot_find_match",
                            f"no call matches expected call {i} ({next(iter(expected))}); last mismatch: {why}")
        return OK
    if "multiple" in category:
        if len(calls) != len(answer):
            return _bad("multiple_function_checker:wrong_count", f"{len(calls)} calls, expected {len(answer)}")
        return check_one(_doc(functions, next(iter(answer[0]))), calls[0], answer[0], dots)
    if len(calls) != 1:
        return _bad("simple_function_checker:wrong_count", f"{len(calls)} calls, expected 1")
    return check_one(functions[0], calls[0], answer[0], dots)


def calls_of(traj: Trajectory, parser: str) -> tuple[list[Call], list[str]]:
    """(calls, parse errors) of a trajectory: the episode loop's parse when it saved one, else `parser`'s."""
    state = traj.final_state
    if isinstance(state, dict) and "tool_calls" in state:
        calls = [(c["name"], c.get("arguments") or {}) for c in state["tool_calls"]]
        return calls, [str(e) for e in state.get("parse_errors") or ()]
    return parse_text(traj.text, parser)


def parse_text(text: str, parser: str) -> tuple[list[Call], list[str]]:
    from posttrain.envs.tools.parsers import get_parser

    action = get_parser(parser).parse(text)
    return [(c.name, dict(c.arguments)) for c in action.tool_calls], [e.message for e in action.errors]


def judge(reference: Mapping[str, Any], calls: list[Call], errors: list[str]) -> Verdict:
    """The verdict on a parsed turn: a parse error is a wrong answer (except where no call is right)."""
    category = reference["category"]
    if errors and "relevance" not in category:  # irrelevance and relevance read only "was a call parsed"
        return _bad("ast_decoder:decoder_failed", f"tool call not parsed: {errors[0]}")
    return check_calls(category, reference["functions"], calls, reference.get("answer"),
                       dots=bool(reference.get("dots", False)))


def bfcl_ast(task: Task, traj: Trajectory) -> Score | None:
    if not isinstance(task.reference, Mapping) or "category" not in task.reference:
        return None
    calls, errors = calls_of(traj, str(verifier_options(task, "bfcl_ast").get("parser", "hermes")))
    verdict = judge(task.reference, calls, errors)
    return Score(1.0 if verdict.valid else 0.0, "bfcl_ast",
                 {"error": verdict.error, "error_type": verdict.error_type})
