"""The math verifier: answer extraction, math_equal (known-correct, known-wrong, adversarial, hard
timeouts from threads and the main thread), the registered verifier and verify_pairs."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import pytest

from posttrain.core.errors import DataError
from posttrain.core.types import Task, Trajectory
from posttrain.verifiers import math as vm
from posttrain.verifiers.math import extract_answer, math_equal, math_verifier, verify_pairs

SLOW = "9^{9^{9^{9}}}"  # sympy grinds on this until the deadline


@pytest.fixture(scope="module", autouse=True)
def pool():
    """Boot the worker pool once (its first use may take a while); stop it afterwards."""
    assert math_equal("\\sqrt{2}", "2^{1/2}", timeout_s=60)
    yield
    vm.close()


def traj(text: str) -> Trajectory:
    return Trajectory(task_id="m/0", token_ids=(1,), loss_mask=(1,), logprobs=(0.0,), prompt_len=0, text=text)


def task(reference, options=None) -> Task:
    meta = {"verifier_options": {"math": options}} if options else {}
    return Task(id="m/0", domain="m", prompt=({"role": "user", "content": "q"},), reference=reference,
                verifiers=("math",), metadata=meta)


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize("text,expected", [
    ("so the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),  # nested braces
    ("\\fbox{3}", "3"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces do not close the box
    ("first \\boxed{1}, finally \\boxed{2}", "2"),  # the last box
    ("\\boxed{\\boxed{5}}", "\\boxed{5}"),  # the outermost box
    ("\\boxed{7}\nAnswer: 8", "7"),  # a box wins over an Answer line
    ("work...\nAnswer: $\\frac12$.", "\\frac12"),
    ("**Final Answer:** 42", "42"),
    ("**Answer**: x = 5", "x = 5"),
    ("answer: 7\nthen 9 more words", "7"),  # an Answer line wins over the last number
    ("The result is -12.5.", "-12.5"),
    ("we sell 1,234 apples", "1,234"),
    ("it is 3/4 of it", "3/4"),
    ("no numbers here", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extraction_of_hostile_text_is_fast():
    deep = "\\boxed{" + "{" * 10_000 + "2" + "}" * 10_000 + "}"
    junk = os.urandom(1 << 20).decode("latin-1")
    t0 = time.monotonic()
    assert extract_answer(deep) == "{" * 10_000 + "2" + "}" * 10_000
    assert extract_answer("\\boxed{" * 200_000) is None  # unclosed boxes
    assert extract_answer("{" * 500_000 + "}" * 500_000) is None
    extract_answer(junk)
    assert time.monotonic() - t0 < 5.0


# ---------------------------------------------------------------- math_equal

CORRECT = [
    ("\\frac{1}{2}", "0.5"), ("0.5", "\\frac12"), ("1/2", "2/4"), ("\\dfrac{3}{4}", "0.75"), ("\\dfrac{1}{2}", "\\tfrac12"),
    ("-\\frac{1}{2}", "-0.5"), ("1000", "1,000"), ("1000000", "1,000,000"), ("3", "3.0"), ("1e-20", "10^{-20}"),
    ("\\frac{1}{3}", "0.3333333"), ("1", "1.0000001"),  # a float side: relative tolerance 1e-6
    ("\\sqrt{2}/2", "\\frac{1}{\\sqrt2}"), ("2\\sqrt{2}", "\\sqrt{8}"), ("(\\sqrt2+1)^2", "3+2\\sqrt2"),
    ("\\frac{\\sqrt{3}}{2}", "0.8660254"), ("\\pi/2", "1.5707963"), ("2\\pi", "6.2831853"), ("\\frac{\\pi}{4}", "\\pi/4"),
    ("x^2+2x", "x(x+2)"), ("(x+1)^2", "x^2+2x+1"), ("x=3", "3"), ("3", "x = 3"), ("[2,5)", "x \\in [2,5)"),
    ("10\\%", "0.1"), ("50\\%", "\\frac12"),
    ("\\{1,2\\}", "\\{2,1\\}"), ("\\{1,2,3\\}", "\\{3,1,2\\}"), ("(1,2)", "\\left(1, 2\\right)"),
    ("(-\\infty, 3)", "(-\\infty, 3)"), ("[1,2] \\cup [3,4]", "[3,4]\\cup[1,2]"), ("\\infty", "\\infty"),
    ("5", "5 apples"), ("5", "5 \\text{ apples}"),  # units/words around a number are ignored (documented)
    ("5", "\\boxed{5}"), ("5", "\\boxed{\\boxed{5}}"), ("\\text{Monday}", "Monday"), ("-3", "-3"),
]

WRONG = [
    ("\\frac{1}{2}", "0.4"), ("\\pi", "3.14"), ("1", "1.00001"), ("\\frac{\\sqrt{3}}{2}", "0.86"), ("x^2", "y^2"),
    ("(0,1]", "(0,1)"), ("[1,2]", "(1,2)"), ("(1,2)", "(2,1)"), ("(1,2,3)", "(1,3,2)"), ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("(-\\infty, 3)", "(-\\infty,3]"), ("7", ""), ("7", "seven"),
]

ADVERSARIAL = [
    ("1/2^99", "1/2^98"), ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),  # math-verify's rounding says equal
    ("\\sqrt{2}/2^{99}", "\\sqrt{2}/2^{98}"), ("x + 1/2^{99}", "x + 1/2^{98}"), ("10^{20}x", "(10^{20}+1)x"),
    ("x=10^{-20}", "x=2\\cdot 10^{-20}"), ("(1, 10^{-20})", "(1, 2\\cdot 10^{-20})"),
    ("123456789012345678901234567890", "123456789012345678901234567891"), ("2^{100}", "2^{100}+1"),
    ("3", "1, 2, 3"), ("3", "2 or 3"), ("3", "\\boxed{2} or \\boxed{3}"), ("3", "\\pm 3"), ("3", "\\{2, 3\\}"),
    ("3", "x = 2 \\text{ or } x = 3"), ("3", "2 \\lor 3"), ("3", "[2, 3]"), ("3", "3; 4"),
    ("4", "\x00\x01\xff\ufffd junk"), ("4", "4" * 100_000), ("2", "\\boxed{" + "{" * 10_000 + "2" + "}" * 10_000 + "}"),
]


@pytest.mark.parametrize("gold,answer", CORRECT)
def test_correct_answers_match(gold, answer):
    assert math_equal(gold, answer)


@pytest.mark.parametrize("gold,answer", WRONG + ADVERSARIAL)
def test_wrong_and_adversarial_answers_do_not_match(gold, answer):
    assert not math_equal(gold, answer)


def test_guards_catch_what_math_verify_alone_accepts():
    from math_verify import parse, verify

    for gold, answer in [("1/2^99", "1/2^98"), ("\\sqrt{2}/2^{99}", "\\sqrt{2}/2^{98}"), ("x + 1/2^{99}", "x + 1/2^{98}"),
                         ("x=10^{-20}", "x=2\\cdot 10^{-20}")]:
        assert verify(parse(f"${gold}$"), parse(f"${answer}$"))  # math-verify alone: a false positive
        assert not math_equal(gold, answer)


def test_rel_tol_applies_only_with_a_float_side():
    assert not math_equal("1", "1.0001")
    assert math_equal("1", "1.0001", rel_tol=1e-3)
    assert math_equal("\\pi", "3.1416", rel_tol=1e-4)
    assert not math_equal("1000", "1001", rel_tol=1e-2)  # both exact: compared exactly
    assert not math_equal("1/2^99", "1/2^98", rel_tol=0.9)


def test_hedging_reasons_are_reported():
    assert vm._equal("3", "2 or 3", 5, 1e-6) == (False, "hedged: candidates joined by or/and")
    assert vm._equal("3", "1, 2, 3", 5, 1e-6) == (False, "hedged: a list where the gold is one value")
    assert vm._equal("3", "\\boxed{2} or \\boxed{3}", 5, 1e-6)[1].startswith("hedged")
    assert math_equal("1, 2", "2, 1") and math_equal("x=2 \\text{ or } x=3", "x=2 \\text{ or } x=3")  # gold lists
    assert math_equal("\\frac12", "\\boxed{1/2}, that is \\boxed{0.5}")  # several boxes, all equal the gold
    assert not math_equal("5", "\\boxed{5}" * 5 + "\\boxed{6}")


def test_non_strings_never_raise():
    assert not math_equal(None, "1") and not math_equal("1", 1)


@pytest.mark.parametrize("answer", [SLOW, "9^9^9^9", "{" * 1500 + "2" + "}" * 1500])
def test_slow_input_returns_false_within_the_timeout(answer):
    t0 = time.monotonic()
    assert vm._equal("2", answer, 1.0, 1e-6)[0] is False
    assert time.monotonic() - t0 < 1.0 + 0.5
    assert math_equal("\\sqrt{8}", "2\\sqrt{2}")  # the pool still works


def test_threads_with_a_tiny_timeout_all_return_in_time():
    timeout_s, took = 0.3, []

    def call():
        t0 = time.monotonic()
        assert math_equal("1", SLOW, timeout_s=timeout_s) is False
        took.append(time.monotonic() - t0)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(took) == 8 and max(took) < timeout_s + 1.0, took
    assert math_equal("\\frac{6}{4}", "1.5") and math_equal("\\sqrt{12}", "2\\sqrt{3}", timeout_s=30)


def test_a_worker_that_stops_answering_is_killed_at_the_deadline():
    """A worker stuck in C code cannot be interrupted by its own timer: freeze every worker."""
    assert math_equal("\\sqrt{18}", "3\\sqrt{2}", timeout_s=30)
    frozen = [w.proc for w in list(vm._pool().idle)]
    for p in frozen:
        os.kill(p.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    ok, err = vm._equal("\\sqrt{50}", "5\\sqrt{2}", 0.5, 1e-6)
    assert (ok, err) == (False, "timeout (worker killed)") and time.monotonic() - t0 < 1.5
    for p in frozen:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
    assert frozen[-1].poll() is not None  # the one that was used is gone
    assert math_equal("\\sqrt{50}", "5\\sqrt{2}", timeout_s=30)


def test_close_then_use_again():
    vm.close()
    assert math_equal("\\sqrt{27}", "3\\sqrt{3}", timeout_s=60)


# ---------------------------------------------------------------- the registered verifier


def test_verifier_scores_and_details():
    s = math_verifier(task("\\frac{1}{2}"), traj("So \\boxed{0.5}."))
    assert (s.value, s.verifier, s.details) == (1.0, "math", {"extracted": "0.5", "gold": "\\frac{1}{2}"})
    assert math_verifier(task({"answer": "3"}), traj("Answer: 3")).value == 1.0
    assert math_verifier(task(3), traj("it is 3")).value == 1.0
    assert math_verifier(task("3"), traj("Answer: 4")).value == 0.0
    assert math_verifier(task("0.5"), traj("\\boxed{1/2}, i.e. \\boxed{\\frac{1}{2}}")).value == 1.0
    assert math_verifier(task(None), traj("3")) is None
    assert math_verifier(task({"tests": []}), traj("3")) is None


def test_verifier_hedges_and_hostile_completions_score_zero():
    for text in ["\\boxed{2} or \\boxed{3}", "It is 2 or 3", "Answer: 1, 2, 3", "no answer", "\\boxed{" * 100_000,
                 "\\boxed{" + SLOW + "}", "\\boxed{" + "9" * 50_000 + "}"]:
        s = math_verifier(task("3", {"timeout_s": 0.5}), traj(text))
        assert s.value == 0.0 and s.details.get("error"), (text[:40], s.details)
        assert len(json.dumps(s.details)) < 1000
    junk = random.Random(0).randbytes(1 << 20).decode("latin-1")
    assert math_verifier(task("3.25"), traj(junk)).value == 0.0


def test_verifier_rel_tol_option():
    assert math_verifier(task("2", {"rel_tol": 1e-2}), traj("Answer: 2.01")).value == 1.0
    assert math_verifier(task("2"), traj("Answer: 2.01")).value == 0.0


# ---------------------------------------------------------------- verify_pairs


def write_lines(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_verify_pairs_round_trip(tmp_path):
    pairs = [{"gold": "\\frac12", "answer": "0.5", "id": 7}, {"gold": "1/2^99", "answer": "1/2^98", "meta": {"k": [1]}},
             {"gold": "\\sqrt{2}", "answer": "2^{1/2}"}, {"gold": "3", "answer": "2 or 3"}]
    src = write_lines(tmp_path / "pairs.jsonl", pairs[:2] + [""] + pairs[2:])  # a blank line is skipped
    summary = verify_pairs(src, tmp_path / "out" / "results.jsonl")
    assert summary == {"n": 4, "correct": 2, "accuracy": 0.5, "errors": 0}
    rows = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert rows == [{**p, "correct": c} for p, c in zip(pairs, [True, False, True, False])]


@pytest.mark.parametrize("bad,message", [
    ("not json", "not valid JSON"), ([1, 2], "expected a JSON object"), ({"answer": "1"}, "'gold' is missing"),
    ({"gold": "1", "answer": 1}, "'answer' is a int, not a string"),
])
def test_verify_pairs_bad_line_names_file_and_line(tmp_path, bad, message):
    src = write_lines(tmp_path / "p.jsonl", [{"gold": "1", "answer": "1"}, bad])
    out = tmp_path / "r.jsonl"
    out.write_text("old\n")
    with pytest.raises(DataError, match=f"p.jsonl:2: {message}"):
        verify_pairs(src, out)
    assert out.read_text() == "old\n"  # nothing written, no temp file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl", "r.jsonl"]


def test_verify_pairs_1000_pairs_take_seconds(tmp_path):
    pairs = [{"gold": f"\\frac{{{i}}}{{7}}", "answer": f"{i}/7" if i % 3 else f"\\sqrt{{{i * i}}}/7"} for i in range(1, 1001)]
    t0 = time.monotonic()
    summary = verify_pairs(write_lines(tmp_path / "p.jsonl", pairs), tmp_path / "r.jsonl")
    assert summary["n"] == 1000 and summary["correct"] == 1000 and time.monotonic() - t0 < 20
