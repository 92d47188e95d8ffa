"""Worked arithmetic solutions: steps follow evaluation order; wrong solutions are plausibly wrong."""

from __future__ import annotations

import random

import pytest

from posttrain.domains.reasoning_gym.source import make_tasks
from posttrain.tasks.worked import expression_steps, perturb_number, worked_steps, wrong_steps


def test_expression_steps_by_hand():
    assert expression_steps("2 + 3 * 4") == ["2 + 3 * 4", "2 + 12", "14"]
    assert expression_steps("7 - 2 - 1") == ["7 - 2 - 1", "5 - 1", "4"]
    assert expression_steps("-(3 - 5) * 2") == ["-(3 - 5) * 2", "2 * 2", "4"]
    assert expression_steps("-7 / 2") == ["-7 / 2", "-4"]  # floor division, as reasoning-gym defines "/"
    assert expression_steps("5") == ["5"]


def test_worked_steps_end_in_the_gold_answer():
    # every drawn expression has at least one operation: the question's expression, then one
    # "= ..." line per operation, the last one the gold answer
    for domain in ("basic_arithmetic", "chain_sum"):
        for task in make_tasks(domain, 100, seed=5):
            expression = task.reference["metadata"]["expression"].strip()
            steps = worked_steps(domain, task.reference).splitlines()
            assert len(steps) >= 2, steps
            assert steps[0] == expression
            assert all(line.startswith("= ") for line in steps[1:]), steps
            assert steps[-1] == f"= {task.reference['answer']}"


def test_a_bare_number_is_its_own_single_step():
    # the only one-line solution: an expression with no operation left to do
    for expression, answer in [("7", "7"), ("-( 7 )", "-7")]:
        entry = {"question": f"Calculate {expression}.", "answer": answer, "metadata": {"expression": expression}}
        assert worked_steps("basic_arithmetic", entry).splitlines() == [expression]


def test_generic_domains_have_no_steps():
    task = make_tasks("leg_counting", 1, seed=0)[0]
    assert worked_steps("leg_counting", task.reference) == ""


@pytest.mark.parametrize("domain", ["basic_arithmetic", "chain_sum", "leg_counting"])
def test_wrong_steps_are_wrong_but_close(domain):
    rng = random.Random(0)
    for task in make_tasks(domain, 50, seed=9):
        steps, answer = wrong_steps(domain, task.reference, rng)
        assert answer != str(task.reference["answer"])
        int(answer)  # still a number
        if steps:
            assert steps.splitlines()[-1] == f"= {answer}"


def test_perturb_number_changes_integers_only():
    rng = random.Random(1)
    for value in ["0", "7", "-13", "123456"]:
        out = perturb_number(value, rng)
        assert out != value and int(out) is not None
    assert perturb_number("1/2", rng) == "1/2"


def test_first_line_repeats_the_question_expression_verbatim():
    entry = {"question": "Calculate -( 16 - 69 ).", "answer": "53", "metadata": {"expression": "-( 16 - 69 )"}}
    assert worked_steps("basic_arithmetic", entry).splitlines() == ["-( 16 - 69 )", "= 53"]
    steps, answer = wrong_steps("basic_arithmetic", entry, random.Random(0))
    assert steps.splitlines()[0] == "-( 16 - 69 )" and answer != "53"
