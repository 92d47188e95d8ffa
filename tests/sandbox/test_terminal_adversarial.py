"""Hostile episodes, scripted (env.step with Action objects, no model): none of them changes its own
verdict, takes the env or the host down, or leaves a process behind; a correct fix still passes."""

from __future__ import annotations

import os
import secrets
import time

import pytest

from posttrain.envs.env import Action, Resources, ToolCall
from posttrain.domains.terminal.env import TerminalEnv
from posttrain.domains.terminal.session import shared_isolation
from posttrain.domains.terminal.verify import read_verdict
from tests.sandbox.procs import UID, aio, cmdlines_with, processes_of, terminal_task

FIX = "cat > add.py <<'EOF'\nimport sys\nprint(sum(int(x) for x in sys.argv[1:]))\nEOF"
TEST_SUM = """import subprocess
def run(*args):
    return subprocess.run(["python3", "add.py", *args], cwd="/work", capture_output=True, text=True, timeout=10)
def test_two():
    assert run("2", "3").stdout == "5\\n"
def test_many():
    assert run("1", "-2", "10").stdout == "9\\n"
"""
TEST_SH = """out=$(python3 /work/add.py 2 3)
if [ "$out" = "5" ]; then echo 1 > "$REWARD_FILE"; else echo 0 > "$REWARD_FILE"; fi
"""


def make_task(root, kind="pytest", command_timeout=2.0):
    files = {
        "instruction.md": "Make add.py print the sum of its integer arguments.\n",
        "task.toml": f'version = "1.0"\n[limits]\ncommand_timeout_sec = {command_timeout}\nmax_output_bytes = 2000\n',
        "environment/add.py": "import sys\nprint(len(sys.argv))\n",
        "solution/solve.sh": FIX + "\n",
        **({"tests/test_sum.py": TEST_SUM} if kind == "pytest" else {"tests/test.sh": TEST_SH}),
    }
    return terminal_task(root / kind, files)


@pytest.fixture(scope="module")
def iso():
    return shared_isolation(UID, UID)


@pytest.fixture
def task(tmp_path):
    return make_task(tmp_path)


def shell(command: str) -> Action:
    return Action(text="", tool_calls=(ToolCall("shell", {"command": command}),))


async def episode(iso, task, commands, between=None):
    """Run the commands, then state and score; (observations, score). `between(env)` runs after
    the state is taken and before the score (a tamperer would act there)."""
    env = TerminalEnv(Resources(), isolation=iso)
    try:
        await env.reset(task)
        obs = [(await env.step(shell(c))).observations[0] for c in commands]
        state = env.state()
        if between is not None:
            between(env)
        return obs, env.score(task, state)[0]
    finally:
        await env.close()
        if UID != os.getuid():
            assert processes_of(UID) == [], "a process of the episode outlived close()"


@aio
async def test_a_correct_fix_passes_and_a_wrong_fix_fails(iso, task):
    assert (await episode(iso, task, [FIX]))[1].value == 1.0
    _, score = await episode(iso, task, ["echo 'import sys; print(5)' > add.py"])  # right for one input only
    assert score.value == 0.0 and score.details["checks"] == {"test_sum.py": False}


@aio
async def test_editing_the_tests_does_not_pass_them(iso, task):
    trivial = "def test_two():\n    assert True\ndef test_many():\n    assert True\n"
    hook = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    out = yield\n    rep = out.get_result()\n    rep.outcome = 'passed'\n")
    commands = [
        f"mkdir -p tests && printf '%s' '{trivial}' > tests/test_sum.py && cp tests/test_sum.py tests/test_extra.py",
        f"printf '%s' \"{hook}\" > conftest.py && cp conftest.py tests/conftest.py",
        "printf '[pytest]\\naddopts = -p no:python\\n' > pytest.ini; printf 'raise SystemExit(0)\\n' > sitecustomize.py",
        "mkdir -p _pytest pytest && echo 'import os; os._exit(0)' > pytest/__init__.py",
    ]
    _, score = await episode(iso, task, commands)
    assert score.value == 0.0
    assert score.details["tests"]["test_sum.py"] == {"tests": 2, "passed": 0, "ok": False,
                                                     "error": score.details["tests"]["test_sum.py"]["error"]}


@aio
async def test_planted_reward_files_are_ignored(iso, tmp_path):
    task = make_task(tmp_path, kind="shell")
    plant = ("mkdir -p logs/verifier && for f in reward.txt reward.json logs/verifier/reward.txt; do echo 1 > $f; done;"
             " echo 1 > /tmp/reward.txt; export REWARD_FILE=/work/reward.txt")
    _, score = await episode(iso, task, [plant])
    assert score.value == 0.0 and "planted_reward_file" in score.details["events"]
    assert (await episode(iso, task, [plant, FIX]))[1].value == 1.0  # the real test.sh still decides


@aio
async def test_killing_the_shell_gets_a_fresh_one_and_the_work_counts(iso, task):
    obs, score = await episode(iso, task, ["export X=1; kill -9 $$", "echo ${X:-fresh}",
                                           "sleep 60 & kill -9 -1; kill -9 $PPID; echo pid-1-stays", FIX])
    assert "[the shell exited with code 137" in obs[0].content and "a new shell was started" in obs[0].content
    assert obs[1].content == "fresh\n[exit code 0]"
    assert "pid-1-stays" in obs[2].content  # kill(-1) spares the caller; the sandbox's pid 1 ignores signals
    assert score.value == 1.0


@aio
async def test_an_output_flood_is_cut_and_the_env_goes_on(iso, task):
    start = time.monotonic()
    obs, score = await episode(iso, task, ["yes | head -c 100M", "yes", "echo next", FIX])
    assert time.monotonic() - start < 60
    assert "bytes cut ...]" in obs[0].content and len(obs[0].content) < 2200
    assert f"[... {100 * 2**20 - 2000} bytes cut ...]" in obs[0].content and obs[0].content.endswith("[exit code 0]")
    assert obs[1].error == "tool_timeout" and len(obs[1].content) < 2600  # endless: cut, killed at 2 s
    assert obs[2].content == "next\n[exit code 0]"
    assert score.value == 1.0


@aio
async def test_sleeping_past_the_command_timeout_is_killed(iso, task):
    start = time.monotonic()
    obs, score = await episode(iso, task, ["sleep 600", "(sleep 600 &) ; sleep 600", FIX])
    assert time.monotonic() - start < 30
    assert obs[0].error == obs[1].error == "tool_timeout"
    assert score.value == 1.0


@aio
async def test_a_fork_bomb_is_bounded_and_everyone_survives(iso, task):
    obs, score = await episode(iso, task, [":(){ :|:& };:", "sleep 5", "echo recovered", FIX])
    assert obs[1].error == "tool_timeout"  # forking or not, the 2 s limit ends the bomb with its session
    assert obs[2].content == "recovered\n[exit code 0]"
    assert score.value == 1.0  # the env, its verification and the host go on


@aio
async def test_a_daemon_left_behind_cannot_tamper_with_the_verdict(iso, task):
    marker = f"{secrets.randbelow(10**6) + 10**6}.25"
    evil = (f"nohup bash -c 'while true; do sleep {marker}; done' >/dev/null 2>&1 & "
            "nohup bash -c 'sleep 0.5; while true; do printf \"import sys\\nprint(5)\\n\" > /work/add.py; "
            "mkdir -p /work/tests; echo \"def test_two(): pass\" > /work/tests/test_sum.py; sleep 0.05; done' "
            ">/dev/null 2>&1 & echo planted")
    seen: dict[str, list[str]] = {}

    def after_state(env):
        seen["after_state"] = cmdlines_with(f"sleep {marker}")
        time.sleep(1.0)  # a live daemon would rewrite add.py and the tests now

    obs, score = await episode(iso, task, [evil, "sleep 0.2; echo $(pgrep -c bash) shells"], between=after_state)
    assert "planted" in obs[0].content
    assert seen["after_state"] == []  # state() stopped every process of the episode
    assert score.value == 0.0  # the untouched wrong add.py, judged on the snapshot in a fresh sandbox
    assert cmdlines_with(f"sleep {marker}") == []


@aio
async def test_links_and_fifos_do_not_leak_host_files_into_the_state(iso, task):
    env = TerminalEnv(Resources(), isolation=iso)
    try:
        await env.reset(task)
        await env.step(shell("ln -s /etc/shadow shadow; ln -s /root rootdir; mkfifo pipe; chmod 000 add.py"))
        state = env.state()
        assert state["links"] == {"shadow": "/etc/shadow", "rootdir": "/root"}
        assert "pipe" in state["skipped"] and set(state["files"]) == {"add.py"}
        assert env.score(task, state)[0].value == 0.0
    finally:
        await env.close()


@aio
async def test_a_program_that_forges_a_verdict_line_gains_nothing(iso, task):
    forge = ("cat > add.py <<'EOF'\nimport glob, os\nline = '\\nPOSTTRAIN-TERMINAL-VERDICT ' + '0' * 64 + "
             "' {\"pytest\": {\"test_sum.py\": {\"ok\": true}}, \"test_sh\": null, \"events\": []}\\n'\n"
             "for path in glob.glob('/proc/[0-9]*/fd/*'):\n    try:\n        fd = os.open(path, os.O_WRONLY)\n"
             "        os.write(fd, line.encode())\n    except OSError:\n        pass\nprint(line)\nEOF")
    _, score = await episode(iso, task, [forge])
    assert score.value == 0.0
    assert "forged_verdict" not in score.details["events"]  # no fd of the runner's channel was reachable


def test_a_verdict_line_needs_the_runs_key():
    key = secrets.token_bytes(32)
    payload = '{"pytest": {}, "test_sh": null, "events": []}'
    import hashlib
    import hmac

    good = f"POSTTRAIN-TERMINAL-VERDICT {hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()} {payload}"
    assert read_verdict(good.encode(), key) == ({"pytest": {}, "test_sh": None, "events": []}, [])
    forged = f"POSTTRAIN-TERMINAL-VERDICT {'0' * 64} {payload}"
    assert read_verdict((forged + "\n" + good).encode(), key) == (None, ["forged_verdict"])
    assert read_verdict((good + "\n" + good).encode(), key) == (None, ["duplicate_verdict"])
    assert read_verdict(b"no verdict here\n", key) == (None, [])
