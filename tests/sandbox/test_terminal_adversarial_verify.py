"""Hostile episodes against the VERIFIER (issue 31): each class that once got a terminal episode paid
without the work, now reward 0 with the right stop reason; honest controls still pass.

The episode-phase attacks (floods, fork bombs, sleeping daemons in the episode's shell, forged
verdict lines) are in test_terminal_adversarial.py; here the attacks aim at verification: code the
runner might load, the reward channel, processes that outlive a phase, links to what the verifier
mounts, and workspaces built to make verification fail."""

from __future__ import annotations

import pytest

from posttrain.domains.terminal.session import shared_isolation
from tests.sandbox.procs import UID, aio, terminal_task
from tests.sandbox.test_terminal_adversarial import FIX, episode, make_task

CORRECT = "import sys\nprint(sum(int(x) for x in sys.argv[1:]))\n"
# add.py that answers only (2, 3) and, when the tests run it, spawns a daemon that installs the
# correct add.py 0.2 s later: only a process outliving its test can make the slow second test pass
PHASED_TESTS = """import subprocess, time
def run(*args):
    return subprocess.run(["python3", "add.py", *args], cwd="/work", capture_output=True, text=True, timeout=10)
def test_two():
    assert run("2", "3").stdout == "5\\n"
def test_many():
    time.sleep(0.6)
    assert run("1", "-2", "10").stdout == "9\\n"
"""
EXPECTED_TESTS = """from pathlib import Path
def test_out():
    assert Path("/work/out.txt").read_text() == (Path(__file__).parent / "expected.txt").read_text()
"""


def heredoc(path: str, text: str) -> str:
    return f"cat > {path} <<'EOF_X'\n{text}EOF_X"


@pytest.fixture(scope="module")
def iso():
    return shared_isolation(UID, UID)


def folder_task(root, name, tests: dict[str, str]):
    files = {"instruction.md": "Make add.py print the sum of its integer arguments.\n",
             "task.toml": 'version = "1.0"\n[limits]\ncommand_timeout_sec = 5.0\n',
             "environment/add.py": "print(0)\n", "solution/solve.sh": FIX + "\n",
             **{f"tests/{k}": v for k, v in tests.items()}}
    return terminal_task(root / name, files)


# -- honest controls ------------------------------------------------------------------------------
@aio
async def test_honest_controls_pass(iso, tmp_path):
    assert (await episode(iso, make_task(tmp_path, "pytest"), [FIX]))[1].value == 1.0
    assert (await episode(iso, make_task(tmp_path, "shell"), [FIX]))[1].value == 1.0
    expected = folder_task(tmp_path, "expected", {"test_out.py": EXPECTED_TESTS, "expected.txt": "42\n"})
    links_inside = "mkdir -p real && echo 42 > real/out && ln -s real/out out.txt && ln -s /usr/bin/python3 py"
    assert (await episode(iso, expected, [links_inside]))[1].value == 1.0  # links inside /work or to /usr are fine


# -- code of the workspace in the trusted runner ----------------------------------------------------
@aio
async def test_conftest_init_and_shadowing_modules_in_the_workspace_never_load(iso, tmp_path):
    task = make_task(tmp_path, "pytest")
    hook = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    out = yield\n    out.get_result().outcome = 'passed'\n")
    commands = [heredoc("conftest.py", hook), "mkdir -p tests && cp conftest.py tests/conftest.py && "
                "touch __init__.py tests/__init__.py && cp conftest.py pytest_plugin.py",
                heredoc("subprocess.py", "def run(*a, **k):\n    class R: stdout = '5\\n'\n    return R()\n"),
                "cp subprocess.py tests/subprocess.py && printf '[pytest]\\naddopts = -p pytest_plugin\\n' > pytest.ini"]
    _, score = await episode(iso, task, commands)
    assert score.value == 0.0 and score.details["checks"] == {"test_sum.py": False}
    assert score.details["tests"]["test_sum.py"]["tests"] == 2  # the real tests ran, and failed


@aio
async def test_home_usercustomize_and_pth_files_do_not_reach_the_runner(iso, tmp_path):
    task = make_task(tmp_path, "pytest")
    evil = "import builtins; builtins.__import__ = None\n"
    site = ".local/lib/python3.11/site-packages"
    commands = [f"mkdir -p {site} && echo '{evil}' > {site}/usercustomize.py && echo 'import os; os._exit(0)' > "
                f"{site}/evil.pth && cp {site}/usercustomize.py sitecustomize.py && cp {site}/evil.pth evil.pth",
                "echo 'export PYTHONPATH=/work PYTHONSTARTUP=/work/sitecustomize.py' > .bashrc"]
    _, score = await episode(iso, task, commands)
    assert score.value == 0.0 and score.details["tests"]["test_sum.py"]["tests"] == 2
    assert "no_verdict" not in score.details["events"]


# -- the reward channel ---------------------------------------------------------------------------
GRAB_REWARD = """import glob, os, sys
for env in glob.glob('/proc/[0-9]*/environ'):
    try:
        for var in open(env, 'rb').read().split(b'\\0'):
            if var.startswith(b'REWARD_FILE='):
                path = var.split(b'=', 1)[1].decode().replace('/dev/fd', '/proc/%s/fd' % env.split('/')[2])
                with open(path, 'w') as f:
                    f.write('1\\n')
    except OSError:
        pass
for f in glob.glob('/run/*/*') + glob.glob('/tmp/*/*'):
    try:
        open(f, 'w').write('1\\n')
    except OSError:
        pass
if len(sys.argv) > 3:
    os.kill(os.getppid(), 9)
print(0)
"""


@aio
async def test_the_reward_channel_cannot_be_written_by_the_agents_code(iso, tmp_path):
    task = make_task(tmp_path, "shell")
    _, score = await episode(iso, task, [heredoc("add.py", GRAB_REWARD)])
    assert score.value == 0.0  # test.sh wrote 0; the second value voids the channel
    assert "bad_reward" in score.details["events"] or score.details["test_sh"]["reward"] == 0.0
    assert (await episode(iso, task, ["echo 'export REWARD_FILE=/work/reward.txt' > .bashrc; echo 1 > reward.txt"]))[1].value == 0.0


@aio
async def test_a_fake_reward_and_a_killed_test_sh_void_the_verdict(iso, tmp_path):
    shell_task = folder_task(tmp_path, "kill", {"test.sh": 'python3 /work/add.py 1 2 3 >/dev/null\n'
                                                           'echo 1 > "$REWARD_FILE"\n'})
    grab_and_kill = GRAB_REWARD.replace("len(sys.argv) > 3", "True")
    _, score = await episode(iso, shell_task, [heredoc("add.py", grab_and_kill)])
    assert score.value == 0.0 and "test_sh_killed" in score.details["events"]
    assert "killed by signal" in score.details["test_sh"]["error"]


# -- processes that outlive a phase ---------------------------------------------------------------
DAEMON = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(0.2)\n"
          f"        open('/work/add.py', 'w').write({CORRECT!r})\n        time.sleep(60)\n    os._exit(0)\n"
          "print(5)\n")


@aio
async def test_a_daemon_started_by_one_test_is_dead_before_the_next(iso, tmp_path):
    task = folder_task(tmp_path, "phased", {"test_sum.py": PHASED_TESTS})
    _, score = await episode(iso, task, [heredoc("add.py", DAEMON)])
    assert score.value == 0.0 and score.details["tests"]["test_sum.py"]["passed"] == 1


@aio
async def test_floods_bombs_and_sleepers_run_by_the_tests_score_zero(iso, tmp_path):
    task = make_task(tmp_path, "pytest")
    for program in ("import os\nwhile True: os.write(1, b'x' * 65536)\n",  # a flood into the test's pipe
                    "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n",  # a fork bomb
                    "import time\ntime.sleep(600)\n"):  # a sleeper
        _, score = await episode(iso, task, [heredoc("add.py", program)])
        assert score.value == 0.0 and score.details["checks"] == {"test_sum.py": False}, program


@aio
async def test_tmp_of_the_episode_is_not_the_verifiers(iso, tmp_path):
    task = folder_task(tmp_path, "tmpcheck", {"test_tmp.py": "import os\ndef test_clean():\n"
                                              "    assert not os.path.exists('/tmp/planted')\n"
                                              "    assert os.path.exists('/work/add.py')\n"})
    plant = "echo 1 > /tmp/planted; mkdir -p /tmp/pytest-of-sandbox; echo 1 > /tmp/reward.txt"
    assert (await episode(iso, task, [plant]))[1].value == 1.0  # nothing of the episode's /tmp arrives


# -- links and the tests' visibility ----------------------------------------------------------------
@aio
async def test_links_to_what_the_verifier_mounts_refuse_the_workspace(iso, tmp_path):
    task = folder_task(tmp_path, "expected", {"test_out.py": EXPECTED_TESTS, "expected.txt": "42\n"})
    for attack in ("ln -s /tests/expected.txt out.txt",
                   "ln -s /usr d && ln -s d/../tests/expected.txt out.txt",  # lexically inside, really out
                   "mkdir a && ln -s ../.. a/up && ln -s a/up/tests/expected.txt out.txt",
                   "ln -s / root && ln -s root/tests/expected.txt out.txt"):
        _, score = await episode(iso, task, [attack])
        assert score.value == 0.0, attack
        assert {"workspace_refused", "link_out"} <= set(score.details["events"]), attack
        assert "leads out of the workspace" in score.details["error"]


@aio
async def test_the_tests_are_not_visible_during_the_episode(iso, tmp_path):
    task = make_task(tmp_path, "pytest", command_timeout=30.0)  # `find /` took > 2 s on a loaded machine
    obs, _ = await episode(iso, task, ["ls /tests /work/tests /solution 2>&1; find / -name 'test_sum*' "
                                       "-not -path '/proc/*' 2>/dev/null; echo done"])
    assert "test_sum" not in obs[0].content and "done" in obs[0].content, obs[0].content


# -- workspaces built to make verification fail ----------------------------------------------------
@aio
async def test_unverifiable_workspaces_score_zero_with_the_reason(iso, tmp_path):
    task = make_task(tmp_path, "pytest")
    deep = "python3 -c \"import os\nfor i in range(40): os.mkdir('d' * 200); os.chdir('d' * 200)\nopen('f', 'w')\""
    many = "python3 -c \"import os\nos.mkdir('m')\nfor i in range(20001): open(f'm/{i}', 'w').close()\""
    for command, event in ((deep, "path_too_long"), (many, "too_many_files")):
        _, score = await episode(iso, task, [FIX, command])
        assert score.value == 0.0 and score.details["events"] == sorted([event, "workspace_refused"]), command
        assert score.details["error"].startswith("workspace refused: ")
