"""The chat template self-check: the template the loop can bridge passes; each known failure is named."""

from __future__ import annotations

import copy

import pytest

from posttrain.envs.template import ChatFormat, check_template
from posttrain.envs.tools.parsers import get_parser
from posttrain.core.errors import ConfigError

HERMES = get_parser("hermes")

# Qwen3-style: earlier assistant turns lose their <think> block once a later user turn exists
THINK_STRIPPING = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' }}"
    "{% if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in m['content'] %}"
    "{{ m['content'].split('</think>')[-1].lstrip() }}{% else %}{{ m['content'] }}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# a footer only when the conversation is "finished": adding a message changes what came before
NOT_PREFIX = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% else %}{{ '<|im_start|>end<|im_end|>' }}{% endif %}"
)
# turns separated by blank lines, no end-of-turn token
NO_TURN_END = (
    "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


def with_template(tok, template: str):
    tok = copy.deepcopy(tok)
    tok.chat_template = template
    return tok


def test_the_project_template_passes(tiny_tokenizer):
    assert check_template(ChatFormat(tiny_tokenizer, HERMES)) == []


@pytest.mark.parametrize("template, kind, words", [
    (THINK_STRIPPING, "think", "strips <think> blocks"),
    (NOT_PREFIX, "bridge", "not prefix-preserving"),
    (NO_TURN_END, "turn_end", "no special token"),
])
def test_known_failures_are_named(tiny_tokenizer, template, kind, words):
    problems = check_template(ChatFormat(with_template(tiny_tokenizer, template), HERMES))
    assert any(p.startswith(f"{kind}:") and words in p for p in problems), problems
    with pytest.raises(ConfigError, match="chat template refused"):
        ChatFormat(with_template(tiny_tokenizer, template), HERMES).check()


def test_keep_history_accepts_a_think_stripping_template_only(tiny_tokenizer):
    fmt = ChatFormat(with_template(tiny_tokenizer, THINK_STRIPPING), HERMES, template_check="keep_history")
    assert fmt.check()[0].startswith("think:")  # accepted, the problem still reported
    with pytest.raises(ConfigError, match="prefix-preserving"):
        ChatFormat(with_template(tiny_tokenizer, NOT_PREFIX), HERMES, template_check="keep_history").check()


def test_a_multi_turn_rollout_refuses_a_bad_template_before_sampling(tiny_tokenizer):
    from posttrain.envs.rollout import rollout
    from posttrain.engine.protocol import SamplingParams
    from posttrain.core.types import Limits, Task
    from tests.unit.envs.scripted import TurnScript

    tok = with_template(tiny_tokenizer, NOT_PREFIX)
    engine = TurnScript(tok, {1: ["x"]})
    t = Task(id="calc/1", domain="calc", prompt=({"role": "user", "content": "q"},), reference=None,
             env="test_calc", limits=Limits(max_turns=3))
    with pytest.raises(ConfigError, match="prefix-preserving"):
        rollout(engine, tok, [t], [1], SamplingParams(max_tokens=8), [1], 0, parser="hermes")
    assert engine.prompts == []
