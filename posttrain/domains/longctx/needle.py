"""The `needle` verifier of the long-context probes (posttrain/domains/longctx/source.py): the hidden values,
read from the reply's answer line, in order.

    Score(1.0)  "... so the number is 4829174.\\nAnswer: 4829174"         gold ["4829174"]
    Score(0.0)  "I saw 4829174 in the text.\\nAnswer: 1234567"            (the answer line decides)
    Score(0.0)  "Answer: 4829174, 1234567"                               (more numbers than asked)
    Score(2/3)  "Answer: 4829174, 5550001, 7777777"                      gold ["4829174", "5550001", "1212121"]

The answer is the first non-empty line after the reply's last `Answer:`, else the whole reply (a
small model often answers "The secret number of the amber compass is 4829174." without the tag,
over several lines when there are several values; the probe measures recall, not the format). Its
numbers (runs of digits) are compared with `reference["values"]` position by position: the score
is the fraction of values in their place, and 0 when the answer holds more numbers than values
(listing candidates is guessing). A sample passes (score 1) only with every value exactly, in
order, and nothing else numeric.
"""

from __future__ import annotations

import re

from posttrain.verifiers.answer import ANSWER_TAG
from posttrain.core.types import Score, Task, Trajectory

_DIGITS = re.compile(r"\d+")


def answer_text(completion: str) -> str:
    """The first non-empty line after the last `Answer:` ('' if none), else the whole completion."""
    _, tag, tail = completion.rpartition(ANSWER_TAG)
    if not tag:
        return completion
    return next((line.strip() for line in tail.splitlines() if line.strip()), "")


def needle_score(gold: list[str], completion: str) -> tuple[float, list[str]]:
    """(score, the numbers found in the answer); see the module docstring."""
    found = _DIGITS.findall(answer_text(completion))
    if not gold or len(found) > len(gold):
        return 0.0, found
    return sum(a == b for a, b in zip(found, gold)) / len(gold), found


def needle(task: Task, traj: Trajectory) -> Score | None:
    ref = task.reference
    values = ref.get("values") if isinstance(ref, dict) else None
    if not values:
        return None
    value, found = needle_score([str(v) for v in values], traj.text)
    return Score(value, "needle", {"answer": found[:20]})
