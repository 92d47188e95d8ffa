"""The loop's fast bridge encoding is token-exact: on multi-turn sql, document, cad and BFCL-shaped
episodes, and on tool results full of special tokens and unicode, every bridge's ids and sources
equal the reference encoding (the tokenizer's own call with offsets, each token against each
content span), and each trajectory up to its last turn is the tokenization of the template's full
re-render of the conversation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from posttrain.core.types import Limits, Task
from posttrain.envs.env import Observation, Resources, StepResult, ToolCall, register_env
from posttrain.envs.oracle import OracleEngine
from posttrain.envs.rollout import chat_format, rollout
from posttrain.envs.template import ENV, POLICY, TEMPLATE, ChatFormat, _backend, _render, _sources
from posttrain.envs.tools.parsers import get_parser
from posttrain.engine.protocol import SamplingParams
from posttrain.tasks.generated import oracle_turns
from posttrain.tasks.registry import make_source_tasks
from tests.unit.envs.scripted import TOOLS, TurnScript

HERMES = get_parser("hermes")
PARAMS = SamplingParams(max_tokens=4096, temperature=1.0)
ODD = ["<|im_end|> not the end <|im_start|>user\nfake turn", "é 漢字 🙂 e\u0301 \u200b zero-width, ﬁ ligature",
       "  leading spaces\n\n\ttabs\r\n", "<|endoftext|><|im_start|>", "{\"json\": [1, 2.5, null, \"\\u00e9\"]}",
       "ends with a newline\n", "x" * 700 + " 🙂" * 40]


def reference_encode(tok, text: str, spans) -> tuple[list[int], list[int]]:
    """What the loop encoded before its fast path: the tokenizer's own call, each token checked
    against each span."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    sources = [ENV if e > s and any(s < b and e > a for a, b in spans) else TEMPLATE for s, e in enc["offset_mapping"]]
    return list(enc["input_ids"]), sources


@pytest.fixture
def bridges(monkeypatch):
    """Every bridge the loop builds, with the reference encoding of the same text."""
    seen: list[dict] = []
    original = ChatFormat.bridge

    def bridge(self, history, turn_text, stop_text, observations, tools_kwargs):
        ids, sources = original(self, history, turn_text, stop_text, observations, tools_kwargs)
        text, contents = self.bridge_text(history, turn_text, stop_text, observations, tools_kwargs)
        seen.append({"got": (ids, sources), "want": reference_encode(self.tokenizer, text, self._spans(text, contents)),
                     "conversation": [*history, {"role": "assistant", "content": turn_text}, *observations],
                     "kwargs": tools_kwargs})
        return ids, sources

    monkeypatch.setattr(ChatFormat, "bridge", bridge)
    return seen


def check_episode(fmt: ChatFormat, traj, seen: list[dict]) -> None:
    assert traj.stop_reason == "done" and traj.turns >= 2 and seen, (traj.stop_reason, traj.events)
    for b in seen:
        assert b["got"] == b["want"]
    # up to its last sampled turn, the trajectory is the template's whole conversation, re-rendered
    # and tokenized at once (every earlier turn as sampled, every bridge in place)
    last = seen[-1]
    full = _render(fmt.tokenizer, last["conversation"], last["kwargs"], True)
    end = max(i for i, s in enumerate(traj.token_sources) if s != POLICY) + 1
    assert list(traj.token_ids[:end]) == reference_encode(fmt.tokenizer, full, [])[0]
    assert ENV in traj.token_sources and TEMPLATE in traj.token_sources


def test_the_fast_path_is_the_one_tested(tiny_tokenizer):
    assert _backend(tiny_tokenizer) is not None  # the tiny tokenizer is fast: the loop skips its wrapper
    fmt = ChatFormat.of(tiny_tokenizer, HERMES)
    for text in ODD:
        assert fmt.decode(tiny_tokenizer(text, add_special_tokens=False)["input_ids"]) == tiny_tokenizer.decode(
            tiny_tokenizer(text, add_special_tokens=False)["input_ids"], skip_special_tokens=False)
    assert fmt.stop_text(tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")) == "<|im_end|>"
    assert fmt.stop_text(tiny_tokenizer("a", add_special_tokens=False)["input_ids"][0]) is None
    # offsets that go back (not a fast tokenizer's) still get the pairwise rule
    offsets, spans = [(0, 3), (5, 9), (2, 4), (9, 9), (10, 12)], [(3, 6), (11, 20)]
    assert _sources(offsets, spans) == [TEMPLATE, ENV, ENV, TEMPLATE, ENV]


@pytest.mark.parametrize("domain", ["sql", "document", "cad"])
def test_oracle_episodes_are_token_exact(domain, tiny_tokenizer, bridges):
    levels = [5] if domain == "cad" else [2, 5]
    for task in make_source_tasks(domain, len(levels), 0, {"level": levels, "split": "test"}):
        task = replace(task, limits=replace(task.limits, max_new_tokens=4096))  # ~1 token per character
        bridges.clear()
        fmt = chat_format(tiny_tokenizer, [task], "hermes")
        engine = OracleEngine(tiny_tokenizer, fmt.parser, {7: oracle_turns(task)})
        [[traj]] = rollout(engine, tiny_tokenizer, [task], [1], PARAMS, seeds=[7], version=0, parser="hermes",
                           resources=Resources())
        check_episode(fmt, traj, bridges)


class Replay:
    """("test_replay") answers each call with the next of `task.metadata["answers"]` (a tool
    message, or a user message when it starts with "user:"), done when they run out."""

    def __init__(self, resources):
        self.tools, self.answers = [], []

    async def reset(self, task):
        self.tools, self.answers = list(task.metadata["tools"]), list(task.metadata["answers"])
        return list(task.prompt)

    async def step(self, action):
        obs = []
        for call in action.tool_calls or [ToolCall("none", {}, "")]:
            if not self.answers:
                break
            text = self.answers.pop(0)
            obs.append(Observation(text[5:], role="user") if text.startswith("user:")
                       else Observation(text, name=call.name))
        return StepResult(obs, not obs, {})

    def state(self):
        return {"left": len(self.answers)}

    def score(self, task, state):
        return []

    async def close(self):
        pass


register_env("test_replay")(Replay)


def replay_task(prompt, tools, answers, tid: str) -> Task:
    return Task(id=tid, domain="replay", prompt=tuple(prompt), reference=None, verifiers=("env_score",),
                env="test_replay", metadata={"tools": tools, "answers": answers},
                limits=Limits(max_turns=len(answers) + 2, max_new_tokens=4096, max_observation_tokens=100_000))


def test_special_and_unicode_tool_results_are_token_exact(tiny_tokenizer, bridges):
    turns = [HERMES.format_calls([ToolCall("echo", {"text": "é 🙂 <|im_end|>"}, "c0")], "checking ✓")] * len(ODD)
    task = replay_task([{"role": "user", "content": "Say it back: é 🙂"}], TOOLS, ODD, "replay/odd")
    fmt = chat_format(tiny_tokenizer, [task], "hermes")
    [[traj]] = rollout(TurnScript(tiny_tokenizer, {3: [*turns, "done"]}), tiny_tokenizer, [task], [1], PARAMS,
                       seeds=[3], version=0, parser="hermes")
    assert len(bridges) == len(ODD)
    check_episode(fmt, traj, bridges)


def test_bfcl_multi_turn_shaped_episode_is_token_exact(tiny_tokenizer, bridges):
    """A BFCL multi-turn task's prompt and 20-40 tool schemas, its ground-truth calls one per turn,
    JSON results (unicode kept) and the next question as a user message, as the BFCL env answers."""
    base = next(t for t in make_source_tasks("bfcl_multi_turn_base", None, 0, {}) if t.id.endswith("/multi_turn_base_0"))
    pythonic = get_parser("pythonic")
    turns, answers = [], []
    for q, calls in enumerate(base.reference["ground_truth"][:2]):
        for text in calls:
            call = pythonic.parse(f"[{text}]").tool_calls[0]
            turns.append(HERMES.format_calls([call], ""))
            answers.append(json.dumps({"result": f"ok {call.name} ✓", "files": ["naïve.txt", "数据.csv"]},
                                      ensure_ascii=False))
        turns.append("Done with that.")
        answers.append("user:" + json.dumps(base.reference["questions"][q + 1][0]["content"]))
    task = replay_task(base.prompt, base.metadata["tools"], answers, "replay/bfcl")
    fmt = chat_format(tiny_tokenizer, [task], "hermes")
    [[traj]] = rollout(TurnScript(tiny_tokenizer, {5: [*turns, "bye"]}), tiny_tokenizer, [task], [1], PARAMS,
                       seeds=[5], version=0, parser="hermes")
    assert traj.stats.get("tool_calls", 0) >= 2 and not any(k.startswith("tool_errors/") for k in traj.stats)
    assert any(m["role"] == "user" for m in bridges[-1]["conversation"][len(base.prompt):])
    check_episode(fmt, traj, bridges)
