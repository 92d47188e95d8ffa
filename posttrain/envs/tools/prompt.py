"""Put an environment's tools into the prompt: through the chat template when it renders `tools=`,
else as a system-prompt text in the parser's own call format.

    messages, kwargs = with_tools(messages, env.tools, parser, tokenizer)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs)

Decisions.
- Whether a template renders tools is tested, not guessed from its text: it is rendered once
  with a probe tool, and renders them when the probe's name shows up (cached per template
  text). A template that raises on `tools=` does not render them. SmolLM2's template ignores
  `tools`; Qwen2.5/3 and Llama-3.1+ render them.
- The fallback lists each tool's JSON schema and shows the call format by example, written
  with `parser.format_calls`, so the prompt and the parser cannot disagree. It is appended to
  the first message when that is a system message, else it becomes a new system message (which
  replaces a template's default system text, as any system message does).
- The inputs are never mutated; no tools means no change.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from posttrain.envs.env import ToolCall
from posttrain.envs.tools.parsers import ToolParser, chat_template_text

_PROBE = "posttrain_probe_tool_7f3a"
_PROBE_TOOL = {"type": "function", "function": {
    "name": _PROBE, "description": "probe", "parameters": {"type": "object", "properties": {}}}}
_renders: dict[str, bool] = {}  # template text -> renders tools


def template_renders_tools(tokenizer) -> bool:
    """Does the tokenizer's chat template show the model the `tools` it is given?"""
    template = chat_template_text(tokenizer)
    if not template:
        return False
    if template not in _renders:
        try:
            text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[_PROBE_TOOL],
                                                 tokenize=False, add_generation_prompt=True)
        except Exception:  # a template that rejects tools= does not render them
            text = ""
        _renders[template] = isinstance(text, str) and _PROBE in text
    return _renders[template]


def tools_system_prompt(tools: Sequence[Mapping], parser: ToolParser) -> str:
    """The tools and the call format as system-prompt text, for templates that ignore `tools=`."""
    listed = "\n".join(json.dumps(dict(tool), ensure_ascii=False) for tool in tools)
    one = parser.format_calls([ToolCall("function_name", {"argument_name": "value"})])
    two = parser.format_calls([ToolCall("function_name", {"argument_name": "value"}),
                               ToolCall("other_function", {"count": 2})])
    return (
        "You can call the following tools (JSON schemas of functions):\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        f"To call a tool, reply with the call in exactly this format:\n{one}\n\n"
        f"Several calls in one reply are written like this:\n{two}\n\n"
        "Pass every argument by name, with values of the types the schema gives. Each call's result "
        "comes back in the next message. When no more tool calls are needed, reply with the final "
        "answer and no tool call."
    )


def with_tools(messages: list[Mapping], tools: Sequence[Mapping], parser: ToolParser,
               tokenizer) -> tuple[list[Mapping], dict]:
    """(messages, extra apply_chat_template kwargs) that show the model `tools`."""
    messages = [dict(m) for m in messages]
    if not tools:
        return messages, {}
    if template_renders_tools(tokenizer):
        return messages, {"tools": [dict(t) for t in tools]}
    text = tools_system_prompt(tools, parser)
    if messages and messages[0].get("role") == "system":
        system = str(messages[0].get("content") or "").rstrip()
        messages[0]["content"] = f"{system}\n\n{text}" if system else text
    else:
        messages.insert(0, {"role": "system", "content": text})
    return messages, {}
