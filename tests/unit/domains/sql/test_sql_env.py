"""The sql env: the oracle passes at every level (both splits) and the untouched state fails; tool calls,
errors and final answers through reset/step; one episode through `rollout` with the scripted engine."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from posttrain.envs.env import Action, ParseError, Resources, ToolCall, make_env
from posttrain.envs.rollout import rollout
from posttrain.domains.sql.env import SHOW_ROWS, fenced_sql
from posttrain.envs.tools.parsers import get_parser
from posttrain.engine.protocol import SamplingParams
from posttrain.tasks.generated import oracle_turns
from posttrain.tasks.registry import make_source_tasks
from tests.unit.envs.scripted import TurnScript


def run(coro):
    return asyncio.run(coro)


def one_task(level: int = 1, seed: int = 0, **options):
    return make_source_tasks("sql", 1, seed, {"level": level, **options})[0]


async def play(task, actions):
    env = make_env("sql", Resources())
    messages = await env.reset(task)
    results = [await env.step(a) for a in actions]
    state = json.loads(json.dumps(env.state()))  # JSON-able, and scored from the copy
    await env.close()
    return messages, results, state, env.score(task, state)[0]


def act(*calls: tuple[str, dict], content: str = "") -> Action:
    tc = tuple(ToolCall(name, args, f"call_{i}") for i, (name, args) in enumerate(calls))
    return Action(text=content, tool_calls=tc, content=content, parsed=tc)


@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_passes_and_untouched_fails_at_every_level(split):
    async def check(task):
        env = make_env(task.env, Resources())
        await env.reset(task)
        assert env.score(task, env.state())[0].value < 1.0
        await env.close()
        env = make_env(task.env, Resources())
        await env.reset(task)
        done = False
        for turn in oracle_turns(task):
            action = Action(text=turn.content, tool_calls=turn.calls, content=turn.content, parsed=turn.calls)
            obs, done, _ = await env.step(action)
            assert not any(o.error for o in obs), obs
            if done:
                break
        assert done
        assert env.score(task, env.state())[0].value == 1.0, task.id
        await env.close()

    for level in range(1, 6):
        for task in make_source_tasks("sql", 4, 0, {"level": level, "split": split}):
            run(check(task))


def test_reset_shows_the_schema_and_the_question():
    task = one_task(level=4)
    messages, _, _, _ = run(play(task, []))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "CREATE TABLE" in messages[0]["content"] and "submit" in messages[0]["content"]
    assert messages[1] == task.prompt[0]


def test_run_sql_answers_with_a_table_and_errors_with_their_kind():
    task = one_task(level=3, seed=5)
    table = task.metadata["table"]
    calls = [("run_sql", {"query": f"SELECT * FROM {table}"}),
             ("run_sql", {"query": f"SELECT COUNT(*) AS n FROM {table}"}),
             ("run_sql", {"query": "SELECT * FROM nowhere"}),
             ("run_sql", {"query": f"DELETE FROM {table}"}),
             ("run_sql", {}),
             ("run_sql", {"query": 7}),
             ("drop_all", {"query": "x"})]
    _, [(obs, done, info)], state, score = run(play(task, [act(*calls)]))
    assert not done and info["tool_calls"] == 7
    lines = obs[0].content.splitlines()
    assert len(lines) == SHOW_ROWS + 2 and lines[-1] == f"({SHOW_ROWS} rows shown, 10 more)" and " | " in lines[0]
    assert obs[1].content == "n\n40\n(1 row)"
    assert obs[2].error == "tool_failed" and "no such table: nowhere" in obs[2].content
    assert obs[3].error == "tool_failed" and "only read queries" in obs[3].content
    assert [o.error for o in obs[4:]] == ["bad_arguments", "bad_arguments", "unknown_tool"]
    assert state["queries"] == [c[1]["query"] for c in calls[:4]] and state["submitted"] is None
    assert score.value == 0.0 and score.details["error"] == "no query submitted"


def test_a_runaway_query_is_a_tool_timeout_within_the_limit():
    task = one_task(level=2)
    task = dataclasses.replace(task, limits=dataclasses.replace(task.limits, tool_timeout=0.5))
    q = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"
    _, [(obs, _, info)], _, _ = run(play(task, [act(("run_sql", {"query": q}))]))
    assert obs[0].error == "tool_timeout" and info["env_seconds"] < 1.5


def test_submit_ends_the_episode_and_later_calls_do_not_run():
    task = one_task(level=2, seed=3)
    sql = task.reference["sql"]
    _, [(obs, done, _)], state, score = run(play(task, [act(("submit", {"query": sql}),
                                                            ("run_sql", {"query": "SELECT 1"}))]))
    assert done and [o.name for o in obs] == ["submit"] and state["queries"] == []
    assert state == {"queries": [], "submitted": sql, "via": "submit"} and score.value == 1.0


def test_a_turn_without_calls_ends_with_its_last_fenced_query():
    task = one_task(level=1, seed=8)
    text = f"First try:\n```sql\nSELECT 1\n```\nBetter:\n```sql\n{task.reference['sql']}\n```\nDone."
    _, [(obs, done, _)], state, score = run(play(task, [Action(text=text, content=text)]))
    assert done and obs == [] and state["via"] == "fenced" and score.value == 1.0
    _, [(_, done, _)], state, score = run(play(task, [Action(text="I do not know.", content="I do not know.")]))
    assert done and state["submitted"] is None and score.value == 0.0
    assert fenced_sql("```SQL\nSELECT 2;```") == "SELECT 2;" and fenced_sql("```sql\n```") is None


def test_unreadable_calls_are_malformed_and_the_episode_goes_on():
    task = one_task(level=1)
    action = Action(text="<tool_call>{", errors=(ParseError("malformed", "bad JSON", "{"),))
    _, [(obs, done, _)], _, _ = run(play(task, [action]))
    assert not done and obs[0].error == "malformed"


def test_an_episode_through_rollout_with_the_scripted_engine(tiny_tokenizer):
    hermes = get_parser("hermes")
    task = one_task(level=1, seed=2)
    task = dataclasses.replace(task, limits=dataclasses.replace(task.limits, max_new_tokens=2048))
    look = {"query": f"SELECT * FROM {task.metadata['table']} LIMIT 2"}
    script = {41: [hermes.format_calls([ToolCall("run_sql", look, "call_0")], "Let me look."),
                   hermes.format_calls([ToolCall("submit", {"query": task.reference["sql"]}, "call_0")], "")]}
    engine = TurnScript(tiny_tokenizer, script)
    [[traj]] = rollout(engine, tiny_tokenizer, [task], [1], SamplingParams(temperature=1.0, max_tokens=2048), [41],
                       version=0, parser="hermes")
    assert traj.stop_reason == "done" and traj.turns == 2 and traj.stats["tool_calls"] == 2
    assert traj.final_state["submitted"] == task.reference["sql"] and traj.final_state["queries"] == [look["query"]]
    assert make_env("sql", Resources()).score(task, traj.final_state)[0].value == 1.0
