"""The document env: tools, errors, episode end, the oracle at every level, and a rollout episode."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import posttrain.domains.document.env as denv
from posttrain.envs.env import Action, ParseError, Resources, ToolCall, make_env
from posttrain.domains.document.env import pages
from posttrain.tasks.generated import oracle_turns
from posttrain.tasks.validate import validate_generated
from posttrain.core.types import Limits
from tests.unit.domains.document.helpers import answer, call, episode, gold_citations, report_of, tasks


def test_untouched_state_fails_and_the_oracle_scores_one_at_every_level_both_splits():
    async def run(task, oracle: bool):
        env = make_env("document", Resources())
        messages = await env.reset(task)
        assert messages[0]["role"] == "system" and messages[1:] == list(task.prompt)
        done = False
        for turn in (oracle_turns(task) if oracle else []):
            assert not done
            result = await env.step(Action(text=turn.content, tool_calls=turn.calls, content=turn.content,
                                           parsed=turn.calls))
            assert not any(o.error for o in result.observations), result.observations
            done = result.done
        state = json.loads(json.dumps(env.state()))
        await env.close()
        return done, make_env("document", Resources()).score(task, state)[0]

    for level in range(1, 6):
        for task in tasks(level, 3, seed=30) + tasks(level, 3, seed=30, split="test"):
            _, untouched = asyncio.run(run(task, False))
            done, oracle = asyncio.run(run(task, True))
            assert untouched.value < 1 and done and oracle.value == 1.0, (task.id, oracle.details)
            assert len(oracle_turns(task)) <= task.limits.max_turns


def test_the_lead_validator_passes_the_document_domain():
    results = asyncio.run(validate_generated("document", n=1))
    assert len(results) == 5 and all(r.ok for r in results), [r for r in results if not r.ok]


def test_toc_search_and_read_section_show_the_document():
    t = tasks(3, 1, seed=2)[0]
    report = report_of(t)
    ev = t.reference["evidence"][0]
    (toc,), (hits,), (read,) = episode(t, call("toc"), call("search", query=ev["query"]),
                                       call("read_section", section=ev["section"]))[0]
    assert all(f"{s.id} {s.title.split(': ')[-1][:1].upper()}{s.title.split(': ')[-1][1:]}" in toc.content
               for s in report.sections)
    assert len(toc.content.split("\n")) == len(report.chapters)
    assert hits.content.startswith("1. [") and ev["text"] in hits.content
    assert read.content.startswith(f"{ev['section']} ") and f"[{ev['section']} ¶1]" in read.content
    assert ev["text"] in read.content and not read.error


def test_missing_sections_pages_and_bad_arguments_are_error_observations():
    t = tasks(4, 1, seed=3)[0]
    first, last = report_of(t).sections[0].id, report_of(t).sections[-1].id
    obs, dones, state, _ = episode(t, call("read_section", section="9.99"), call("read_section", section="99.1"),
                                   call("read_section", section=first, page=5), call("search", query="  "),
                                   call("search", query="revenue", k=0), call("grep", pattern="x"),
                                   Action(text="<tool_call>{", errors=(ParseError("malformed", "bad JSON"),)))
    (missing,), (far,), (page,), (empty,), (bad_k,), (unknown,), (malformed,) = obs
    assert missing.error == "tool_failed" and f"no section '9.99'; sections run {first} .. {last}; chapter 9 has 9.1" \
        in missing.content
    assert far.error == "tool_failed" and far.content.endswith(f"sections run {first} .. {last}")
    assert page.error == "tool_failed" and "has 1 page(s); no page 5" in page.content
    assert empty.error == "tool_failed" and bad_k.error == "bad_arguments" and unknown.error == "unknown_tool"
    assert malformed.error == "malformed" and not any(dones)
    assert state["calls"] == {"read_section": 3, "search": 2, "grep": 1} and state["answer"] is None


def test_long_sections_come_in_pages(monkeypatch):
    text = "\n".join(f"line {i} " + "x" * 40 for i in range(30))
    parts = pages(text)
    assert "\n".join(parts) == text and all(len(p) <= denv.PAGE_CHARS for p in parts)
    monkeypatch.setattr(denv, "PAGE_CHARS", 600)
    t = tasks(2, 1, seed=4)[0]
    sec = report_of(t).sections[0]
    n = len(pages(sec.text))
    assert n > 1
    obs = episode(t, *[call("read_section", section=sec.id, page=p) for p in range(1, n + 1)])[0]
    assert obs[0][0].content.endswith(f"[page 1 of {n}; read_section('{sec.id}', page=2) for more]")
    assert obs[-1][0].content.endswith(f"[page {n} of {n}]")
    body = "\n".join(o[0].content.rsplit("\n", 1)[0] for o in obs)
    assert body == sec.text


def test_answer_ends_the_episode_and_later_calls_are_ignored():
    t = tasks(1, 1, seed=5)[0]
    final = answer(t)
    both = final.tool_calls + (ToolCall("search", {"query": "x"}, "call_1"),)
    obs, dones, state, score = episode(t, call("search", query="revenue"), Action(text="", tool_calls=both))
    assert dones == [False, True] and len(obs[1]) == 1 and obs[1][0].content == "Answer recorded."
    assert state["answered_by"] == "answer" and state["citations"] == gold_citations(t) and score.value == 1.0
    assert state["calls"] == {"search": 1, "answer": 1}


def test_a_turn_without_calls_is_an_uncited_answer():
    t = tasks(1, 1, seed=6)[0]
    _, dones, state, score = episode(t, Action(text=f"Answer: {t.reference['answer']}",
                                               content=f"Answer: {t.reference['answer']}"))
    assert dones == [True] and state["answered_by"] == "text" and score.value == 0.25


def test_one_episode_through_rollout_with_the_scripted_engine(tiny_tokenizer):
    from posttrain.envs.rollout import rollout
    from posttrain.envs.tools.parsers import get_parser
    from posttrain.engine.protocol import SamplingParams
    from posttrain.envs.score import env_score
    from tests.unit.envs.scripted import TurnScript

    hermes = get_parser("hermes")
    task = tasks(1, 1, seed=8)[0]
    task = replace(task, limits=Limits(max_turns=4, max_new_tokens=2048, seconds=60, tool_timeout=5))
    ev = task.reference["evidence"][0]
    script = [hermes.format_calls([ToolCall("search", {"query": ev["query"]}, "call_0")], ""),
              hermes.format_calls([ToolCall("read_section", {"section": ev["section"]}, "call_0")], ""),
              hermes.format_calls([ToolCall("answer", {"answer": task.reference["answer"],
                                                       "citations": gold_citations(task)}, "call_0")], "")]
    engine = TurnScript(tiny_tokenizer, {3: script})
    [[traj]] = rollout(engine, tiny_tokenizer, [task], [1], SamplingParams(max_tokens=2048), [3], version=1,
                       parser="hermes")
    assert traj.stop_reason == "done" and traj.turns == 3 and traj.stats["tool_calls"] == 3
    assert traj.final_state["answered_by"] == "answer"
    assert env_score(task, traj).value == 1.0
