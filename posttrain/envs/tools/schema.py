"""Check a parsed tool call against the tools' OpenAI-style JSON schemas, before it runs.

    error = check_call(call, env.tools)   # None when valid, else ParseError("unknown_tool" | "bad_arguments", ...)
    if error: observation = error_observation(error.kind, error.message, call.name)

A tool is {"type": "function", "function": {"name", "description", "parameters"}} or the bare
inner dict (BFCL's form). `parameters` is a JSON Schema object; the checks are hand-written so
each failure is one short line naming the parameter (a path like `items[2].id`) and what was
expected, which is what the model sees as its error observation.

Decisions.
- Unexpected parameters are errors (as BFCL scores them) unless `additionalProperties` is true
  or a schema (then they are checked against it). An object schema without `properties` (a
  free-form dict) takes any keys; a tool without `parameters` takes none.
- Types: string, integer, number, boolean, array, object, null, or a list of them. An int is a
  number; a bool is neither an integer nor a number; 2.0 is not an integer (the tool would get a
  float). BFCL and Java/JS-style names are aliases: dict/HashMap = object, float/double = number,
  tuple/list/ArrayList = array, long/int = integer, str/char/String = string, any = anything.
- An optional parameter given its schema's own `default` is accepted as is (BFCL declares
  defaults such as null or "N/A" outside the type or enum: they mean "not given").
- An `enum` on an array (BFCL's live schemas) lists the allowed items.
- Checked: type, enum, required, properties, additionalProperties, array `items` (recursively)
  and anyOf/oneOf (some branch must hold). Other keywords (minimum, pattern, format, ...) are
  not checked: a tool that needs them reports its own failure (`tool_failed`).
- A schema that cannot be read (an unknown type name) is the environment's bug: ConfigError
  naming the tool and the parameter, never blamed on the model.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from posttrain.envs.env import ParseError, ToolCall
from posttrain.envs.tools.parsers import json_type
from posttrain.core.errors import ConfigError

_TYPES = {
    "string": "string", "str": "string", "char": "string",
    "integer": "integer", "int": "integer", "long": "integer",
    "number": "number", "float": "number", "double": "number",
    "boolean": "boolean", "bool": "boolean",
    "array": "array", "tuple": "array", "list": "array", "arraylist": "array",
    "object": "object", "dict": "object", "hashmap": "object",
    "null": "null", "any": "any", "": "any",
}


def tool_name(tool: Mapping) -> str:
    """The function name of a tool in either shape ({"type": "function", "function": {...}} or bare)."""
    spec = _spec(tool)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"tool schema has no function name: {str(dict(tool))[:80]}")
    return name


def _spec(tool: Mapping) -> Mapping:
    inner = tool.get("function") if isinstance(tool, Mapping) else None
    if isinstance(inner, Mapping):
        return inner
    if not isinstance(tool, Mapping):
        raise ConfigError(f"tool schema must be a mapping, got {type(tool).__name__}")
    return tool


def check_call(call: ToolCall, tools: Sequence[Mapping]) -> ParseError | None:
    """None when `call` names one of `tools` with arguments its schema accepts, else why not."""
    by_name = {tool_name(t): _spec(t) for t in tools}
    spec = by_name.get(call.name)
    if spec is None:
        known = ", ".join(by_name) or "none"
        return ParseError("unknown_tool", f"no tool named {call.name!r} (tools: {known})")
    params = spec.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, Mapping):
        raise ConfigError(f"tool {call.name!r}: parameters must be a JSON schema object")
    problem = _check(dict(call.arguments), params, "", call.name)
    if problem is None:
        return None
    return ParseError("bad_arguments", f"{call.name}: {problem}")


def _kinds(schema: Mapping, path: str, tool: str) -> list[str]:
    declared = schema.get("type", "any")
    names = declared if isinstance(declared, list) else [declared]
    kinds = []
    for name in names:
        kind = _TYPES.get(name.lower()) if isinstance(name, str) else None
        if kind is None:
            where = f"parameter {path!r}" if path else "parameters"
            raise ConfigError(f"tool {tool!r}: {where} has an unknown type {name!r} "
                              f"(known: {', '.join(sorted(set(_TYPES.values())))})")
        kinds.append(kind)
    return kinds


def _is(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, (list, tuple))
    return isinstance(value, Mapping)  # object


def _same(a: Any, b: Any) -> bool:
    """JSON equality: True is not 1, 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(value: Any, schema: Mapping, path: str, tool: str) -> str | None:
    """What is wrong with `value` under `schema` (one line), or None."""
    where = f"parameter {path!r}"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            branches = [_check(value, s, path, tool) for s in schema[key] if isinstance(s, Mapping)]
            if branches and all(b is not None for b in branches):
                return branches[0] if len(branches) == 1 else f"{where}: matches none of its allowed forms"
    kinds = _kinds(schema, path, tool)
    if not any(_is(value, k) for k in kinds):
        return f"{where}: expected {' or '.join(kinds)}, got {json_type(value)} {_show(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        if isinstance(value, (list, tuple)) and not any(isinstance(e, list) for e in enum):
            values, at = value, lambda i: f"{path}[{i}]"  # BFCL: an enum on an array holds its items
        else:
            values, at = [value], lambda i: path
        for i, v in enumerate(values):
            if not any(_same(v, e) for e in enum):
                return (f"parameter {at(i)!r}: expected one of {', '.join(_show(e) for e in enum[:8])}"
                        f"{', ...' if len(enum) > 8 else ''}, got {_show(v)}")
    if isinstance(value, Mapping):
        return _check_object(value, schema, path, tool)
    items = schema.get("items")
    if isinstance(value, (list, tuple)) and isinstance(items, Mapping):
        for i, item in enumerate(value):
            problem = _check(item, items, f"{path}[{i}]", tool)
            if problem:
                return problem
    return None


def _check_object(value: Mapping, schema: Mapping, path: str, tool: str) -> str | None:
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise ConfigError(f"tool {tool!r}: properties of {path or 'parameters'!r} must be a mapping")
    prefix = f"{path}." if path else ""
    required = schema.get("required") or ()
    for name in required:
        if name not in value:
            return f"missing required parameter {prefix + str(name)!r}"
    if "properties" not in schema and "additionalProperties" not in schema:
        return None  # a free-form object
    extra = schema.get("additionalProperties", False)
    for key, item in value.items():
        sub = props.get(key)
        if sub is None and isinstance(extra, Mapping):
            sub = extra
        if sub is None:
            if extra is True:
                continue
            allowed = ", ".join(props) or "none"
            return f"unexpected parameter {prefix + str(key)!r} (parameters: {allowed})"
        if not isinstance(sub, Mapping):
            raise ConfigError(f"tool {tool!r}: the schema of {prefix + str(key)!r} must be a mapping")
        if key not in required and "default" in sub and _same(item, sub["default"]):
            continue  # the tool's own default (BFCL's null or "N/A" for "not given")
        problem = _check(item, sub, prefix + str(key), tool)
        if problem:
            return problem
    return None
