"""The tool-calling layer of episodes: parse a sampled turn into an `Action`, check calls against
the tools' JSON schemas, and put the tools into the prompt.

    parser = pick_parser(tokenizer)                  # parsers.py: hermes | llama3_json | pythonic
    action = parser.parse(turn_text)                 # calls, malformed-call errors, content
    error = check_call(call, env.tools)              # schema.py: None, or unknown_tool / bad_arguments
    messages, kwargs = with_tools(messages, env.tools, parser, tokenizer)   # prompt.py
"""

from posttrain.envs.tools.parsers import PARSERS, ToolParser, get_parser, pick_parser

__all__ = ["PARSERS", "ToolParser", "get_parser", "pick_parser"]
