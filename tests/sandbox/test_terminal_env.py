"""TerminalEnv end to end in the real sandbox: reset, tool calls and their errors, state, scoring from
the state alone (pytest files, staged checks, test.sh), setup.sh, identical starts, InfraError."""

from __future__ import annotations

import base64
import json
import os

import pytest

from posttrain.envs.env import Action, InfraError, ParseError, ToolCall, make_env, Resources
from posttrain.domains.terminal.env import SYSTEM_PROMPT, TerminalEnv
from posttrain.domains.terminal.session import shared_isolation
from posttrain.tasks.registry import make_source_tasks
from tests.sandbox.procs import UID, aio

PROGRAM = "import sys\nprint(sum(int(x) for x in sys.argv[1:]))\n"
TEST_SUM = """import subprocess
def run(*args):
    return subprocess.run(["python3", "add.py", *args], cwd="/work", capture_output=True, text=True, timeout=10)
def test_two():
    assert run("2", "3").stdout == "5\\n"
def test_none():
    assert run().stdout == "0\\n"
"""
TEST_NOTES = """import pathlib
def test_notes():
    assert pathlib.Path("/work/notes.txt").read_text() == "done\\n"
"""


def write_task(root, name="adder", toml='version = "1.0"\n[limits]\ncommand_timeout_sec = 3.0\n', files=None):
    files = {
        "instruction.md": "Make add.py print the sum of its arguments.\n",
        "task.toml": toml,
        "environment/add.py": "import sys\nprint(sys.argv[1:])\n",
        "solution/solve.sh": f"cat > add.py <<'EOF'\n{PROGRAM}EOF\n",
        "tests/test_sum.py": TEST_SUM,
        **(files or {}),
    }
    for rel, text in files.items():
        full = root / name / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return root / name


def task_of(path):
    (task,) = make_source_tasks("terminal", n=None, seed=0, options={"dir": str(path)})
    return task


def call(command=None, name="shell", **args):
    arguments = {"command": command, **args} if command is not None else args
    return Action(text="", tool_calls=(ToolCall(name, arguments),))


@pytest.fixture(scope="module")
def iso():
    return shared_isolation(UID, UID)


def env_for(iso, **kw):
    return TerminalEnv(Resources(), isolation=iso, **kw)


async def play(iso, task, commands, **kw):
    """(observations of each command, state, score) of one scripted episode."""
    env = env_for(iso, **kw)
    try:
        await env.reset(task)
        obs = [(await env.step(call(c))).observations[0] for c in commands]
        state = env.state()
        return obs, state, env.score(task, state)[0]
    finally:
        await env.close()


@aio
async def test_reset_gives_the_system_message_and_the_instruction(tmp_path, iso):
    task = task_of(write_task(tmp_path))
    env = env_for(iso)
    try:
        messages = await env.reset(task)
        assert messages == [{"role": "system", "content": SYSTEM_PROMPT},
                            {"role": "user", "content": "Make add.py print the sum of its arguments.\n"}]
        assert "/work" in SYSTEM_PROMPT and "shell" in SYSTEM_PROMPT
        (tool,) = env.tools
        assert tool["function"]["name"] == "shell" and tool["function"]["parameters"]["required"] == ["command"]
        res = await env.step(call("python3 add.py 1 2; ls"))
        assert res.observations[0].content == "['1', '2']\nadd.py\n[exit code 0]" and not res.done
        assert res.info["commands"] == 1 and res.info["env_seconds"] > 0
        res = await env.step(call("test -e /solution || echo no-solution-here"))
        assert res.observations[0].content == "no-solution-here\n[exit code 0]"  # only the oracle run sees it
        res = await env.step(Action(text="I am done.", content="I am done."))
        assert res.done and res.observations == []
    finally:
        await env.close()


@aio
async def test_bad_tool_calls_are_error_observations_and_run_nothing(tmp_path, iso):
    task = task_of(write_task(tmp_path))
    env = env_for(iso)
    try:
        await env.reset(task)
        turn = Action(text="", tool_calls=(
            ToolCall("python", {"code": "print(1)"}), ToolCall("shell", {}), ToolCall("shell", {"command": 7}),
            ToolCall("shell", {"command": "touch made", "timeout": 5}), ToolCall("shell", {"command": "ls"})),
            errors=(ParseError("malformed", "the tool call is not valid JSON", "<tool_call>{"),))
        res = await env.step(turn)
        kinds = [o.error for o in res.observations]  # the parse error is the loop's to report (episode.py)
        assert kinds == ["unknown_tool", "bad_arguments", "bad_arguments", "bad_arguments", ""]
        assert "shell(command)" in res.observations[0].content and "'timeout'" in res.observations[3].content
        assert res.observations[4].content == "add.py\n[exit code 0]"  # nothing of the bad calls ran
        assert not res.done and res.info["commands"] == 1
        only_errors = await env.step(Action(text="", errors=(ParseError("malformed", "bad"),)))
        assert not only_errors.done and only_errors.observations == []  # a turn that tried to call a tool does not end the episode
    finally:
        await env.close()


@aio
async def test_a_command_past_its_timeout_is_a_tool_timeout_with_partial_output(tmp_path, iso):
    task = task_of(write_task(tmp_path))
    obs, _, _ = await play(iso, task, ["export A=1; echo started; sleep 20", "echo ${A:-reset}"])
    assert obs[0].error == "tool_timeout" and "within 3s" in obs[0].content and "started" in obs[0].content
    assert "a new shell was started" in obs[0].content
    assert obs[1].content == "reset\n[exit code 0]"


@aio
async def test_state_is_json_and_scores_again_in_a_new_env(tmp_path, iso):
    task = task_of(write_task(tmp_path))
    solve = f"cat > add.py <<'EOF'\n{PROGRAM}EOF\nmkdir -p out; printf 'x' > out/f; chmod 700 out; ln -s add.py link"
    _, state, score = await play(iso, task, [solve])
    state = json.loads(json.dumps(state))
    assert base64.b64decode(state["files"]["add.py"]["data"]).decode() == PROGRAM
    assert state["links"] == {"link": "add.py"} and state["dirs"]["out"] == 0o700
    assert state["task_dir"] == task.reference["task_dir"] and not state["over_cap"]
    assert score.value == 1.0 and score.details["checks"] == {"test_sum.py": True}
    assert score.details["tests"]["test_sum.py"]["passed"] == 2
    again = env_for(iso).score(task, state)[0]  # from the saved state alone, no episode
    assert again.value == 1.0
    wrong = dict(state, files={**state["files"], "add.py": {"data": base64.b64encode(b"print(0)\n").decode(), "mode": 0o644}})
    failed = env_for(iso).score(task, wrong)[0]
    assert failed.value == 0.0 and failed.details["checks"] == {"test_sum.py": False}
    assert "test_two" in failed.details["error"] and "assert" in failed.details["error"]


@aio
async def test_staged_checks_give_partial_reward(tmp_path, iso):
    toml = ('version = "1.0"\n[[checks]]\nname = "sum"\ntests = ["test_sum.py"]\nweight = 3.0\n'
            '[[checks]]\nname = "notes"\ntests = ["test_notes.py"]\nweight = 1.0\n')
    task = task_of(write_task(tmp_path, toml=toml, files={"tests/test_notes.py": TEST_NOTES}))
    fix = f"cat > add.py <<'EOF'\n{PROGRAM}EOF"
    assert (await play(iso, task, [fix]))[2].value == 0.75
    _, _, score = await play(iso, task, ["echo done > notes.txt"])
    assert score.value == 0.25 and score.details["checks"] == {"sum": False, "notes": True}
    assert (await play(iso, task, [fix, "echo done > notes.txt"]))[2].value == 1.0


@pytest.mark.parametrize("written, reward, event", [
    ("0.4", 0.4, None), ("1", 1.0, None), ("1.5", 0.0, "bad_reward"), ("nan", 0.0, "bad_reward"),
    ("0.5 0.5", 0.0, "bad_reward"), ("", 0.0, "bad_reward"),
])
@aio
async def test_test_sh_writes_the_reward(tmp_path, iso, written, reward, event):
    sh = f'test -f /work/add.py || exit 1\nprintf "%s" "{written}" > "$REWARD_FILE"\n'
    path = write_task(tmp_path, files={"tests/test.sh": sh})
    os.remove(path / "tests" / "test_sum.py")
    _, _, score = await play(iso, task_of(path), [])
    assert score.value == reward
    assert (event in score.details["events"]) if event else score.details["events"] == []


@aio
async def test_every_episode_starts_from_the_same_bytes_and_setup_runs_unseen(tmp_path, iso):
    setup = "echo SETUP-OUTPUT; mkdir -p data; seq 1 5 > data/numbers.txt; chmod +x add.py\n"
    task = task_of(write_task(tmp_path, files={"environment/setup.sh": setup}))
    states = []
    for _ in range(2):
        obs, state, _ = await play(iso, task, ["ls; cat data/numbers.txt | wc -l"])
        assert obs[0].content == "add.py\ndata\n5\n[exit code 0]"  # setup.sh ran and is gone, its output unseen
        states.append(state)
    assert states[0]["files"] == states[1]["files"] and states[0]["files"]["add.py"]["mode"] & 0o100


@aio
async def test_a_failing_setup_sh_is_an_error_naming_the_file(tmp_path, iso):
    task = task_of(write_task(tmp_path, files={"environment/setup.sh": "echo broken >&2; exit 4\n"}))
    env = env_for(iso)
    with pytest.raises(RuntimeError, match=r"environment/setup.sh exited with code 4: broken"):
        await env.reset(task)
    await env.close()


@aio
async def test_a_state_over_the_cap_scores_zero_with_an_event(tmp_path, iso):
    task = task_of(write_task(tmp_path))
    _, state, score = await play(iso, task, [f"cat > add.py <<'EOF'\n{PROGRAM}EOF\nhead -c 17M /dev/zero > big"])
    assert state["over_cap"] and state["files"] == {}
    assert score.value == 0.0 and score.details["events"] == ["state_over_cap", "workspace_refused"]
    assert score.details["error"].startswith("workspace refused: the final files exceed")


def test_the_registry_makes_a_terminal_env():
    env = make_env("terminal", Resources())
    assert isinstance(env, TerminalEnv) and env.tools[0]["function"]["name"] == "shell"


@aio
async def test_a_sandbox_that_cannot_start_is_an_infra_error(tmp_path, iso):
    task = task_of(write_task(tmp_path))

    class NoBwrap:
        def command(self, argv, work_dir, limits, ro_binds=(), rw_binds=()):
            return ["/nonexistent/bwrap", *argv], "/"

        def prepare_work_dir(self, path):
            iso.prepare_work_dir(path)

    env = TerminalEnv(Resources(), isolation=NoBwrap())
    with pytest.raises(InfraError, match="could not start bwrap"):
        await env.reset(task)
    await env.close()
    with pytest.raises(InfraError, match="terminal verifier"):
        TerminalEnv(Resources(), isolation=NoBwrap()).score(task, {"task_dir": task.reference["task_dir"], "files": {}})


def test_a_scripted_model_solves_a_task_through_the_episode_loop(tmp_path, tiny_tokenizer):
    from posttrain.envs.rollout import rollout
    from posttrain.envs.tools.parsers import get_parser
    from posttrain.core.types import SamplingParams
    from posttrain.verifiers.registry import get_verifier
    from tests.unit.envs.scripted import TurnScript

    task = task_of(write_task(tmp_path))
    hermes = get_parser("hermes")
    fix = f"cat > add.py <<'EOF'\n{PROGRAM}EOF"
    script = {5: [hermes.format_calls([ToolCall("shell", {"command": "python3 add.py 2 3"}, "call_0")], ""),
                  hermes.format_calls([ToolCall("shell", {"command": fix}, "call_0")], "fixing"), "Done."],
              9: [hermes.format_calls([ToolCall("shell", {"command": "echo 'print(5)' > add.py"}, "call_0")], ""),
                  "Done."]}
    engine = TurnScript(tiny_tokenizer, script)
    params = SamplingParams(temperature=1.0, max_tokens=512)
    (good,), (bad,) = rollout(engine, tiny_tokenizer, [task, task], [1, 1], params, [5, 9], version=1, parser="hermes")
    assert (good.stop_reason, good.turns, bad.stop_reason, bad.turns) == ("done", 3, "done", 2)
    assert good.stats["tool_calls"] == 2 and good.stats["env_seconds"] > 0
    assert tiny_tokenizer.decode(list(good.token_ids)).count("['2', '3']") == 1  # the first command's output
    env_score = get_verifier("env_score")  # the score re-run from each trajectory's final state
    assert env_score(task, good).value == 1.0
    assert env_score(task, bad).value == 0.0
