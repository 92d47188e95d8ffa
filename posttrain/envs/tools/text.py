"""The text helpers the tool-call parsers share (parsers.py, pythonic.py): end-of-turn tokens,
thinking blocks, one-line snippets, and `Turn`, the bounded list of one turn's calls and errors."""

from __future__ import annotations

import re

from posttrain.envs.env import Action, ParseError, ToolCall

MAX_CALL_CHARS = 64 * 1024  # one call's text; longer is malformed unread
MAX_CALLS = 64  # calls read per turn; the rest are one malformed error
END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|endoftext|>")
_SPECIAL = re.compile(r"<\|[A-Za-z0-9_]+\|>|</s>")  # ChatML / Llama style special tokens
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def strip_end(text: str) -> str:
    """`text` without trailing whitespace and end-of-turn tokens (linear, no copies per token)."""
    end = len(text)
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        tok = next((t for t in END_TOKENS if text.endswith(t, 0, end)), None)
        if tok is None:
            return text[:end]
        end -= len(tok)


def plain(text: str) -> str:
    return _SPECIAL.sub("", text)


def split_think(text: str) -> list[tuple[bool, str]]:
    """[(is_thinking, piece), ...] covering `text` in order."""
    out: list[tuple[bool, str]] = []
    pos = 0
    close = text.find(_THINK_CLOSE)
    opened = text.find(_THINK_OPEN)
    if close != -1 and (opened == -1 or close < opened):  # the template opened the block
        out.append((True, text[:close]))
        pos = close + len(_THINK_CLOSE)
    while pos < len(text):
        start = text.find(_THINK_OPEN, pos)
        if start == -1:
            out.append((False, text[pos:]))
            break
        out.append((False, text[pos:start]))
        end = text.find(_THINK_CLOSE, start)
        if end == -1:
            out.append((True, text[start:]))
            break
        pos = end + len(_THINK_CLOSE)
        out.append((True, text[start:pos]))
    return out


def without_thinking(text: str) -> str:
    """The turn without its thinking blocks."""
    return "".join(piece for thinking, piece in split_think(text) if not thinking)


def short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def malformed(message: str, raw: str) -> ParseError:
    return ParseError("malformed", " ".join(message.split()), raw[:MAX_CALL_CHARS])


class Turn:
    """The calls and errors of one turn, bounded to MAX_CALLS items."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.errors: list[ParseError] = []
        self.overflowed = False

    @property
    def full(self) -> bool:
        if len(self.calls) + len(self.errors) < MAX_CALLS:
            return False
        if not self.overflowed:
            self.overflowed = True
            why = f"more than {MAX_CALLS} tool calls in one turn; the rest were not read"
            self.errors.append(malformed(why, ""))
        return True

    def add(self, got: tuple[str, dict] | str, where: str, raw: str) -> None:
        if isinstance(got, str):
            self.errors.append(malformed(f"{where}: {got}" if where else got, raw))
        else:
            self.calls.append(got)

    def action(self, text: str, content: str) -> Action:
        tool_calls = tuple(ToolCall(name, args, f"call_{i}") for i, (name, args) in enumerate(self.calls))
        return Action(text=plain(text).strip(), tool_calls=tool_calls, errors=tuple(self.errors),
                      content=plain(content).strip())
