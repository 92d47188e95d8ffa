"""The episode loop on a scripted engine: exact tokens, masks, bridges, limits and stop reasons."""

from __future__ import annotations

import asyncio
import json

import pytest

from posttrain.envs.env import ToolCall
from posttrain.envs.rollout import rollout
from posttrain.envs.template import ENV, POLICY, TEMPLATE
from posttrain.envs.tools.parsers import get_parser
from posttrain.engine.protocol import SamplingParams
from posttrain.core.types import Limits, Task
from tests.unit.envs.scripted import TOOLS, CalcEnv, TurnScript

HERMES = get_parser("hermes")
PARAMS = SamplingParams(temperature=1.0, max_tokens=256)


def call(name: str, content: str = "", **args) -> str:
    return HERMES.format_calls([ToolCall(name, args, "call_0")], content)


def task(tid: str = "calc/1", **limits) -> Task:
    return Task(id=tid, domain="calc", prompt=({"role": "user", "content": "What is 2 + 3?"},), reference=None,
                verifiers=("env_score",), env="test_calc",
                limits=Limits(**{"max_turns": 4, "max_new_tokens": 256, "seconds": 30.0, **limits}))


def run(tok, script, tasks, **kw):
    engine = TurnScript(tok, script)
    seeds = sorted(script)
    trajs = rollout(engine, tok, tasks, [1] * len(tasks), PARAMS, seeds, version=7, parser="hermes", **kw)
    return engine, [g[0] for g in trajs]


@pytest.fixture(autouse=True)
def reset_env():
    CalcEnv.raise_on_step, CalcEnv.infra_on_reset, CalcEnv.made = None, False, 0
    yield
    CalcEnv.raise_on_step, CalcEnv.infra_on_reset = None, False


def test_two_turn_episode_is_token_in_token_out(tiny_tokenizer):
    tok = tiny_tokenizer
    script = {100: [call("add", "let me add", a=2, b=3), "Answer: 5"]}
    engine, [traj] = run(tok, script, [task()])
    assert traj.stop_reason == "done" and traj.turns == 2 and traj.policy_version == 7
    (s0, t0, p0), (s1, t1, p1) = engine.prompts
    turn0, turn1 = engine.turn_ids(100, 0), engine.turn_ids(100, 1)
    # the second turn was prompted with exactly the first prompt + the sampled ids + a bridge
    assert p1[: len(p0) + len(turn0)] == p0 + turn0
    assert list(traj.token_ids) == p1 + turn1 and traj.prompt_len == len(p0)
    # loss mask, logprobs and versions only on sampled tokens; sources say who wrote each token
    sampled = [i for i, s in enumerate(traj.token_sources) if s == POLICY]
    assert sampled == list(range(len(p0), len(p0) + len(turn0))) + list(range(len(p1), len(traj.token_ids)))
    assert [i for i, m in enumerate(traj.loss_mask) if m] == sampled
    assert all((lp == -0.5) == (i in sampled) for i, lp in enumerate(traj.logprobs))
    assert {traj.token_versions[i] for i in sampled} == {7} and traj.token_versions[0] == -1
    bridge = traj.token_sources[len(p0) + len(turn0): len(p1)]
    assert ENV in bridge and TEMPLATE in bridge and POLICY not in bridge
    # the bridge's env tokens are the tool's answer, its template tokens the markup around it
    env_text = tok.decode([t for t, s in zip(p1[len(p0) + len(turn0):], bridge) if s == ENV])
    assert env_text.strip() == "5"
    # the whole trajectory decodes to the template's own rendering of the conversation
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    assert tok.decode(list(traj.token_ids)).startswith("<|im_start|>system")  # the tools' system prompt
    assert traj.final_state == {"calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    assert traj.text == "Answer: 5" and traj.stats["turns"] == 2 and traj.stats["tool_calls"] == 1
    del msgs


def test_bridge_keeps_the_newline_naive_concatenation_loses(tiny_tokenizer):
    from posttrain.envs.template import ChatFormat

    tok = tiny_tokenizer
    fmt = ChatFormat.of(tok, HERMES)
    history = [{"role": "user", "content": "q"}]
    bridge, _ = fmt.bridge_text(history, "a", "<|im_end|>", [{"role": "tool", "content": "r"}], {})
    naive = tok.apply_chat_template([{"role": "tool", "content": "r"}], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([*history, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "r"}],
                                   tokenize=False, add_generation_prompt=True)
    prompt = tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert prompt + "a<|im_end|>" + bridge == full
    assert prompt + "a<|im_end|>" + naive != full  # the "\n" after <|im_end|> is lost


def test_stop_reasons_and_limits(tiny_tokenizer):
    tok = tiny_tokenizer
    loop = call("echo", text="again")
    script = {
        1: [loop] * 5,                              # keeps calling: max_turns (4)
        2: ["x " * 80],                             # one turn longer than max_new_tokens
        3: [loop, loop, loop],                      # total tokens run out
        4: [call("sleep", seconds=5.0), "done"],    # the tool outlives the episode's wall time
        5: ["plain answer"],                        # no tool call: done
    }
    from posttrain.envs.template import ChatFormat

    n_prompt = len(ChatFormat.of(tok, HERMES).prompt(task().prompt, TOOLS)[0])
    budget = n_prompt + 2 * len(tok(loop)["input_ids"]) + 20  # room for two turns, not for their bridges
    tasks = [task("calc/1"), task("calc/2", max_new_tokens=16), task("calc/3", max_total_tokens=budget),
             task("calc/4", seconds=1.0), task("calc/5")]
    _, trajs = run(tok, script, tasks)
    assert [t.stop_reason for t in trajs] == ["max_turns", "max_tokens", "truncated", "timeout", "done"]
    assert trajs[0].turns == 4 and trajs[1].finish_reason == "length" and sum(trajs[1].loss_mask) == 16
    assert len(trajs[2].token_ids) <= budget and trajs[2].turns >= 1
    assert trajs[3].stats["episode_seconds"] < 3.0


def test_bad_tool_calls_become_error_observations(tiny_tokenizer):
    tok = tiny_tokenizer
    turns = ['<tool_call>{"name": "add", "arguments": {"a": 1</tool_call>', call("nope", x=1),
             call("add", a="two", b=3), "giving up"]
    engine, [traj] = run(tok, {9: turns}, [task()])
    assert traj.stop_reason == "done" and traj.turns == 4
    assert traj.stats["tool_errors/malformed"] == 1 and traj.stats["tool_errors/unknown_tool"] == 1
    assert traj.stats["tool_errors/bad_arguments"] == 1 and traj.final_state == {"calls": []}
    last_prompt = tok.decode(engine.prompts[-1][2])
    assert "Error (unknown_tool)" in last_prompt and "Error (bad_arguments)" in last_prompt


def test_long_observation_is_cut_with_a_marker(tiny_tokenizer):
    tok = tiny_tokenizer
    _, [traj] = run(tok, {5: [call("echo", text="9 " * 60), "ok"]}, [task(max_observation_tokens=20)])
    text = tok.decode(list(traj.token_ids))
    assert "observation truncated" in text and traj.stats["observations_truncated"] == 1


def test_env_error_and_infra_error_are_typed_and_unscored(tiny_tokenizer):
    tok = tiny_tokenizer
    CalcEnv.raise_on_step = RuntimeError("env bug")
    _, [traj] = run(tok, {5: [call("add", a=1, b=2)]}, [task()])
    assert traj.stop_reason == "env_error" and traj.final_state is None and "env bug" in traj.events[0]
    CalcEnv.raise_on_step, CalcEnv.infra_on_reset, CalcEnv.made = None, True, 0
    _, [traj] = run(tok, {5: ["x"]}, [task()])
    assert traj.stop_reason == "infra_error" and traj.token_ids == () and CalcEnv.made == 3  # 2 retries


def test_episodes_are_reproducible_and_independent_of_batch(tiny_tokenizer):
    tok = tiny_tokenizer
    script = {10: [call("add", a=1, b=1), "2"], 20: ["plain"], 30: [call("echo", text="e"), "e"]}
    _, alone = run(tok, {10: script[10]}, [task("calc/10")])
    _, together = run(tok, script, [task("calc/10"), task("calc/20"), task("calc/30")])
    assert alone[0].token_ids == together[0].token_ids and alone[0].token_sources == together[0].token_sources


def test_final_state_is_json_and_rescored_without_the_episode(tiny_tokenizer):
    from posttrain.envs.score import env_score

    _, [traj] = run(tiny_tokenizer, {5: [call("add", a=2, b=3), "5"]}, [task()])
    again = json.loads(json.dumps(traj.final_state))
    assert env_score(task(), traj).value == 1.0
    made = CalcEnv.made
    from dataclasses import replace

    assert env_score(task(), replace(traj, final_state=again)).value == 1.0 and CalcEnv.made == made + 1
    assert env_score(task(), replace(traj, final_state={"calls": []})).value == 0.0


def test_cancelled_request_is_aborted_in_the_engine(tiny_model_dir, tiny_tokenizer):
    from posttrain.engine.client import AsyncEngine
    from posttrain.engine.paged.factory import make_engine

    engine = make_engine(tiny_model_dir, tiny_tokenizer, speculative=None)

    async def main():
        async with AsyncEngine(engine) as client:
            request = SamplingParams(temperature=1.0, max_tokens=4000, seed=1)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.generate([5, 6, 7], request), 0.3)
            await asyncio.sleep(0.2)
            c = await client.generate([5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3))
            return c, client.runner.call(lambda e: e.has_unfinished()).result(timeout=10)

    completion, unfinished = asyncio.run(main())
    assert len(completion.token_ids) == 3 and unfinished is False


def test_single_turn_tool_task_keeps_every_decoded_call(tiny_tokenizer):
    """A single-turn task with tools (BFCL's shape): its state holds the calls as decoded, also one
    that fails the schema (its checker judges it), and the one turn always reaches the env."""
    tok = tiny_tokenizer
    t = Task(id="fc/1", domain="fc", prompt=({"role": "user", "content": "add two and 3"},), reference=None,
             metadata={"tools": TOOLS}, limits=Limits(max_new_tokens=256))
    engine = TurnScript(tok, {3: [call("add", a="two", b=3)]})
    [[traj]] = rollout(engine, tok, [t], [1], PARAMS, [3], version=0, parser="hermes")
    assert traj.stop_reason == "done" and traj.turns == 1 and traj.stats["tool_errors/bad_arguments"] == 1
    assert traj.final_state == {"tool_calls": [{"name": "add", "arguments": {"a": "two", "b": 3}}], "parse_errors": []}


def test_a_hanging_step_ends_the_episode_at_its_calls_timeouts(tiny_tokenizer, monkeypatch):
    import posttrain.envs.episode as episode

    monkeypatch.setattr(episode, "STEP_GRACE_S", 0.2)
    _, [traj] = run(tiny_tokenizer, {6: [call("sleep", seconds=30.0), "done"]}, [task(tool_timeout=0.3, seconds=60.0)])
    assert traj.stop_reason == "timeout" and traj.stats["episode_seconds"] < 5.0
