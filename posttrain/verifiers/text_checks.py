"""Format and structure verifiers: `regex`, `tags`, `json`, `length`.

None of them needs a reference: each checks the completion's shape against its options,
`task.metadata["verifier_options"][name]` (see `registry.verifier_options`). Every one scores
1 or 0 (`length` may score in between with `soft`), never raises on a hostile completion (huge,
deeply nested, binary junk): such a completion scores 0 with `details["error"]`. An ordinary
format miss scores 0 with `details["reason"]`. Options that are wrong (a missing pattern, a
broken JSON Schema, an unknown flag) are the config's fault and raise `ConfigError`.

regex
    pattern (str, required)   the regular expression.
    mode ("fullmatch" | "search", default "fullmatch")   fullmatch runs over the stripped text.
    flags (list of str, default [])   names from IGNORECASE, DOTALL, MULTILINE, VERBOSE, ASCII, UNICODE.
    max_chars (int, default 20000)   longer completions score 0 without matching.
    timeout_s (float, default 0.5)   match time limit (the `regex` module's timeout; catastrophic
        backtracking scores 0 with details["error"]). Without the `regex` module (it ships with
        transformers) the stdlib `re` runs with the length cap only.

tags
    tags (list of str, required)   e.g. ["think", "answer"]: each appears exactly once as
        `<t>...</t>`, in this order, with non-blank content. Any other spelling of a listed tag
        (`<Answer>`, `< answer >`, `</ answer>`) counts as an occurrence, so a nested or extra fake
        tag fails.
    allow_outside (bool, default false)   allow non-whitespace text before, between and after the tags.
    max_chars (int, default 200000).

json
    schema (JSON Schema dict, optional)   validated with `jsonschema`; its "$schema" picks the
        draft, else Draft 2020-12.
    fence ("allow" | "require" | "forbid", default "allow")   whether the JSON may (must / must not)
        come as the content of a single ```json (or bare ```) fenced block; text outside one
        fenced block is allowed. Without a fence the whole stripped completion must parse.
    max_chars (int, default 100000); max_depth (int, default 64): deeper nesting scores 0.
    Rejected: duplicate object keys, NaN / Infinity (and numbers that overflow to them), trailing
    text after the value, more than one fenced block.

length
    min_chars, max_chars, min_words, max_words (int, optional; at least one).
    Characters are counted on the stripped text with whitespace runs collapsed to one space and
    invisible format characters (zero-width spaces, joiners, BOM: Unicode category Cf) removed;
    words are whitespace-separated tokens holding at least one letter or digit (so padding with
    punctuation or zero-width characters does not count).
    soft (bool, default false)   instead of 0 outside the bounds, fall off linearly:
        1 - distance / margin, floored at 0; distance in characters over soft_margin (default 100)
        for character bounds, in words over soft_margin_words (default 20) for word bounds; the
        lowest of the bounds' values is the score.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from functools import lru_cache
from typing import Any

from posttrain.core.errors import ConfigError
from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.options import verifier_options

try:  # the third-party module has a match timeout; it ships with transformers
    import regex as _re_engine

    _HAS_TIMEOUT = True
except ImportError:  # pragma: no cover - transformers depends on regex
    _re_engine = re
    _HAS_TIMEOUT = False

_FLAG_NAMES = ("IGNORECASE", "DOTALL", "MULTILINE", "VERBOSE", "ASCII", "UNICODE")


def _clip(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _int_option(opts: dict, key: str, default: int | None, verifier: str) -> int | None:
    value = opts.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"verifier_options.{verifier}.{key} must be a non-negative integer, got {value!r}")
    return value


def _too_long(text: str, limit: int, verifier: str) -> Score | None:
    if len(text) > limit:
        return Score(0.0, verifier, {"error": f"completion has {len(text)} characters, over max_chars {limit}"})
    return None


# ---------------------------------------------------------------- regex


@lru_cache(maxsize=256)
def _compile(pattern: str, flags: tuple[str, ...]):
    value = 0
    for name in flags:
        if name not in _FLAG_NAMES:
            raise ConfigError(f"verifier_options.regex.flags: unknown flag {name!r}; known: {', '.join(_FLAG_NAMES)}")
        value |= getattr(_re_engine, name)
    try:
        return _re_engine.compile(pattern, value)
    except Exception as e:  # regex.error / re.error
        raise ConfigError(f"verifier_options.regex.pattern {_clip(pattern, 80)!r} does not compile: {e}") from None


def regex(task: Task, traj: Trajectory) -> Score:
    opts = verifier_options(task, "regex")
    pattern = opts.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError("verifier_options.regex.pattern is required (a non-empty string)")
    mode = opts.get("mode", "fullmatch")
    if mode not in ("fullmatch", "search"):
        raise ConfigError(f"verifier_options.regex.mode must be 'fullmatch' or 'search', got {mode!r}")
    flags = opts.get("flags", [])
    if isinstance(flags, str) or not isinstance(flags, (list, tuple)):
        raise ConfigError(f"verifier_options.regex.flags must be a list of flag names, got {flags!r}")
    compiled = _compile(pattern, tuple(str(f).upper() for f in flags))
    limit = _int_option(opts, "max_chars", 20000, "regex")
    timeout = float(opts.get("timeout_s", 0.5))
    text = traj.text
    if (long := _too_long(text, limit, "regex")) is not None:
        return long
    subject = text.strip() if mode == "fullmatch" else text
    match_fn = compiled.fullmatch if mode == "fullmatch" else compiled.search
    try:
        found = match_fn(subject, timeout=timeout) if _HAS_TIMEOUT else match_fn(subject)
    except TimeoutError:
        return Score(0.0, "regex", {"error": f"match timed out after {timeout} s"})
    except Exception as e:  # e.g. RecursionError inside the engine
        return Score(0.0, "regex", {"error": _clip(f"{type(e).__name__}: {e}")})
    details: dict[str, Any] = {"mode": mode}
    if found is not None:
        details["match"] = _clip(found.group(0))
    return Score(float(found is not None), "regex", details)


# ---------------------------------------------------------------- tags


@lru_cache(maxsize=256)
def _tag_pattern(tag: str) -> re.Pattern:
    # any spelling of the tag: case, inner whitespace, a slash with spaces
    return re.compile(r"<\s*(/?)\s*" + re.escape(tag) + r"\s*>", re.IGNORECASE)


def tags(task: Task, traj: Trajectory) -> Score:
    opts = verifier_options(task, "tags")
    names = opts.get("tags")
    if (
        isinstance(names, str)
        or not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(t, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", t) for t in names)
    ):
        raise ConfigError(f"verifier_options.tags.tags must be a non-empty list of tag names, got {names!r}")
    if len(set(t.lower() for t in names)) != len(names):
        raise ConfigError(f"verifier_options.tags.tags lists a tag twice: {names!r}")
    allow_outside = bool(opts.get("allow_outside", False))
    limit = _int_option(opts, "max_chars", 200000, "tags")
    text = traj.text
    if (long := _too_long(text, limit, "tags")) is not None:
        return long

    def fail(reason: str) -> Score:
        return Score(0.0, "tags", {"reason": reason})

    spans = []  # (open_start, open_end, close_start, close_end) per tag, in the listed order
    for tag in names:
        opens, closes = [], []
        for m in _tag_pattern(tag).finditer(text):
            (closes if m.group(1) else opens).append(m)
        if len(opens) != 1 or len(closes) != 1:
            return fail(f"<{tag}> must appear exactly once, closed: {len(opens)} open, {len(closes)} close")
        o, c = opens[0], closes[0]
        if o.group(0) != f"<{tag}>" or c.group(0) != f"</{tag}>":
            return fail(f"<{tag}> is misspelled: {_clip(o.group(0), 40)!r} ... {_clip(c.group(0), 40)!r}")
        if c.start() < o.end():
            return fail(f"</{tag}> comes before <{tag}>")
        if not text[o.end() : c.start()].strip():
            return fail(f"<{tag}> is empty")
        spans.append((o.start(), o.end(), c.start(), c.end()))
    for i in range(1, len(spans)):
        if spans[i][0] < spans[i - 1][3]:
            return fail(f"<{names[i]}> must come after </{names[i - 1]}>")
    if not allow_outside:
        gaps = [text[: spans[0][0]], text[spans[-1][3] :]]
        gaps += [text[a[3] : b[0]] for a, b in zip(spans, spans[1:])]
        if any(g.strip() for g in gaps):
            return fail("text outside the tags")
    return Score(1.0, "tags", {})


# ---------------------------------------------------------------- json

_FENCE = re.compile(r"```[ \t]*(json)?[ \t]*\r?\n(.*?)\r?\n?[ \t]*```", re.DOTALL | re.IGNORECASE)
# a string token may run to the end unterminated, so no match start is ever retried (linear time)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


class _Reject(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Reject(f"duplicate key {_clip(key, 60)!r}")
        out[key] = value
    return out


def _no_constant(name: str):
    raise _Reject(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"number {_clip(text, 40)} overflows to infinity")
    return value


def _depth(text: str) -> int:
    """Maximum bracket nesting of `text`, brackets inside strings ignored (linear time)."""
    depth = deepest = 0
    for m in _JSON_TOKENS.finditer(text):
        tok = m.group(0)
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth -= 1
    return deepest


def parse_strict_json(text: str, max_depth: int = 64) -> Any:
    """`text` as one JSON value; raises ValueError on duplicate keys, NaN/Infinity, trailing
    text, or nesting deeper than `max_depth`."""
    if _depth(text) > max_depth:
        raise _Reject(f"nesting deeper than max_depth {max_depth}")
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite_float
        )
    except RecursionError:
        raise _Reject("nesting too deep to parse") from None


@lru_cache(maxsize=64)
def _validator(schema_text: str):
    import jsonschema

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        msg = f"verifier_options.json.schema is not a valid JSON Schema at {where}: {_clip(e.message)}"
        raise ConfigError(msg) from None
    return cls(schema)


def _json_payload(text: str, fence: str) -> tuple[str | None, str]:
    """(JSON text or None, how it was found or why not)."""
    blocks = _FENCE.findall(text)
    if len(blocks) > 1:
        return None, f"{len(blocks)} fenced blocks (expected one)"
    if blocks and fence != "forbid":
        return blocks[0][1], "fenced"
    if fence == "require":
        return None, "no fenced ```json block"
    return text.strip(), "whole"


def json_verifier(task: Task, traj: Trajectory) -> Score:
    opts = verifier_options(task, "json")
    fence = opts.get("fence", "allow")
    if fence not in ("allow", "require", "forbid"):
        raise ConfigError(f"verifier_options.json.fence must be 'allow', 'require' or 'forbid', got {fence!r}")
    schema = opts.get("schema")
    if schema is not None and not isinstance(schema, (dict, bool)):
        raise ConfigError(f"verifier_options.json.schema must be a JSON Schema object, got {type(schema).__name__}")
    validator = _validator(json.dumps(schema, sort_keys=True)) if schema is not None else None
    limit = _int_option(opts, "max_chars", 100000, "json")
    max_depth = _int_option(opts, "max_depth", 64, "json")
    text = traj.text
    if (long := _too_long(text, limit, "json")) is not None:
        return long
    payload, found = _json_payload(text, fence)
    if payload is None:
        return Score(0.0, "json", {"reason": found})
    try:
        value = parse_strict_json(payload, max_depth)
    except _Reject as e:
        return Score(0.0, "json", {"error": str(e), "source": found})
    except ValueError as e:  # JSONDecodeError, int digit limits
        return Score(0.0, "json", {"reason": f"not valid JSON: {_clip(str(e))}", "source": found})
    if validator is not None:
        try:
            error = next(iter(validator.iter_errors(value)), None)
        except RecursionError:
            return Score(0.0, "json", {"error": "schema validation recursed too deep", "source": found})
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            return Score(0.0, "json", {"reason": f"schema: {_clip(error.message)}", "path": where, "source": found})
    return Score(1.0, "json", {"source": found})


# ---------------------------------------------------------------- length


def visible_text(text: str) -> str:
    """`text` stripped, whitespace runs collapsed to one space, format characters (Cf) removed."""
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return " ".join(text.split())


def count_words(text: str) -> int:
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


def bound_score(value: int, low: int | None, high: int | None, margin: float | None) -> float:
    """1 inside [low, high]; outside, 0 (margin None) or 1 - distance / margin floored at 0."""
    distance = max((low - value) if low is not None else 0, (value - high) if high is not None else 0, 0)
    if distance == 0:
        return 1.0
    if margin is None:
        return 0.0
    return max(0.0, 1.0 - distance / margin)


def length(task: Task, traj: Trajectory) -> Score:
    opts = verifier_options(task, "length")
    bounds = {k: _int_option(opts, k, None, "length") for k in ("min_chars", "max_chars", "min_words", "max_words")}
    if all(v is None for v in bounds.values()):
        raise ConfigError("verifier_options.length needs at least one of min_chars, max_chars, min_words, max_words")
    soft = bool(opts.get("soft", False))
    margin_chars = float(opts.get("soft_margin", 100))
    margin_words = float(opts.get("soft_margin_words", 20))
    if soft and (margin_chars <= 0 or margin_words <= 0):
        raise ConfigError("verifier_options.length.soft_margin and soft_margin_words must be > 0")
    visible = visible_text(traj.text)
    n_chars, n_words = len(visible), count_words(visible)
    value = 1.0
    if bounds["min_chars"] is not None or bounds["max_chars"] is not None:
        m = margin_chars if soft else None
        value = min(value, bound_score(n_chars, bounds["min_chars"], bounds["max_chars"], m))
    if bounds["min_words"] is not None or bounds["max_words"] is not None:
        m = margin_words if soft else None
        value = min(value, bound_score(n_words, bounds["min_words"], bounds["max_words"], m))
    return Score(value, "length", {"chars": n_chars, "words": n_words})
