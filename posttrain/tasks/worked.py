"""Worked solutions for reasoning-gym entries: a registry `domain -> writer(entry) -> steps`.

A writer returns the solution steps (text without the final `Answer:` line) for one
reasoning-gym entry (`{"question", "answer", "metadata"}`). Domains without a writer get
the generic one (no steps: just the answer). `wrong_steps` makes a *plausible wrong*
version of the same solution (a slipped step or an off-by-a-bit result) for the base
corpus, so the embedded base learns a latent but unreliable skill.

The arithmetic writer evaluates the expression one operation at a time, in Python's own
evaluation order (`/` is floor division, as reasoning-gym defines it), printing each
intermediate expression:

    415 * 336 - 590
    = 139440 - 590
    = 138850
"""

from __future__ import annotations

import ast
import random
from typing import Any, Callable, Mapping

Entry = Mapping[str, Any]
Writer = Callable[[Entry], str]

_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a // b,  # reasoning-gym evaluates "/" as floor division
    ast.FloorDiv: lambda a, b: a // b,
}


def _const(node: ast.AST) -> int | None:
    """The integer a node stands for when it is a literal (or a negated literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _const(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


def _lit(value: int) -> ast.AST:
    return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)


def _reduce_once(node: ast.AST) -> tuple[ast.AST, bool]:
    """Apply the first operation (post-order, left first) whose operands are literals."""
    if _const(node) is not None:
        return node, False
    if isinstance(node, ast.UnaryOp):
        operand, done = _reduce_once(node.operand)
        value = _const(operand)
        if value is not None:  # -(a - b) with a - b just reduced: fold the sign in the same step
            return _lit(-value if isinstance(node.op, ast.USub) else value), True
        if done:
            return ast.UnaryOp(node.op, operand), True
        raise ValueError("cannot reduce unary operation")
    if isinstance(node, ast.BinOp):
        left, done = _reduce_once(node.left)
        if done:
            return ast.BinOp(left, node.op, node.right), True
        right, done = _reduce_once(node.right)
        if done:
            return ast.BinOp(left, node.op, right), True
        a, b = _const(left), _const(right)
        if a is None or b is None or type(node.op) not in _OPS:
            raise ValueError("unsupported expression")
        return _lit(_OPS[type(node.op)](a, b)), True
    raise ValueError(f"unsupported node {type(node).__name__}")


def expression_steps(expression: str) -> list[str]:
    """['a + b * c', 'a + bc', 'result']: each line one operation further than the last."""
    node: ast.AST = ast.parse(expression.replace("//", "/"), mode="eval").body
    steps = [ast.unparse(node)]
    for _ in range(10_000):
        node, done = _reduce_once(node)
        if not done:
            return steps
        steps.append(ast.unparse(node))
    raise ValueError("expression did not reduce")


def arithmetic_writer(entry: Entry) -> str:
    expression = entry["metadata"]["expression"]
    lines = expression_steps(expression)
    # the first line repeats the expression exactly as the question wrote it
    return "\n".join([expression.strip()] + [f"= {line}" for line in lines[1:]])


def generic_writer(entry: Entry) -> str:
    """No domain-specific steps: the solution is the answer line alone."""
    return ""


WRITERS: dict[str, Writer] = {
    "basic_arithmetic": arithmetic_writer,
    "chain_sum": arithmetic_writer,
}


def worked_steps(domain: str, entry: Entry) -> str:
    """Solution steps for `entry` (may be empty); falls back to the generic writer on any failure."""
    writer = WRITERS.get(domain, generic_writer)
    try:
        return writer(entry)
    except (ValueError, KeyError, TypeError, SyntaxError, ZeroDivisionError):
        return generic_writer(entry)


# ---------------------------------------------------------------- gold answers


def _json_coloring(entry: Entry) -> str:
    import json

    return json.dumps({str(k): v for k, v in entry["metadata"]["possible_answer"].items()})


# Domains whose `answer` is None (many valid answers, scored by a checker): one valid answer
# taken from the metadata the dataset ships. Domains absent here and without an `answer`
# (boxnet, rush_hour) have no gold: they can be evaluated but not used for SFT data.
GOLD_ANSWERS: dict[str, Callable[[Entry], str]] = {
    "graph_color": _json_coloring,
    "propositional_logic": lambda entry: str(entry["metadata"]["example_answer"]),
    "rubiks_cube": lambda entry: str(entry["metadata"]["example_correct_answer"]),
}


def gold_answer(domain: str, entry: Entry) -> str | None:
    """A correct answer for `entry`, or None when the dataset gives none."""
    if domain in GOLD_ANSWERS:
        return GOLD_ANSWERS[domain](entry)
    answer = entry.get("answer")
    return None if answer is None else str(answer)


# ---------------------------------------------------------------- plausible wrong answers


def perturb_number(text: str, rng: random.Random) -> str:
    """An integer off by a bit (±1..±10, or one digit changed); non-integers come back unchanged."""
    try:
        value = int(text.strip())
    except ValueError:
        return text
    if rng.random() < 0.5 or abs(value) < 10:
        delta = rng.choice([-10, -2, -1, 1, 2, 10])
        return str(value + delta)
    digits = list(str(abs(value)))
    pos = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[pos] and not (pos == 0 and d == "0")]
    digits[pos] = rng.choice(choices)
    return ("-" if value < 0 else "") + "".join(digits)


def wrong_arithmetic(entry: Entry, rng: random.Random) -> tuple[str, str]:
    """A slipped step: one intermediate result is off, and every later step follows from it."""
    lines = expression_steps(entry["metadata"]["expression"])
    if len(lines) < 2:
        raise ValueError("nothing to slip")
    slip = rng.randrange(1, len(lines))  # the step at which the mistake happens
    reduced = ast.parse(lines[slip], mode="eval").body
    # change one literal of the reduced expression at the slipped step, then carry on from there
    literals = [n for n in ast.walk(reduced) if isinstance(n, ast.Constant) and isinstance(n.value, int)]
    target = rng.choice(literals)
    target.value = abs(int(perturb_number(str(target.value), rng)))
    wrong = [ast.unparse(reduced)]
    try:
        node = reduced
        for _ in range(10_000):
            node, done = _reduce_once(node)
            if not done:
                break
            wrong.append(ast.unparse(node))
    except ZeroDivisionError:
        raise ValueError("slip divides by zero") from None
    steps = lines[:slip] + wrong
    answer = steps[-1]
    if answer == str(entry["answer"]):
        answer = perturb_number(answer, rng)
        steps[-1] = answer
    text = "\n".join([str(entry["metadata"]["expression"]).strip()] + [f"= {line}" for line in steps[1:]])
    return text, answer


def wrong_generic(entry: Entry, rng: random.Random) -> tuple[str, str]:
    return "", perturb_number(str(entry["answer"]), rng)


WRONG_WRITERS: dict[str, Callable[[Entry, random.Random], tuple[str, str]]] = {
    "basic_arithmetic": wrong_arithmetic,
    "chain_sum": wrong_arithmetic,
}


def wrong_steps(domain: str, entry: Entry, rng: random.Random) -> tuple[str, str]:
    """(steps, wrong answer) — a plausible mistake; falls back to an off-by-a-bit answer."""
    writer = WRONG_WRITERS.get(domain, wrong_generic)
    try:
        return writer(entry, rng)
    except (ValueError, KeyError, TypeError, SyntaxError, ZeroDivisionError):
        return wrong_generic(entry, rng)
