"""Built-in verifiers: exact match and numeric match.

All read the answer from the completion's last `Answer:` line (else its last non-empty line),
the format every posttrain prompt asks for.
"""

from __future__ import annotations

import math
import re

from posttrain.core.types import Score, Task, Trajectory
from posttrain.verifiers.answer import extract_answer


def _normalise(text: str) -> str:
    text = text.strip().strip("`").strip()
    text = re.sub(r"\s+", " ", text)
    return text.rstrip(".").lower()


def _gold(task: Task) -> str | None:
    ref = task.reference
    if isinstance(ref, dict):
        ref = ref.get("answer")
    return None if ref is None else str(ref)


def exact(task: Task, traj: Trajectory) -> Score | None:
    gold = _gold(task)
    if gold is None:
        return None
    answer = extract_answer(traj.text)
    return Score(float(_normalise(answer) == _normalise(gold)), "exact", {"answer": answer[:200]})


_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def parse_number(text: str) -> float | None:
    """The last number in `text` (thousands separators allowed), else None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def numeric(task: Task, traj: Trajectory) -> Score | None:
    gold_text = _gold(task)
    gold = parse_number(gold_text) if gold_text is not None else None
    if gold is None:
        return None
    answer = parse_number(extract_answer(traj.text))
    rel = float(task.metadata.get("rel_tol", 1e-6)) if task.metadata else 1e-6
    ok = answer is not None and math.isfinite(answer) and math.isclose(answer, gold, rel_tol=rel, abs_tol=1e-9)
    return Score(float(ok), "numeric", {"answer": answer})
