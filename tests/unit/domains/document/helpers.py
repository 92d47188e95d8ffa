"""Shared helpers of the document env tests: tasks by level, an env episode driven by hand."""

from __future__ import annotations

import asyncio

from posttrain.envs.env import Action, Resources, ToolCall, make_env
from posttrain.domains.document.env import load_report
from posttrain.tasks.registry import make_source_tasks


def tasks(level: int, n: int = 3, seed: int = 0, **options):
    return make_source_tasks("document", n, seed, {"level": level, **options})


def call(name: str, **args) -> Action:
    c = (ToolCall(name, args, "call_0"),)
    return Action(text="", tool_calls=c, parsed=c)


def episode(task, *actions: Action):
    """(observations of each step, done flags, final state, score) of the actions run in order."""
    async def go():
        env = make_env("document", Resources())
        await env.reset(task)
        steps = [await env.step(a) for a in actions]
        state = env.state()
        await env.close()
        return steps, state

    steps, state = asyncio.run(go())
    score = make_env("document", Resources()).score(task, state)[0]  # a fresh env: from the state alone
    return [s.observations for s in steps], [s.done for s in steps], state, score


def report_of(task):
    return load_report(task.reference)


def gold_citations(task):
    return [{"section": ev["section"], "quote": ev["text"]} for ev in task.reference["evidence"]]


def answer(task, value=None, citations=None):
    """The final answer call (the gold answer and citations unless given)."""
    ref = task.reference
    return call("answer", answer=ref["answer"] if value is None else value,
                citations=gold_citations(task) if citations is None else citations)
