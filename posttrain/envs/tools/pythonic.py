"""The pythonic tool-call parser (Llama-3.2/4 pythonic): `[f(x=1), pkg.g(y=[1, 2])]`, read with `ast`.

    parser = get_parser("pythonic")      # posttrain/envs/tools/parsers.py: the registry and shared helpers
    action = parser.parse('[get_weather(city="Paris")]')

Literal keyword arguments only (numbers, strings, lists, dicts, tuples, True/False/None, negative
numbers); a positional argument or a call as a value is a malformed call; dotted names are names;
optional `<|python_start|>` / `<|python_end|>` wrappers. The decisions shared with the other
parsers (end tokens, `<think>`, bounded work) are in parsers.py.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Sequence

from posttrain.envs.env import Action, ToolCall
from posttrain.envs.tools.text import MAX_CALL_CHARS, Turn, short, strip_end, without_thinking


class _NotLiteral(ValueError):
    pass


def _literal(node: ast.AST) -> Any:
    """A JSON-able value from a literal expression node (no names, calls or operators)."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise _NotLiteral("a ** expansion")
            key = _literal(k)
            if not isinstance(key, str):
                raise _NotLiteral(f"a dict key that is not a string ({ast.unparse(k)})")
            out[key] = _literal(v)
        return out
    if isinstance(node, ast.Call):
        raise _NotLiteral(f"a function call ({short(ast.unparse(node), 40)})")
    if isinstance(node, ast.Name):
        raise _NotLiteral(f"the name {node.id!r}")
    raise _NotLiteral(short(ast.unparse(node), 40))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


class PythonicParser:
    name = "pythonic"
    START, END = "<|python_start|>", "<|python_end|>"
    _LIST_START = re.compile(r"(?:^|\n)[ \t]*(\[\s*[A-Za-z_][\w.]*\s*\()")
    _IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")

    def parse(self, text: str) -> Action:
        text = strip_end(text)
        visible = without_thinking(text)
        start = visible.find(self.START)
        if start != -1:
            end = visible.find(self.END, start)
            stop = end if end != -1 else len(visible)
            content = visible[:start] + (visible[stop + len(self.END):] if end != -1 else "")
            region = visible[start + len(self.START):stop]
        else:
            m = self._LIST_START.search(visible)
            if not m:
                return Turn().action(text, visible)
            close = visible.rfind("]")
            stop = close + 1 if close > m.start(1) else len(visible)  # unclosed: runs to the end
            content = visible[:m.start(1)] + visible[stop:]
            region = visible[m.start(1):stop]
        turn = Turn()
        self._read_region(region.strip(), turn)
        return turn.action(text, content)

    def _read_region(self, region: str, turn: Turn) -> None:
        if not region:
            return turn.add("empty tool call block", "", region)
        if len(region) > MAX_CALL_CHARS:
            return turn.add(f"tool call block is longer than {MAX_CALL_CHARS} characters", "", region)
        try:
            tree = ast.parse(region, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            why = e.msg if isinstance(e, SyntaxError) else "nested too deeply"
            return turn.add(f"not a Python list of calls ({why}): {short(region)}", "tool calls", region)
        for node in tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]:
            if turn.full:
                return
            turn.add(self._call(node), "", ast.get_source_segment(region, node) or "")

    @staticmethod
    def _call(node: ast.AST) -> tuple[str, dict] | str:
        src = short(ast.unparse(node))
        if not isinstance(node, ast.Call):
            return f"expected a function call like f(x=1), got: {src}"
        name = _dotted(node.func)
        if name is None:
            return f"the called function is not a (dotted) name: {src}"
        if node.args:
            return f"{name}() has positional arguments; pass every argument by keyword (x=...): {src}"
        args: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None and not isinstance(kw.value, ast.Dict):
                return f"{name}() expands ** of something that is not a dict literal: {src}"
            try:
                value = _literal(kw.value)
            except (_NotLiteral, RecursionError) as e:
                why = e if isinstance(e, _NotLiteral) else "nested too deeply"
                return f"argument {kw.arg or '**'!r} of {name}() is not a literal value: {why}"
            if kw.arg is None:  # **{"Content-Type": ...}: keys that are not identifiers
                args.update(value)
            else:
                args[kw.arg] = value
        return name, args

    def format_calls(self, calls: Sequence[ToolCall], content: str = "") -> str:
        if not calls:
            return content
        body = "[" + ", ".join(self._format(c) for c in calls) + "]"
        return f"{content}\n{body}" if content else body

    def _format(self, call: ToolCall) -> str:
        plain = [f"{k}={v!r}" for k, v in call.arguments.items() if self._IDENTIFIER.match(k)]
        other = {k: v for k, v in call.arguments.items() if not self._IDENTIFIER.match(k)}
        return f"{call.name}(" + ", ".join(plain + ([f"**{other!r}"] if other else [])) + ")"
