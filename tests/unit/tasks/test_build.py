"""`posttrain tasks build`: a user's CSV / JSONL becomes a validated, deduplicated, split task set
that `posttrain eval` and RL load; golds run through their real verifiers (code: the bwrap sandbox)."""

from __future__ import annotations

import csv
import json
import random
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.core.errors import ConfigError, DataError
from posttrain.eval.sources import load_spec
from posttrain.tasks import dedup
from posttrain.tasks.build import BuildOptions, GoldError, build_tasks
from posttrain.cli.tasks import app
from posttrain.tasks.jsonl import load_tasks
from posttrain.core.types import Trajectory
from posttrain.verifiers import run_verifiers

ROOT = Path(__file__).resolve().parents[3]


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def reply(text: str) -> Trajectory:
    return Trajectory(task_id="t", token_ids=(), loss_mask=(), logprobs=(), prompt_len=0, text=text)


LONG = ("A farmer has a rectangular field that is twice as long as it is wide and he walks around "
        "the whole edge of the field every single morning before breakfast to check the fences")


def test_qa_csv_through_the_cli_loads_in_eval_and_rl(tmp_path):
    src = write_csv(tmp_path / "arith.csv", ["id", "question", "answer"], [
        ["a", "What is 2+3?", "5"],
        ["b", "what is 2+3", "5"],  # exact duplicate after normalising case and punctuation
        ["c", "What is 2-3?", "-1"],  # an operator is kept: not a duplicate
        ["d", f"{LONG} How long is it?", "40"],
        ["e", f"{LONG} today. How long is it?", "40"],  # near duplicate of d
        *[[f"x{i}", f"What is {i} times {i + 1} plus {i}?", str(i * (i + 1) + i)] for i in range(8)],
    ])
    out = tmp_path / "out"
    refused = CliRunner().invoke(app, ["build", str(src), "--kind", "qa", "--verifier", "numeric", "--out", str(out)])
    assert refused.exit_code != 0 and "2 rows bad" in refused.output  # both duplicates, in one pass
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]  # nothing but the report
    assert json.loads((out / "report.json").read_text())["written"] is False
    res = CliRunner().invoke(app, ["build", str(src), "--kind", "qa", "--verifier", "numeric", "--out", str(out),
                                   "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert "train.jsonl" in res.output and "duplicates: near" in res.output and "dropped 2 bad rows" in res.output

    report = json.loads((out / "report.json").read_text())
    assert report["counts"] == {"rows": 13, "failing": 0, "duplicates": {"exact": 1, "near": 1},
                                "leaks": {"exact": 0, "near": 0}, "train": 10, "eval": 1}
    assert [(d["row"], d["of"]) for d in report["duplicates"]] == [(f"{src}:3", f"{src}:2"), (f"{src}:6", f"{src}:5")]
    assert report["verifier"] == "numeric" and report["domain"] == "arith"  # eval: round(0.1 x 11) = 1

    evals = load_spec(str(out / "eval.jsonl"), 10, 0)  # what `posttrain eval --tasks OUT/eval.jsonl` loads
    train = load_tasks(out / "train.jsonl", "arith")  # what an RL `tasks: [{name, path}]` entry loads
    assert len(evals) == 1 and len(train) == 10
    ids = {t.id for t in evals + train}
    assert ids == {f"arith/{k}" for k in ["a", "c", "d"] + [f"x{i}" for i in range(8)]}
    task = next(t for t in train + evals if t.id == "arith/c")
    assert task.verifiers == ("numeric",) and task.reference == "-1"
    assert task.prompt[0]["content"].startswith("What is 2-3?") and "Answer: <answer>" in task.prompt[0]["content"]
    assert run_verifiers(task, reply("... so\nAnswer: -1"))[0][0].value == 1.0
    assert run_verifiers(task, reply("Answer: 1"))[0][0].value == 0.0


def test_seeded_split_is_reproducible_and_follows_the_fraction(tmp_path):
    src = write_jsonl(tmp_path / "q.jsonl", [{"question": f"Name the number {i} in words, please", "answer": f"n{i}"}
                                             for i in range(20)])

    def eval_ids(seed: int, out: str) -> list[str]:
        report = build_tasks(src, tmp_path / out, BuildOptions(kind="qa", eval_fraction=0.25, seed=seed))
        assert (report.train, report.eval) == (15, 5)
        return [r["id"] for r in lines(tmp_path / out / "eval.jsonl")]

    first = eval_ids(0, "a")
    assert eval_ids(0, "b") == first and eval_ids(1, "c") != first
    assert lines(tmp_path / "a" / "eval.jsonl")[0]["verifier"] == "exact"  # the qa default


def test_leakage_between_given_splits_is_reported_and_removed_from_eval(tmp_path):
    src = write_csv(tmp_path / "s.csv", ["question", "answer", "split"], [
        ["What is the capital of France?", "Paris", "train"],
        [f"{LONG} How wide is it?", "20", "train"],
        ["What is the capital of Peru?", "Lima", "eval"],
        ["what is the capital of FRANCE", "Paris", "eval"],  # exact leak
        [f"{LONG} today. How wide is it?", "20", "Eval"],  # near leak
        ["What is the capital of Peru?", "Lima", "eval"],  # a duplicate within eval
    ])
    with pytest.raises(GoldError) as e:  # every bad row at once: two leaks and a duplicate
        build_tasks(src, tmp_path / "out", BuildOptions(kind="qa"))
    assert [f.row for f in e.value.failures] == [f"{src}:5", f"{src}:6", f"{src}:7"]
    assert e.value.failures[2].reason == "duplicate of line 4 (exact)"
    report = build_tasks(src, tmp_path / "out", BuildOptions(kind="qa", drop_failing=True))
    assert [(r.row, r.of, r.kind) for r in report.leaks] == [(f"{src}:5", f"{src}:2", "exact"),
                                                             (f"{src}:6", f"{src}:3", "near")]
    assert [(r.row, r.kind) for r in report.duplicates] == [(f"{src}:7", "exact")]
    assert [r["answer"] for r in lines(tmp_path / "out" / "eval.jsonl")] == ["Lima"]
    assert len(lines(tmp_path / "out" / "train.jsonl")) == 2
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["counts"]["leaks"] == {"exact": 1, "near": 1} and saved["settings"]["split_column"] is True


def test_failing_gold_writes_nothing_unless_dropped(tmp_path):
    src = write_csv(tmp_path / "n.csv", ["question", "answer"], [["What is 6*7?", "42"], ["Capital of Peru?", "Lima"],
                                                                 ["What is 1+1?", "two"]])
    out = tmp_path / "out"
    with pytest.raises(GoldError) as e:
        build_tasks(src, out, BuildOptions(kind="qa", verifier="numeric"))
    assert str(e.value).startswith(f"{src}:3: gold fails verifier numeric: it cannot judge it")
    assert "and 1 more bad row;" in str(e.value)
    assert [f.row for f in e.value.failures] == [f"{src}:3", f"{src}:4"]
    assert [p.name for p in out.iterdir()] == ["report.json"]  # the report only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.csv", "out"]  # no temp dir left either

    report = build_tasks(src, out, BuildOptions(kind="qa", verifier="numeric", drop_failing=True))
    assert len(report.failing) == 2 and report.train + report.eval == 1
    saved = json.loads((out / "report.json").read_text())
    assert saved["counts"]["failing"] == 2 and saved["failing"][0]["row"] == f"{src}:3"


def test_existing_out_is_refused_without_force(tmp_path):
    src = write_csv(tmp_path / "q.csv", ["question", "answer"], [["Is it?", "yes"], ["Is it not?", "no"]])
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        build_tasks(src, out, BuildOptions(kind="qa"))
    assert (out / "keep.txt").read_text() == "mine"
    build_tasks(src, out, BuildOptions(kind="qa", force=True))
    assert sorted(p.name for p in out.iterdir()) == ["eval.jsonl", "report.json", "train.jsonl"]


def test_code_rows_are_checked_in_the_sandbox(tmp_path):
    add = {"id": "add", "prompt": "Write add(a, b).", "solution": "import math\ndef add(a, b):\n    return a + b",
           "tests": "import math\nassert add(1, 2) == 3\nfor x in range(3):\n    assert add(x, 0) == x"}
    sq = {"id": "sq", "prompt": "Write sq(x), the square of x.", "solution": "def sq(x):\n    return x * x",
          "tests": ["assert sq(3) == 9", "assert sq(-2) == 4"]}
    inc = {"id": "inc", "prompt": "Write inc(x), x plus one.", "solution": "def inc(x):\n    return x + 1",
           "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"}
    neg = {"id": "neg", "prompt": "Write neg(x).", "solution": "def neg(x):\n    return x", "tests": "assert neg(2) == -2"}
    src = write_jsonl(tmp_path / "code.jsonl", [add, sq, inc, neg])
    with pytest.raises(GoldError, match=r"code\.jsonl:4: gold fails verifier code: scored 0 \(0/1 tests passed"):
        build_tasks(src, tmp_path / "out", BuildOptions(kind="code"))

    write_jsonl(src, [add | {"split": "train"}, sq | {"split": "train"}, inc | {"split": "eval"}])
    report = build_tasks(src, tmp_path / "out", BuildOptions(kind="code"))
    assert (report.train, report.eval, report.verifier) == (2, 1, "code")
    add = next(r for r in lines(tmp_path / "out" / "train.jsonl") if r["id"] == "code/add")
    assert add["answer"] == {"tests": ["assert add(1, 2) == 3", "for x in range(3):\n    assert add(x, 0) == x"],
                             "setup": "import math"}
    (task,) = load_spec(str(tmp_path / "out" / "eval.jsonl"), 10, 0)
    assert task.verifiers == ("code",) and task.limits.max_new_tokens == 512
    right, wrong = "```python\ndef inc(x):\n    return x + 1\n```", "```python\ndef inc(x):\n    return x\n```"
    assert [run_verifiers(task, reply(r))[0][0].value for r in (right, wrong)] == [1.0, 0.0]


@pytest.mark.parametrize("header, row, message", [
    (["question", "answer", "note"], ["q", "a", "n"], "unknown column 'note' (expected some of question, answer, id, split)"),
    (["question", "answer"], ["q", " "], ":2: empty 'answer'"),
    (["question", "answer", "split"], ["q", "a", "test"], ":2: 'split' must be train or eval, got 'test'"),
    (["question", "answer"], ["q", "a", "extra"], ":2: 3 fields, the header has 2"),
    (["question", "answer", "id"], ["q", "a", "x"], ":3: duplicate id 'x' (first on"),
])
def test_bad_qa_rows_are_one_line_naming_the_row(tmp_path, header, row, message):
    src = write_csv(tmp_path / "bad.csv", header, [row, ["another q", "b", "x"]] if "duplicate" in message else [row])
    with pytest.raises(DataError) as e:
        build_tasks(src, tmp_path / "out", BuildOptions(kind="qa"))
    assert message in str(e.value) and "\n" not in str(e.value)
    out = tmp_path / "out"
    assert not out.exists() or [p.name for p in out.iterdir()] == ["report.json"]  # no task file written


@pytest.mark.parametrize("record, message", [
    ({"prompt": "p", "solution": "s"}, ":1: missing key 'tests' (assert statements; or 'test' with 'entry_point')"),
    ({"prompt": "p", "solution": "s", "tests": "x = 1"}, ":1: 'tests' holds no assert statement"),
    ({"prompt": "p", "solution": "s", "tests": "assert f(("}, ":1: 'tests' is not valid Python"),
    ({"prompt": "p", "solution": "s", "test": "def check(c): pass"}, ":1: missing key 'entry_point'"),
    ({"prompt": "p", "solution": "s", "tests": [], "id": "k"}, ":1: 'tests' must be assert statements"),
])
def test_bad_code_rows_are_one_line_naming_the_row(tmp_path, record, message):
    src = write_jsonl(tmp_path / "bad.jsonl", [record])
    with pytest.raises(DataError) as e:
        build_tasks(src, tmp_path / "out", BuildOptions(kind="code"))
    assert message in str(e.value)


def test_bad_options(tmp_path):
    src = write_csv(tmp_path / "q.csv", ["question", "answer"], [["q", "a"]])
    for opts, message in [(BuildOptions(kind="qa", verifier="numerik"), "unknown verifier 'numerik'"),
                          (BuildOptions(kind="code", verifier="exact"), "code tasks are verified by 'code'"),
                          (BuildOptions(kind="mcq"), "--kind must be one of qa, code"),
                          (BuildOptions(kind="qa", near_threshold=0), "--near-threshold must be in (0, 1]")]:
        with pytest.raises(ConfigError) as e:
            build_tasks(src, tmp_path / "out", opts)
        assert message in str(e.value)
    with pytest.raises(DataError, match="expected a .jsonl or .csv file"):
        build_tasks(tmp_path / "q.txt", tmp_path / "out", BuildOptions(kind="qa"))


def test_missing_column_is_one_error_line_and_exit_2(tmp_path):
    src = write_csv(tmp_path / "qa.csv", ["question", "id"], [["What is 2+3?", "a"]])
    out = tmp_path / "out"
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "posttrain"), "tasks", "build", str(src), "--kind", "qa",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert err == [f"error: {src}: missing column 'answer' (have: question, id)"], proc.stderr
    assert not out.exists()


def test_near_index_finds_exactly_what_all_pairs_find():
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(12)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 9))) for _ in range(300)]
    grams = [dedup.ngrams(dedup.normalise(t)) for t in texts]
    for threshold in (0.3, 0.5, 0.8, 1.0):
        index = dedup.NearIndex(threshold, grams)
        for i, g in enumerate(grams[:150]):
            index.add(i, g)
        for g in grams[150:]:
            best = max((dedup.jaccard(g, h) for h in grams[:150]), default=0.0)
            hit = index.find(g)
            assert (hit[1] if hit else None) == (best if best >= threshold else None)


def test_normalise_keeps_what_changes_a_problem():
    assert dedup.normalise("  What IS 2.5 + 1,000?\n") == "what is 2.5 + 1,000"
    assert dedup.normalise("What is 2+3?") != dedup.normalise("What is 2-3?")
    assert dedup.deduplicate(["Say “hi”, now!", "say hi now", "say hi later"]) == [dedup.Match(1, 0, "exact", 1.0)]



def test_every_bad_row_is_reported_in_one_pass(tmp_path):
    """The issue's file: a non-numeric answer on line 4 and a duplicate of line 2 on line 5, plus a
    malformed row: all three in one run, in the terminal and in report.json; nothing else written."""
    src = write_csv(tmp_path / "qa.csv", ["question", "answer"], [
        ["What is 6*7?", "42"], ["What is 2+2?", "4"], ["What is 1+1?", "two"], ["what is 6*7", "42"],
        ["", "3"], ["What is 3+4?", "7"],
    ])
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["build", str(src), "--kind", "qa", "--verifier", "numeric", "--out", str(out)])
    assert res.exit_code != 0
    with pytest.raises(GoldError) as e:
        build_tasks(src, tmp_path / "out2", BuildOptions(kind="qa", verifier="numeric"))
    rows = [(f.row.rpartition(":")[2], f.reason) for f in e.value.failures]
    assert [r for r, _ in rows] == ["4", "5", "6"]
    assert rows[0][1].startswith("gold fails verifier numeric") and rows[1][1] == "duplicate of line 2 (exact)"
    assert "empty 'question'" in rows[2][1]
    saved = json.loads((out / "report.json").read_text())
    assert saved["written"] is False and saved["counts"]["failing"] == 2 and saved["counts"]["duplicates"]["exact"] == 1
    assert "\n" not in str(e.value) and "and 2 more bad rows" in str(e.value)
