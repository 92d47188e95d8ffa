"""Tool-call parsers: one sampled assistant turn's text -> an `Action` (calls, parse errors, content).

    parser = pick_parser(tokenizer)             # "auto": from the chat template; or get_parser("hermes")
    action = parser.parse(turn_text)            # never raises on model text
    action.tool_calls, action.errors, action.content
    parser.format_calls(calls, content="")      # the inverse: parse(format_calls(c)).tool_calls == c

Three formats (PARSERS, picked by name):
- hermes (Qwen2.5/3, SmolLM2, NousHermes): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
  any number per turn; an unclosed last tag is read when its JSON is complete; "arguments" may
  be a JSON string holding the object. A block ends where its JSON ends when `</tool_call>`
  follows, so the tag inside a string argument does not cut the call. One block may also hold a
  JSON array of call objects, `<tool_call>[{...}, {...}]</tool_call>` (SmolLM2's trained form):
  each element is one call in order, an element that is not a call object is one error while
  the others are read, `[]` is no call, and each element counts against MAX_CALLS.
  `format_calls` writes the canonical one-object-per-tag form.
- llama3_json (Llama-3.1/3.2): optional `<|python_tag|>`, then `{"name": ..., "parameters": {...}}`
  objects separated by `;` or newlines. Prose that does not start like a call is plain content.
- pythonic (Llama-3.2/4 pythonic): `[f(x=1), pkg.g(y=[1, 2])]`, read with `ast`, literal keyword
  arguments only; optional `<|python_start|>` / `<|python_end|>` (its own module: pythonic.py).

Decisions. Input is decoded with special tokens kept; trailing end-of-turn tokens are tolerated.
`<think>...</think>` (Qwen3) is reasoning: calls inside it are ignored and it is not content; an
unclosed `<think>` runs to the end of the turn, and a `</think>` with no opener (the template
opened it) closes a block that starts the turn. Every call that cannot be read is one
`ParseError("malformed", one line, raw)`; the readable calls of the same turn are still
returned, with ids "call_0", "call_1", ... in order. Work is bounded: a call over
MAX_CALL_CHARS, or calls beyond MAX_CALLS in one turn, are malformed without being parsed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Protocol, Sequence

from posttrain.core.errors import ConfigError
from posttrain.envs.env import Action, ParseError, ToolCall
from posttrain.envs.tools.pythonic import PythonicParser
from posttrain.envs.tools.text import MAX_CALL_CHARS, MAX_CALLS, Turn, short, split_think, strip_end, without_thinking

class ToolParser(Protocol):
    name: str

    def parse(self, text: str) -> Action: ...

    def format_calls(self, calls: Sequence[ToolCall], content: str = "") -> str: ...


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type (for one-line messages)."""
    if value is None:
        return "null"
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "integer"), (float, "number"),
                       (Mapping, "object"), ((list, tuple), "array")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _json_call(obj: Any, arg_keys: tuple[str, ...], expected: str = "a JSON object") -> tuple[str, dict] | str:
    """(name, arguments) from a decoded JSON call object, or what is wrong with it."""
    if not isinstance(obj, dict):
        return f"expected {expected} with \"name\" and arguments, got {json_type(obj)}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return "the call has no \"name\" string"
    key = next((k for k in arg_keys if k in obj), None)
    args = obj.get(key, {}) if key else {}
    if isinstance(args, str):  # arguments as a JSON string holding JSON
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as e:
            return f"{key} of {name!r} is a string that is not valid JSON ({e})"
    if not isinstance(args, dict):
        return f"{key} of {name!r} must be a JSON object, got {json_type(args)}"
    return name.strip(), args


def _load_json(body: str) -> Any:
    """json.loads with the errors a parser reports; raises ValueError with one line."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# ---------------------------------------------------------------- hermes


ARG_KEYS = ("arguments", "parameters")  # hermes: where a call object keeps its arguments


class HermesParser:
    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def parse(self, text: str) -> Action:
        text = strip_end(text)
        turn = Turn()
        content = [self._read_piece(piece, turn) for thinking, piece in split_think(text) if not thinking]
        return turn.action(text, "".join(content))

    def _read_piece(self, text: str, turn: Turn) -> str:
        """Reads the calls in `text` into `turn`; returns the text outside them."""
        outside = []
        pos = 0
        close_at = text.find(self.CLOSE)
        while True:
            start = text.find(self.OPEN, pos)
            if start == -1:
                outside.append(text[pos:])
                return "".join(outside)
            outside.append(text[pos:start])
            if turn.full:
                return "".join(outside)
            body_start = start + len(self.OPEN)
            whole = self._whole_call(text, body_start)
            if whole is not None:  # the JSON's own end decides, so "</tool_call>" may sit in a string
                obj, pos = whole
                self._add(obj, "<tool_call>", text[start:pos], turn)
                continue
            if close_at != -1 and close_at < body_start:
                close_at = text.find(self.CLOSE, body_start)
            following = text.find(self.OPEN, body_start)
            closed = close_at != -1 and (following == -1 or close_at < following)
            body_end = close_at if closed else (following if following != -1 else len(text))
            pos = close_at + len(self.CLOSE) if closed else body_end
            self._read(text[body_start:body_end], text[start:pos], closed, turn)

    def _whole_call(self, text: str, at: int) -> tuple[Any, int] | None:
        """(decoded JSON, end) when a JSON value at `at` is followed by </tool_call> or the end."""
        while at < len(text) and text[at].isspace():
            at += 1
        try:
            obj, size = json.JSONDecoder().raw_decode(text[at:at + MAX_CALL_CHARS + 1])
        except (ValueError, RecursionError):
            return None
        end = at + size
        while end < len(text) and text[end].isspace():
            end += 1
        if size > MAX_CALL_CHARS or not (end == len(text) or text.startswith(self.CLOSE, end)):
            return None
        end += len(self.CLOSE) if end < len(text) else 0
        return obj, end

    @staticmethod
    def _add(obj: Any, where: str, raw: str, turn: Turn) -> None:
        """One decoded block into `turn`: a call object, or a JSON array of them (SmolLM2's form)."""
        if not isinstance(obj, list):
            return turn.add(_json_call(obj, ARG_KEYS, "a JSON object (or an array of such objects)"), where, raw)
        for i, item in enumerate(obj):
            if turn.full:
                return
            got = _json_call(item, ARG_KEYS)
            turn.add(f"element {i} of the array: {got}" if isinstance(got, str) else got, where, raw)

    def _read(self, body: str, raw: str, closed: bool, turn: Turn) -> None:
        where = "<tool_call>" if closed else "unclosed <tool_call>"
        if len(body) > MAX_CALL_CHARS:
            return turn.add(f"longer than {MAX_CALL_CHARS} characters", where, raw)
        if not body.strip():
            return turn.add("empty", where, raw)
        try:
            obj = _load_json(body)
        except ValueError as e:
            return turn.add(f"not valid JSON ({e}): {short(body)}", where, raw)
        self._add(obj, where, raw, turn)

    def format_calls(self, calls: Sequence[ToolCall], content: str = "") -> str:
        parts = [content] if content else []
        for call in calls:
            body = json.dumps({"name": call.name, "arguments": dict(call.arguments)}, ensure_ascii=False)
            parts.append(f"{self.OPEN}\n{body}\n{self.CLOSE}")
        return "\n".join(parts)


# ---------------------------------------------------------------- llama3_json


class Llama3JsonParser:
    name = "llama3_json"
    TAG = "<|python_tag|>"
    _STARTS_CALL = re.compile(r'\{\s*"(?:name|type)"\s*:')
    _NEXT_CALL = re.compile(r'[;\n]\s*(?=[{\[])')

    def parse(self, text: str) -> Action:
        text = strip_end(text)
        visible = without_thinking(text)
        tag = visible.find(self.TAG)
        if tag != -1:
            content, region, tagged = visible[:tag], visible[tag + len(self.TAG):], True
        elif self._STARTS_CALL.match(visible.lstrip()):
            content, region, tagged = "", visible, False
        else:
            return Turn().action(text, visible)
        turn = Turn()
        trailing = self._read_region(region.replace(self.TAG, " "), tagged, turn)
        return turn.action(text, content + trailing)

    def _read_region(self, region: str, tagged: bool, turn: Turn) -> str:
        """Reads the calls in `region` into `turn`; returns trailing prose (content)."""
        decoder = json.JSONDecoder()
        pos, n = 0, len(region)
        while True:
            while pos < n and (region[pos].isspace() or region[pos] == ";"):
                pos += 1
            if pos >= n or turn.full:
                return ""
            if region[pos] not in "{[":
                if turn.calls or turn.errors or not tagged:
                    return region[pos:]  # prose after the calls
                nxt = self._NEXT_CALL.search(region, pos)
                stop = nxt.start() if nxt else n
                turn.add(f"expected a JSON object, got: {short(region[pos:stop])}", "tool call", region[pos:stop])
                pos = stop
                continue
            try:
                obj, end = decoder.raw_decode(region[pos:pos + MAX_CALL_CHARS + 1])
            except (ValueError, RecursionError) as e:
                nxt = self._NEXT_CALL.search(region, pos + 1)
                stop = nxt.start() if nxt else n
                raw = region[pos:stop].strip()
                if stop - pos > MAX_CALL_CHARS:
                    why = f"longer than {MAX_CALL_CHARS} characters"
                else:
                    why = "not valid JSON ({}): {}".format(
                        "nested too deeply" if isinstance(e, RecursionError) else e, short(raw))
                turn.add(why, "tool call", raw)
                pos = stop
                continue
            if end > MAX_CALL_CHARS:
                turn.add(f"longer than {MAX_CALL_CHARS} characters", "tool call", region[pos:pos + end])
            else:
                turn.add(_json_call(obj, ("parameters", "arguments")), "tool call", region[pos:pos + end])
            pos += end

    def format_calls(self, calls: Sequence[ToolCall], content: str = "") -> str:
        body = "; ".join(json.dumps({"name": c.name, "parameters": dict(c.arguments)}, ensure_ascii=False)
                         for c in calls)
        if not content:
            return body
        return f"{content}{self.TAG}{body}" if calls else content


# ---------------------------------------------------------------- registry


PARSERS: dict[str, Callable[[], ToolParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "pythonic": PythonicParser,
}


def get_parser(name: str) -> ToolParser:
    if name not in PARSERS:
        raise ConfigError(f"unknown tool-call parser {name!r} (known: {', '.join(sorted(PARSERS))})")
    return PARSERS[name]()


def chat_template_text(tokenizer) -> str:
    """The tokenizer's chat template(s) as one string ("" when it has none)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        return "\n".join(str(t) for t in template.values())
    if isinstance(template, (list, tuple)):
        return "\n".join(str(t.get("template", "")) if isinstance(t, Mapping) else str(t) for t in template)
    return template if isinstance(template, str) else ""


def pick_parser(tokenizer, name: str = "auto") -> ToolParser:
    """`name`, or for "auto" the format the chat template writes tool calls in (default hermes)."""
    if name != "auto":
        return get_parser(name)
    template = chat_template_text(tokenizer)
    if "<tool_call>" in template:
        return get_parser("hermes")
    if "<|python_start|>" in template:
        return get_parser("pythonic")
    if "<|python_tag|>" in template:
        return get_parser("llama3_json")
    return get_parser("hermes")
