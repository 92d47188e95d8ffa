"""A domain is one folder: a new package, named in POSTTRAIN_DOMAINS, registers its source, env and
verifier by name, and runs through the normal lookups with no edit to tasks/, envs/ or verifiers/
(docs/adding-a-domain.md walks through this very domain)."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from posttrain.core.types import Trajectory
from posttrain.domains import ENV_VAR, load_domains
from posttrain.envs.env import Action, Resources, make_env
from posttrain.tasks.registry import check_name, make_source_tasks
from posttrain.verifiers.registry import get_verifier, run_verifiers, task_score

INIT = '''
"""echo: repeat a word. One folder: source, env and verifier, registered by name."""
from posttrain.envs.env import register_env
from posttrain.tasks.registry import register_source
from posttrain.verifiers.registry import register

register_source("echo_word", "echo_domain.source:make_tasks", description="repeat the word you are given")
register_env("echo_word", "echo_domain.env:EchoEnv")
register("echo_word", "echo_domain.verify:echoed")
'''
SOURCE = '''
from posttrain.core.types import Task

WORDS = ("apple", "river", "stone", "cloud")


def make_tasks(n, seed, options):
    n = 4 if n is None else n
    return [Task(id=f"echo_word/{seed + i}", domain="echo_word",
                 prompt=[{"role": "user", "content": f"Say {WORDS[(seed + i) % 4]}."}],
                 reference=WORDS[(seed + i) % 4], verifiers=("echo_word", "env_score"), env="echo_word")
            for i in range(n)]
'''
ENV = '''
from posttrain.core.types import Score
from posttrain.envs.env import StepResult


class EchoEnv:
    tools = ()

    def __init__(self, resources):
        self.said = ""

    async def reset(self, task):
        return list(task.prompt)

    async def step(self, action):
        self.said = action.content or action.text
        return StepResult([], True, {})

    def state(self):
        return {"said": self.said}

    def score(self, task, state):
        return [Score(float(state["said"].strip() == task.reference), "echo_word")]

    async def close(self):
        pass
'''
VERIFY = '''
from posttrain.core.types import Score


def echoed(task, traj):
    return Score(float(task.reference in traj.text), "echo_word")
'''


@pytest.fixture
def echo_domain(tmp_path, monkeypatch):
    pkg = tmp_path / "echo_domain"
    pkg.mkdir()
    for name, text in {"__init__": INIT, "source": SOURCE, "env": ENV, "verify": VERIFY}.items():
        (pkg / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV_VAR, "echo_domain")
    assert "echo_domain" in load_domains()
    assert load_domains().count("echo_domain") == 1  # idempotent
    yield


def test_a_new_domain_runs_through_the_normal_lookups(echo_domain):
    check_name("echo_word")
    [task] = make_source_tasks("echo_word", 1, seed=1)
    assert task.reference == "river"

    async def episode(reply: str):
        env = make_env(task.env, Resources())
        try:
            await env.reset(task)
            await env.step(Action(text=reply, content=reply))
            return env.state()
        finally:
            await env.close()

    for reply, want in (("river", 1.0), ("lake", 0.0)):
        state = asyncio.run(episode(reply))
        traj = Trajectory(task_id=task.id, token_ids=(1, 2), loss_mask=(0, 1), logprobs=(0.0, -0.1),
                          prompt_len=1, text=reply, final_state=state)
        scores, errors = run_verifiers(task, traj)
        assert not errors and {s.verifier for s in scores} == {"echo_word"} and len(scores) == 2
        assert task_score(scores, task) == want


def test_an_unknown_name_is_one_line_with_a_suggestion(echo_domain):
    with pytest.raises(ValueError) as e:
        get_verifier("echo_wrd")
    assert "unknown verifier 'echo_wrd' (did you mean echo_word?)" in str(e.value)
    assert "\n" not in str(e.value)
