"""The bfcl env in the real bwrap sandbox: BFCL's API classes answer calls, user turns advance, bad calls
are error observations, and the state check passes the ground truth and fails a wrong episode. The
episode's persistent runner (envs/bfcl_session.py) gives what a fresh replay gives, survives its own
death by replay, times out cleanly, and leaves no process behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import posttrain.domains.bfcl.session as bfcl_session
from posttrain.envs.env import Action, InfraError, ParseError, Resources, ToolCall, make_env
from posttrain.domains.bfcl.env import BfclEnv, parse_call_string, run_calls, score_state
from posttrain.domains.bfcl.session import BfclSession
from posttrain.domains.terminal.env import work_root
from posttrain.domains.terminal.session import shared_isolation
from posttrain.sandbox import SandboxError
from posttrain.tasks.registry import make_source_tasks
from posttrain.core.types import Trajectory
from posttrain.verifiers.registry import run_verifiers
from tests.sandbox.procs import process_table


UID = 64126 if os.geteuid() == 0 else os.getuid()  # the runners of these tests only (not the terminal tests' 64125)
SERVE = "bfcl_runner.py --serve"


def runner_pids(uid: int = UID) -> list[int]:
    """Host pids of the persistent runners (the python processes) running as `uid`."""
    return [pid for pid, real_uid, cmd in process_table()  # not bwrap, not the sandbox's pid 1
            if real_uid == uid and SERVE in cmd and "bwrap" not in cmd and "sandbox-init" not in cmd]


def one_task_per_class(tasks) -> list:
    picked: dict[str, object] = {}
    for task in tasks.values():
        for cls in task.reference["involved_classes"]:
            picked.setdefault(cls, task)
    assert len(picked) == 8
    return list({t.id: t for t in picked.values()}.values())


@pytest.fixture(scope="module")
def tasks():
    return {t.reference["id"]: t for t in make_source_tasks("bfcl_multi_turn_base", None, 0, {})}


def gt_turns(task) -> list[list[dict]]:
    return [[parse_call_string(s) for s in turn] for turn in task.reference["ground_truth"]]


def as_action(calls: list[dict], tools=()) -> Action:
    """Calls as a model makes them: keyword arguments only (a positional one named from the tool schema)."""
    order = {t["function"]["name"]: list(t["function"]["parameters"]["properties"]) for t in tools}
    return Action(text="", tool_calls=tuple(
        ToolCall(c["name"], {**dict(zip(order.get(c["name"], []), c.get("args", []))), **c["arguments"]}) for c in calls))


async def play(env, task, turns: list[list[dict]]) -> list:
    """Each user turn: its calls in one step, then a turn with no call. Returns every step's result."""
    steps = [None]
    await env.reset(task)
    for calls in turns:
        if calls:
            steps.append(await env.step(as_action(calls, task.metadata["tools"])))
        steps.append(await env.step(Action(text="done", content="done")))
    await env.close()
    return steps


def test_ground_truth_episode_runs_and_scores_full(sandbox, tasks):
    task = tasks["multi_turn_base_0"]  # GorillaFileSystem + TwitterAPI, four user turns
    turns = gt_turns(task)
    assert all("args" not in c for turn in turns[:2] for c in turn)
    env = make_env("bfcl", Resources(sandbox_factory=lambda: sandbox))

    async def main():
        messages = await env.reset(task)
        assert messages == list(task.prompt) and env.tools == task.metadata["tools"]
        first = await env.step(as_action(turns[0]))  # cd document, mkdir temp, mv final_report.pdf temp
        assert [o.name for o in first.observations] == ["cd", "mkdir", "mv"] and not first.done
        assert first.observations[0].content == '{"current_working_directory": "document"}'
        assert all(o.role == "tool" and not o.error for o in first.observations)
        nxt = await env.step(Action(text="Moved it.", content="Moved it."))
        assert not nxt.done and [o.role for o in nxt.observations] == ["user"]
        assert nxt.observations[0].content == task.reference["questions"][1][0]["content"]
        listing = await env.step(Action(text="", tool_calls=(ToolCall("cd", {"folder": "temp"}), ToolCall("ls", {}))))
        assert listing.observations[1].content == '{"current_directory_content": ["final_report.pdf"]}'
        await env.close()
        return env.state()

    state = asyncio.run(main())
    assert state == {"calls": [turns[0], [{"name": "cd", "arguments": {"folder": "temp"}}, {"name": "ls", "arguments": {}}]]}
    # the whole ground truth, played as an episode, ends done and scores 1
    steps = asyncio.run(play(env, task, turns))
    assert steps[-1].done and sum(1 for s in steps[1:] if s.done) == 1
    scores = env.score(task, env.state())
    assert [(s.value, s.verifier) for s in scores] == [(1.0, "env_score")], scores[0].details


def test_bad_calls_are_error_observations_not_crashes(sandbox, tasks):
    task = tasks["multi_turn_base_0"]
    env = make_env("bfcl", Resources(sandbox_factory=lambda: sandbox))

    async def main():
        await env.reset(task)
        try:
            return await env.step(Action(text="", errors=(ParseError("malformed", "unreadable <tool_call>"),), tool_calls=(
                ToolCall("no_such_tool", {}), ToolCall("mkdir", {"name": "x"}), ToolCall("mkdir", {"dir_name": 5}),
                ToolCall("ls", {}))))
        finally:
            await env.close()

    result = asyncio.run(main())
    assert [(o.error, o.name) for o in result.observations] == [
        ("malformed", ""), ("unknown_tool", "no_such_tool"), ("bad_arguments", "mkdir"), ("tool_failed", "mkdir"), ("", "ls")]
    assert all(o.content.startswith("Error (") for o in result.observations[:4])
    assert "dir_name" in result.observations[2].content
    # failed calls are kept in the state: a replay runs exactly what the episode ran
    assert len(env.state()["calls"][0]) == 4


def test_wrong_episodes_fail_the_state_check(sandbox, tasks):
    task = tasks["multi_turn_base_0"]
    turns = gt_turns(task)
    wrong_dir = [turns[0][:2] + [{"name": "mv", "arguments": {"source": "final_report.pdf", "destination": "archive"}}]] + turns[1:]
    got = score_state(sandbox, task.reference, {"calls": wrong_dir})
    assert got.value == 0.0 and got.details["error_type"] == "multi_turn:instance_state_mismatch"
    assert "GorillaFileSystem" in got.details["error"]
    skipped = score_state(sandbox, task.reference, {"calls": [turns[0], []] + turns[2:]})
    assert skipped.details["error_type"] == "multi_turn:empty_turn_model_response"
    short = score_state(sandbox, task.reference, {"calls": turns[:2]})
    assert short.value == 0.0 and short.details["error_type"] == "multi_turn:force_terminated"
    # same final state, but the grep result the user asked for in turn 1 was never fetched
    no_grep = [turns[0], [c for c in turns[1] if c["name"] != "grep"]] + turns[2:]
    missed = score_state(sandbox, task.reference, {"calls": no_grep})
    assert missed.details["error_type"] == "multi_turn:execution_response_mismatch"


def test_ground_truth_of_every_class_scores_full_and_a_dropped_call_does_not(sandbox, tasks):
    for task in one_task_per_class(tasks):  # MathAPI: mpmath shipped into the sandbox
        turns = gt_turns(task)
        assert score_state(sandbox, task.reference, {"calls": turns}).value == 1.0, task.id
        k = next(i for i, turn in enumerate(turns) if turn)
        dropped = [[] if i == k else t for i, t in enumerate(turns)]
        assert score_state(sandbox, task.reference, {"calls": dropped}).value == 0.0, task.id


def test_math_api_runs_with_mpmath(sandbox, tasks):
    task = next(t for t in tasks.values() if t.reference["involved_classes"] == ["MathAPI"] or "MathAPI" in t.reference["involved_classes"])
    env = make_env("bfcl", Resources(sandbox_factory=lambda: sandbox))

    async def main():
        await env.reset(task)
        try:
            return await env.step(Action(text="", tool_calls=(ToolCall("logarithm", {"value": 100, "base": 10, "precision": 5}),)))
        finally:
            await env.close()

    assert asyncio.run(main()).observations[0].content == "{'result': mpf('2.0')}"


def test_calls_over_the_time_limit_are_tool_timeouts_and_leave_the_state(sandbox, tasks):
    import dataclasses

    task = next(t for t in tasks.values() if {"MathAPI", "GorillaFileSystem"} <= set(t.reference["involved_classes"]))
    task = dataclasses.replace(task, limits=dataclasses.replace(task.limits, tool_timeout=1.5))
    env = make_env("bfcl", Resources(sandbox_factory=lambda: sandbox))
    kept = {"name": "mkdir", "arguments": {"dir_name": "kept_dir"}}
    log100 = {"name": "logarithm", "arguments": {"value": 100, "base": 10, "precision": 5}}

    async def main():
        await env.reset(task)
        try:
            made = await env.step(Action(text="", tool_calls=(ToolCall("mkdir", kept["arguments"]),)))
            slow = await env.step(Action(text="", tool_calls=(ToolCall("mkdir", {"dir_name": "dropped_dir"}), ToolCall(
                "logarithm", {"value": 3, "base": 7, "precision": 3_000_000}),)))  # mpmath at 3M digits
            after = await env.step(Action(text="", tool_calls=(ToolCall("logarithm", log100["arguments"]), ToolCall("ls", {}))))
            return made, slow, after
        finally:
            await env.close()

    made, slow, after = asyncio.run(main())
    assert not made.observations[0].error
    assert [o.error for o in slow.observations] == ["tool_timeout", "tool_timeout"] and not slow.done
    assert "1.5s" in slow.observations[0].content
    # the runner was killed and replaced by one replaying the kept mkdir only: the dropped one is gone too
    assert after.observations[0].content == "{'result': mpf('2.0')}"
    listing = json.loads(after.observations[1].content)["current_directory_content"]
    assert "kept_dir" in listing and "dropped_dir" not in listing
    assert env.state() == {"calls": [[kept, log100, {"name": "ls", "arguments": {}}]]}


def test_env_score_verifier_scores_the_saved_state(sandbox, tasks, monkeypatch):
    import posttrain.envs.score as env_score

    monkeypatch.setattr(env_score, "_resources", Resources(sandbox_factory=lambda: sandbox))
    task = tasks["multi_turn_base_1"]
    traj = Trajectory(task_id=task.id, token_ids=(), loss_mask=(), logprobs=(), prompt_len=0,
                      final_state={"calls": gt_turns(task)})
    scores, failures = run_verifiers(task, traj)
    assert not failures and [s.value for s in scores] == [1.0]


def _call_string(call: dict) -> str:
    parts = [repr(a) for a in call.get("args", [])] + [f"{k}={v!r}" for k, v in call["arguments"].items()]
    return f"{call['name']}({', '.join(parts)})"


def _variants(turns: list[list[dict]]) -> dict[str, list[list[dict]]]:
    """The ground truth and episodes that differ from it: a call dropped or doubled, a turn's calls late or early."""
    k = next(i for i, turn in enumerate(turns) if turn)
    out = {"truth": turns,
           "drop_last": [t[:-1] if i == k else t for i, t in enumerate(turns)],
           "drop_first": [t[1:] if i == k else t for i, t in enumerate(turns)],
           "doubled": [t + t if i == k else t for i, t in enumerate(turns)]}
    if len(turns) > 1:
        out["late"] = [[]] + [turns[0] + turns[1]] + turns[2:]
        out["early"] = [turns[0] + turns[1]] + [[]] + turns[2:]
    return out


def test_verdicts_equal_bfcls_multi_turn_checker(sandbox, tasks, tmp_path):
    picked: dict[str, object] = {}
    for task in tasks.values():
        picked.setdefault(tuple(sorted(task.reference["involved_classes"])), task)
    cases = []
    for task in list(picked.values())[:12]:
        ref = task.reference
        for label, turns in _variants(gt_turns(task)).items():
            cases.append({"id": ref["id"], "label": label, "involved_classes": ref["involved_classes"],
                          "initial_config": ref["initial_config"], "ground_truth": ref["ground_truth"],
                          "ours": turns, "calls": [[_call_string(c) for c in turn] for turn in turns]})
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    script = Path(__file__).resolve().parents[2] / "scripts" / "bfcl_reference_verdicts.py"
    proc = subprocess.run([sys.executable, str(script), "--multi-turn", str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reference = json.loads(proc.stdout)
    got = []
    for case in cases:
        score = score_state(sandbox, case, {"calls": case["ours"]})
        got.append({"valid": score.value == 1.0, "error_type": "" if score.value == 1.0 else score.details["error_type"]})
    differ = [(c["id"], c["label"], g, r) for c, g, r in zip(cases, got, reference) if g != r]
    print(f"\nbfcl env vs BFCL multi_turn_checker: {len(cases) - len(differ)}/{len(cases)} verdicts equal")
    assert not differ, differ
    kinds = {r["error_type"] for r in reference}
    assert {"", "multi_turn:empty_turn_model_response", "multi_turn:instance_state_mismatch"} <= kinds


class _Broken:
    def __init__(self, error: bool) -> None:
        self.error = error

    def run(self, request):
        if self.error:
            raise SandboxError("pool is closed")
        from posttrain.sandbox import CommandResult, RunResult, Status

        return RunResult(compile=None, run=CommandResult(Status.FINISHED, 0, "no report here\n", "", 0.0, 0.0))


@pytest.mark.parametrize("error", [True, False])
def test_scoring_sandbox_failure_is_infra_error(tasks, error):
    task = tasks["multi_turn_base_0"]
    env = make_env("bfcl", Resources(sandbox_factory=lambda: _Broken(error)))
    with pytest.raises(InfraError):
        env.score(task, {"calls": gt_turns(task)})


def test_ground_truths_played_through_reset_step_score_score_full(sandbox, tasks):
    env = make_env("bfcl", Resources(sandbox_factory=lambda: sandbox))
    for task in one_task_per_class(tasks):
        steps = asyncio.run(play(env, task, gt_turns(task)))
        assert steps[-1].done, task.id
        assert any(o.role == "tool" and not o.error for s in steps[1:] for o in s.observations), task.id
        scores = env.score(task, env.state())
        assert [s.value for s in scores] == [1.0], (task.id, scores[0].details)


def _with_bad_calls(turns: list[list[dict]]) -> list[list[dict]]:
    """The ground truth plus an unknown tool and a call with an argument its method does not take."""
    k = next(i for i, turn in enumerate(turns) if turn)
    bad = [{"name": "no_such_tool", "arguments": {}},
           {"name": turns[k][0]["name"], "arguments": {**turns[k][0]["arguments"], "bogus": 1}}]
    return [t[:1] + bad + t[1:] if i == k else t for i, t in enumerate(turns)]


def test_persistent_runner_gives_what_a_fresh_replay_gives(sandbox, tasks):
    iso = shared_isolation(UID, UID)

    async def through_session(task, turns):
        session = BfclSession(task.reference, isolation=iso, cpu_seconds=60)
        try:  # the first question's calls one per step, each later question's in one step
            got = [[o for c in turns[0] for o in await session.call([c], 30.0)]]
            got += [await session.call(turn, 30.0) if turn else [] for turn in turns[1:]]
            return got, await session.snapshot(), session.restarts
        finally:
            await session.close()

    for task in one_task_per_class(tasks):
        turns = _with_bad_calls(gt_turns(task))  # positional "args" included: the runner takes them as BFCL does
        got, live, restarts = asyncio.run(through_session(task, turns))
        fresh = run_calls(sandbox, task.reference, {"model": turns, "untouched": []}, snapshot=True)
        assert restarts == 0, task.id
        assert got == fresh["runs"]["model"], task.id
        assert {o["kind"] for turn in got for o in turn} >= {"", "unknown_tool", "bad_arguments"}, task.id
        assert live == fresh["states"]["model"], task.id
        assert live != fresh["states"]["untouched"], task.id  # the calls changed what the snapshot shows
        assert " at 0x" not in json.dumps(live), task.id  # reprs of values, not of addresses


def test_the_runner_lives_through_the_episode_and_close_leaves_nothing(tasks):
    env = BfclEnv(Resources(), isolation=shared_isolation(UID, UID))

    async def main():
        await env.reset(tasks["multi_turn_base_0"])
        await env.step(Action(text="", tool_calls=(ToolCall("cd", {"folder": "document"}),)))
        first = runner_pids()
        await env.step(Action(text="", tool_calls=(ToolCall("ls", {}),)))
        second = runner_pids()
        await env.close()
        return first, second

    first, second = asyncio.run(main())
    assert len(first) == 1 and second == first  # one process answered both steps
    if UID != os.getuid():
        from tests.sandbox.procs import processes_of

        assert processes_of(UID) == []
    assert [d for d in os.listdir(work_root()) if d.startswith("ep-")] == []


def test_a_killed_runner_is_restarted_by_replay(tasks):
    env = BfclEnv(Resources(), isolation=shared_isolation(UID, UID))

    async def main():
        await env.reset(tasks["multi_turn_base_0"])
        try:
            await env.step(Action(text="", tool_calls=(ToolCall("cd", {"folder": "document"}),)))
            before = runner_pids()
            for pid in before:
                os.kill(pid, signal.SIGKILL)
            after = await env.step(Action(text="", tool_calls=(ToolCall("pwd", {}),)))
            return before, runner_pids(), after
        finally:
            await env.close()

    before, now, after = asyncio.run(main())
    assert len(before) == 1 and len(now) == 1 and now != before
    assert after.observations[0].content == '{"current_working_directory": "/workspace/document"}'
    assert env.state()["calls"] == [[{"name": "cd", "arguments": {"folder": "document"}},
                                     {"name": "pwd", "arguments": {}}]]


GARBAGE = "import sys\nsys.stdin.readline()\nprint('{\"ready\": true}', flush=True)\nfor line in sys.stdin:\n" \
          "    print('garbage text', flush=True)\n"
NO_START = "import sys\nsys.exit('the runner cannot start: no classes here')\n"


@pytest.mark.parametrize("runner, match, restarts", [(GARBAGE, "broke again after a restart.*garbage text", 1),
                                                      (NO_START, "did not come up.*no classes here", 0)])
def test_a_runner_that_stays_broken_is_infra_error(tasks, monkeypatch, runner, match, restarts):
    fake = tempfile.mkdtemp(prefix="bfcl-fake-", dir=work_root())
    os.chmod(fake, 0o755)
    Path(fake, "bfcl_runner.py").write_text(runner)
    os.chmod(Path(fake, "bfcl_runner.py"), 0o644)
    monkeypatch.setattr(bfcl_session, "lib_dir", lambda mpmath: fake)
    session = BfclSession(tasks["multi_turn_base_0"].reference, isolation=shared_isolation(UID, UID), cpu_seconds=60)

    async def main():
        try:
            with pytest.raises(InfraError, match=match):
                await session.call([{"name": "ls", "arguments": {}}], 10.0)
        finally:
            await session.close()

    asyncio.run(main())
    assert session.restarts == restarts and session.history == [] and runner_pids() == []


def test_results_over_the_reply_limit_are_dropped_and_the_runner_replays(tasks, monkeypatch):
    monkeypatch.setattr(bfcl_session, "READ_LIMIT_BYTES", 160)  # an ls of /workspace/document passes it, a pwd does not
    session = BfclSession(tasks["multi_turn_base_0"].reference, isolation=shared_isolation(UID, UID), cpu_seconds=60)
    cd = {"name": "cd", "arguments": {"folder": "document"}}

    async def main():
        try:
            await session.call([cd], 10.0)
            with pytest.raises(bfcl_session.StepLimitError, match="reply limit"):
                await session.call([{"name": "touch", "arguments": {"file_name": "x.txt"}}, {"name": "ls", "arguments": {}}], 10.0)
            assert runner_pids() == []  # killed at once
            return [(await session.call([c], 10.0))[0] for c in after]
        finally:
            await session.close()

    after = [{"name": "pwd", "arguments": {}}, {"name": "find", "arguments": {"name": "x.txt"}}]
    pwd, found = asyncio.run(main())
    assert pwd["result"] == '{"current_working_directory": "/workspace/document"}'  # the kept cd was replayed
    assert json.loads(found["result"]) == {"matches": []}  # the dropped touch was not
    assert session.restarts == 1 and [c for c, _ in session.history] == [cd, *after]
