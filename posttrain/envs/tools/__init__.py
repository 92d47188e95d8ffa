"""The tool-calling layer of episodes: parse a sampled turn into an `Action`, check calls against
the tools' JSON schemas, and put the tools into the prompt.

    parser = pick_parser(tokenizer)                  # parsers.py: hermes | llama3_json | pythonic
    action = parser.parse(turn_text)                 # calls, malformed-call errors, content
    error = check_call(call, env.tools)              # schema.py: None, or unknown_tool / bad_arguments
    messages, kwargs = with_tools(messages, env.tools, parser, tokenizer)   # prompt.py
"""

from posttrain.envs.tools.parsers import MAX_CALL_CHARS, MAX_CALLS, PARSERS, ToolParser, get_parser, pick_parser
from posttrain.envs.tools.prompt import template_renders_tools, tools_system_prompt, with_tools
from posttrain.envs.tools.schema import check_call, tool_name

__all__ = ["MAX_CALLS", "MAX_CALL_CHARS", "PARSERS", "ToolParser", "check_call", "get_parser", "pick_parser",
           "template_renders_tools", "tool_name", "tools_system_prompt", "with_tools"]
