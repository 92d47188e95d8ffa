"""HumanEval-format files through the one eval path: the `code` verifier judges each reply in the
bubblewrap sandbox (like tests/sandbox/, these need bwrap and fail without it)."""

from __future__ import annotations

import json

import pytest

from posttrain.eval.sources import load_spec
from posttrain.eval.evaluate import evaluate_tasks
from tests.unit.eval.scripted import ScriptedEngine
from tests.unit.eval.test_sources import ADD

RIGHT = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
BODY_ONLY = "    return a + b\n"  # continues the prompt, as HumanEval completions do
RIGGED = "```python\ndef add(a, b):\n    class R:\n        __eq__ = lambda s, o: True\n    return R()\n```"


def test_humaneval_file_pass_at_k_through_the_sandbox(tmp_path, tiny_tokenizer):
    path = tmp_path / "he.jsonl"
    rows = [{**ADD, "task_id": f"HumanEval/{i}", "prompt": ADD["prompt"].replace("a + b", f"a + b, case {i}")}
            for i in range(2)]  # distinct prompts: the scripted engine tells tasks apart by prompt
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = load_spec(str(path), default_n=5, seed=0)
    engine = ScriptedEngine(tiny_tokenizer, tasks, {"HumanEval/0": [RIGHT, WRONG, BODY_ONLY, RIGGED],
                                                    "HumanEval/1": [WRONG, RIGGED, WRONG, WRONG]})
    res = evaluate_tasks(engine, tiny_tokenizer, tasks, samples=4, temperature=1.0, max_tokens=64)
    assert [r.correct for r in res.records] == [True, False, True, False] + [False] * 4
    assert all(r.scores == {"code": float(r.correct)} and not r.errors for r in res.records)
    row = res.domains["he"]
    assert row["pass@1"] == pytest.approx((2 / 4 + 0) / 2)  # 2 of 4 right on task 0, none on task 1
    assert row["pass@4"] == pytest.approx(0.5) and row["verifier_errors"] == 0
