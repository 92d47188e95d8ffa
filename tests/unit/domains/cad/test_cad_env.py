"""The cad env: the oracle passes every level, steps are confirmed in order, scores re-render the state."""

from __future__ import annotations

import asyncio

import pytest

from posttrain.envs.env import Action, Resources, ToolCall
from posttrain.domains.cad.env import CadEnv
from posttrain.domains.cad.levels import build
from posttrain.domains.cad.spec import script
from posttrain.envs.rollout import rollout
from posttrain.envs.tools.parsers import get_parser
from posttrain.engine.protocol import SamplingParams
from posttrain.tasks.generated import oracle_turns
from tests.unit.domains.cad.cad_helpers import act, episode, task
from tests.unit.envs.scripted import TurnScript


def part_of(t):
    return build(t.reference["level"], t.reference["params"], t.reference["fn"])


async def _oracle_run(t):
    env = CadEnv(Resources())
    await env.reset(t)
    untouched = env.score(t, env.state())[0]
    await env.close()
    env = CadEnv(Resources())
    await env.reset(t)
    seen, done = [], False
    for turn in oracle_turns(t):
        result = await env.step(Action(text=turn.content, tool_calls=turn.calls, content=turn.content,
                                       parsed=turn.calls))
        seen += [o for o in result.observations if o.name == "confirm_step"]
        assert not any(o.error for o in result.observations), [o.content for o in result.observations]
        done = result.done
        if done:
            break
    final = env.score(t, env.state())[0]
    await env.close()
    return untouched, seen, done, final


@pytest.mark.parametrize("level,split", [(1, "train"), (1, "test"), (2, "train"), (2, "test"), (3, "train"),
                                         (3, "test"), (4, "train"), (4, "test"), (5, "test")])
def test_the_oracle_passes_and_the_untouched_state_fails(level, split):
    t = task(level, seed=3, split=split)
    untouched, confirms, done, final = asyncio.run(_oracle_run(t))
    assert untouched.value < 1 and untouched.details["error"] == "no render of the part"
    steps = t.metadata["steps"]
    assert len(confirms) == steps and all("confirmed: all" in o.content for o in confirms)
    assert done and final.value == 1.0 and all(final.details["checks"].values())
    assert final.details["confirmed"] == steps and final.details["measured"]["watertight"]


def test_steps_are_revealed_and_confirmed_in_order():
    t = task(3, seed=5)
    part = part_of(t)
    assert part.steps[1].text not in t.prompt[0]["content"]
    s1 = script(part, 1)
    w = t.reference["params"]["plate"][0]
    wrong = s1.replace(f"cube([{w}, ", f"cube([{w + 5}, ")
    steps, state = episode(
        t, act(("confirm_step", {"step": 2})), act(("confirm_step", {"step": 1})),
        act(("write_script", {"code": wrong}), ("render", {}), ("confirm_step", {"step": 1})),
        act(("write_script", {"code": s1}), ("confirm_step", {"step": 1})),
        act(("render", {}), ("confirm_step", {"step": 1}), ("confirm_step", {"step": 1})))
    assert steps[0].observations[0].error == "tool_failed" and "in order" in steps[0].observations[0].content
    assert "nothing rendered" in steps[1].observations[0].content
    failed = steps[2].observations[2]
    assert not failed.error and "not confirmed" in failed.content and "size_x" in failed.content
    assert steps[2].info["confirmed"] == 0
    assert "render the current part.scad first" in steps[3].observations[1].content  # a stale render
    passed = steps[4].observations[1]
    assert "Step 1 confirmed" in passed.content and part.steps[1].text in passed.content
    assert "already confirmed" in steps[4].observations[2].content
    assert state["confirmed"] == 1 and state["script"] == s1


def test_bad_calls_are_typed_errors_and_edits_apply():
    t = task(1)
    code = script(part_of(t), 1)
    steps, state = episode(
        t, act(("drill", {})), act(("write_script", {})), act(("confirm_step", {"step": "1"})),
        act(("confirm_step", {"step": True})), act(("render", {"fast": 1})),
        act(("write_script", {"code": code}), ("edit_script", {"old": "cube", "new": "cube"}),
            ("edit_script", {"old": "nowhere", "new": ""}), ("edit_script", {"old": "$fn = 32", "new": "$fn = 16"})),
        act(("write_script", {"code": "x" * 20_001})))
    kinds = [s.observations[0].error for s in steps[:5]]
    assert kinds == ["unknown_tool", "bad_arguments", "bad_arguments", "bad_arguments", "bad_arguments"]
    assert [o.error for o in steps[5].observations] == ["", "", "tool_failed", ""]
    assert steps[6].observations[0].error == "bad_arguments" and not steps[6].done
    assert state["script"] is None  # never rendered


def _score(t, code, **extra):
    return CadEnv(Resources()).score(t, {"script": code, "confirmed": 0, **extra})[0]


def test_scores_give_partial_credit_naming_the_failing_check():
    t = task(2, seed=1)
    part, params = part_of(t), t.reference["params"]
    good = script(part, 2)
    assert _score(t, good).value == 1.0
    w = params["plate"][0]
    wide = _score(t, good.replace(f"cube([{w}, ", f"cube([{w + 5}, "))
    failing = {k for k, ok in wide.details["checks"].items() if not ok}
    assert failing == {"size_x", "volume"} and wide.value == pytest.approx(1 - 2 / len(wide.details["checks"]))
    d = params["d"]
    small = _score(t, good.replace(f"d = {d:g}", f"d = {d - 1:g}", 1))  # the first hole 1 mm too small
    assert {k for k, ok in small.details["checks"].items() if not ok} == {"hole_1"}
    assert 0 < small.value < 1 and "hole_1" in small.details["failed"]


def test_adversarial_states_score_zero_and_claims_are_ignored():
    t = task(2, seed=1)
    good = script(part_of(t), 2)
    hostile = _score(t, "include </etc/passwd>\n" + good)
    assert hostile.value == 0 and "outside the work dir" in hostile.details["error"]
    assert _score(t, 'echo("done");').value == 0
    assert CadEnv(Resources()).score(t, None)[0].value == 0
    assert CadEnv(Resources()).score(t, {"script": 42})[0].value == 0
    claimed = _score(t, "cube(1);", confirmed=99, measured={"volume": 1e9}, checks={"volume": True})
    assert claimed.value < 0.5 and claimed.details["measured"]["size"] == [1, 1, 1]


def test_one_episode_through_rollout_with_the_scripted_engine(tiny_tokenizer):
    t = task(1, seed=2)
    hermes = get_parser("hermes")
    code = script(part_of(t), 1)
    turn = hermes.format_calls([ToolCall("write_script", {"code": code}, "call_0"), ToolCall("render", {}, "call_1"),
                                ToolCall("confirm_step", {"step": 1}, "call_2")], "")
    engine = TurnScript(tiny_tokenizer, {4: [turn, "Done."]})
    params = SamplingParams(temperature=1.0, max_tokens=512)
    [[traj]] = rollout(engine, tiny_tokenizer, [t], [1], params, [4], version=0, parser="hermes")
    assert traj.stop_reason == "done" and traj.turns == 2
    assert traj.final_state["script"] == code and traj.final_state["confirmed"] == 1
    assert CadEnv(Resources()).score(t, traj.final_state)[0].value == 1.0
